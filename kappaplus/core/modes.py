"""The three ways one job runs, and what each implies (the one place mode behaviour is decided).

- ``stream``: production; reads Kafka, runs until stopped, processing-time trigger.
- ``backfill``: reads the lake (a Hive table) as a stream over ``[start, end)``, slice by slice,
  ``Trigger.AvailableNow``; writes to backfill targets; ends at its end.
- ``bootstrap``: the lambda source: the lake up to a cutoff, then Kafka; then runs like a stream.

>>> Mode("backfill").reads_lake, Mode.STREAM.reads_kafka, Mode.BOOTSTRAP.has_end
(True, True, False)
>>> Mode.BACKFILL == "backfill"
True
"""

from __future__ import annotations

from enum import StrEnum


class Mode(StrEnum):
    """A run mode; equal to its name as a string (``Mode.STREAM == "stream"``)."""

    STREAM = "stream"
    BACKFILL = "backfill"
    BOOTSTRAP = "bootstrap"

    @property
    def reads_kafka(self) -> bool:
        """Inputs bind to their Kafka topic."""
        return self is not Mode.BACKFILL

    @property
    def reads_lake(self) -> bool:
        """Inputs bind to their Hive table (the lake)."""
        return self is not Mode.STREAM

    @property
    def has_end(self) -> bool:
        """The run stops by itself at the end of its event-time range."""
        return self is Mode.BACKFILL

    @property
    def writes_backfill_targets(self) -> bool:
        """Outputs go to the backfill targets (``<table>_backfill`` by default)."""
        return self is Mode.BACKFILL


MODES: tuple[str, ...] = tuple(m.value for m in Mode)
"""The mode names, in the order help texts list them."""
