"""Side outputs: the rows an output query's batch sets aside instead of writing them.

Two kinds, one mechanism (:class:`SideOutput`):

- dead letters of a Kafka input (:mod:`.dead_letter_tap`): records that cannot be decoded or
  whose event time is out of bounds, published *before* the batch's rows are committed;
- late rows of an output (:mod:`.late_rows`): rows the watermark drops, kept in a table or
  topic, published *after* the rows.

Each is planned when the run is bound (a plan: target and staging directory), tapped on the
executors while the batch runs (a ``mapInArrow`` stage that writes what it sets aside to
``<staging>/<batch id>/``), and published by the driver in the output's ``foreachBatch``.
Staging is keyed by batch id and cleared before each attempt, and publishing replaces a
batch's rows in a table (or keys them in a topic), so a replayed batch replaces rather
than adds. Bootstrap and backfill dead letters are staged by their sources and published
when the run ends (:mod:`.staged_dead_letters`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Protocol

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class SideOutput(Protocol):
    """The driver side of a side output, called by the output's ``foreachBatch``."""

    publish_before_rows: ClassVar[bool]
    """Published before the batch's rows are committed (dead letters: a crash in between
    replays both) or after them (late rows: they are known once the batch has run)."""

    def before(self, batch_id: int) -> None:
        """Forget what an earlier attempt of ``batch_id`` staged: this attempt stages anew."""
        ...

    def publish(self, batch: DataFrame, batch_id: int) -> int:
        """Publish what the batch (already run) staged; how many rows."""
        ...


__all__ = ["SideOutput"]
