"""The three ways one job runs, and what each implies.

What a mode implies is decided here (:class:`Mode`'s properties, for every layer) and in
the run's strategies (:mod:`kappaplus.runtime.binding.modes`: how a mode reads an input and
what it publishes when the run ends); nowhere else compares a mode with a name
(``tests/unit/test_modes_and_durations.py`` checks it).

- ``stream``: production; reads Kafka, runs until stopped, processing-time trigger.
- ``backfill``: reads the lake (a Hive table) as a stream over ``[start, end)``, slice by slice,
  ``Trigger.AvailableNow``; writes to backfill targets; ends at its end.
- ``bootstrap``: the lambda source: the lake up to a cutoff, then Kafka; then runs like a stream.

>>> Mode("backfill").reads_lake, Mode.STREAM.reads_kafka, Mode.BOOTSTRAP.has_end
(True, True, False)
>>> [m.lake_bound for m in Mode]
[None, 'end', 'cutoff']
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

    @property
    def hands_over(self) -> bool:
        """Reads the lake up to a cutoff, then Kafka (the lambda source)."""
        return self.reads_lake and self.reads_kafka

    @property
    def lake_bound(self) -> str | None:
        """The run option that ends the lake's range: ``end`` (a backfill), ``cutoff`` (a
        bootstrap), or None (a stream reads no lake)."""
        if not self.reads_lake:
            return None
        return "end" if self.has_end else "cutoff"

    @property
    def keeps_late_rows(self) -> bool:
        """Outputs with a ``late`` target keep the rows their watermark drops."""
        return self is Mode.STREAM

    @property
    def dead_letters_per_batch(self) -> bool:
        """A Kafka input's dead letters are published by the output queries batch by batch;
        in the other modes the sources stage them and the run publishes them at its end."""
        return not self.reads_lake

    @property
    def follows_promoted_backfill(self) -> bool:
        """May write a table promoted from a backfill (``kappa promote``): production
        carries on from the backfill's rows instead of competing with them."""
        return self is Mode.STREAM


MODES: tuple[str, ...] = tuple(m.value for m in Mode)
"""The mode names, in the order help texts list them."""
