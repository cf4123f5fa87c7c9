"""The micro-batch's timestamp, read in a task from the query's offset log.

``max_future`` measures an event time from the micro-batch's timestamp (Spark's
``current_timestamp()`` in a streaming query), which Spark writes in the offset log before
the batch runs and reads back when it replays the batch, so a replay judges each record as
the first run did. A check that runs inside the Kafka source's read
(:mod:`kappaplus.connectors.kafka.read_pass`) has no column to take it from; it reads the
same figure where Spark keeps it: ``<checkpoint>/offsets/<batch id>`` of the query the task
serves (Spark's task-local ``sql.streaming.queryId`` and ``streaming.sql.batchId``), among
the output queries' checkpoints under the run's directory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kappaplus.core.errors import StateError


def batch_timestamp_ms(checkpoint: Path, batch_id: str) -> int:
    """``batchTimestampMs`` of batch ``batch_id`` in ``checkpoint``'s offset log.

    >>> import tempfile, pathlib
    >>> cp = pathlib.Path(tempfile.mkdtemp()); (cp / "offsets").mkdir()
    >>> _ = (cp / "offsets" / "7").write_text('v1\\n{"batchTimestampMs":1764374400000}\\n{}')
    >>> batch_timestamp_ms(cp, "7")
    1764374400000
    """
    from kappaplus.runtime.state.records import offset_log_metadata

    try:
        return int(offset_log_metadata(checkpoint, int(batch_id))["batchTimestampMs"])
    except (OSError, IndexError, KeyError, TypeError, ValueError) as exc:
        raise StateError(
            f"{checkpoint / 'offsets' / batch_id}: cannot read the micro-batch's timestamp "
            f"from the offset log ({type(exc).__name__}: {exc}); is the run's checkpoint "
            "directory readable from the executors?"
        ) from None


@dataclass
class MicroBatchTime:
    """The timestamp of the micro-batch a task serves, in epoch microseconds.

    ``checkpoints``: the run's directory, whose sub-directories are its output queries'
    checkpoints (:func:`kappaplus.runtime.binding.outputs.plan_output`). Which one a task
    serves is found once per process and query from the checkpoint's ``metadata`` id."""

    checkpoints: str
    _by_query: dict[str, Path] = field(default_factory=dict, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        return {"checkpoints": self.checkpoints, "_by_query": {}}

    def micros(self, context: Any) -> int:
        """The timestamp of the batch of ``context`` (a ``TaskContext``)."""
        from kappaplus.runtime.side_outputs.late_rows import BATCH_ID_PROPERTY, QUERY_ID_PROPERTY

        query_id = None if context is None else context.getLocalProperty(QUERY_ID_PROPERTY)
        batch_id = None if context is None else context.getLocalProperty(BATCH_ID_PROPERTY)
        if not query_id or batch_id in (None, ""):
            raise StateError(
                "max_future needs the micro-batch's timestamp, and this task runs no "
                "streaming query's batch (no sql.streaming.queryId / streaming.sql.batchId)"
            )
        checkpoint = self._checkpoint(str(query_id))
        return batch_timestamp_ms(checkpoint, str(batch_id)) * 1000

    def _checkpoint(self, query_id: str) -> Path:
        from kappaplus.runtime.side_outputs.late_rows import query_id_of

        found = self._by_query.get(query_id)
        if found is not None:
            return found
        root = Path(self.checkpoints)
        candidates = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
        for candidate in candidates:
            if query_id_of(str(candidate)) == query_id:
                self._by_query[query_id] = candidate
                return candidate
        raise StateError(
            f"{root}: no output checkpoint of query {query_id} (max_future needs its offset "
            "log); is the run's checkpoint directory readable from the executors?"
        )
