"""The observed counts of the micro-batch under way, read in its ``foreachBatch`` call.

Spark reports a batch's observed metrics (``Dataset.observe``) in its progress event, after
it has committed the batch. The output writer needs them before (it notes the batch beside
the checkpoint, :mod:`kappaplus.runtime.state.batch_counts`): they are the query's current
execution's (``StreamExecution.lastExecution``, the batch being written), complete once the
writer has run the batch.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def current_batch_metrics(spark: SparkSession, query_name: str) -> dict[str, dict[str, int]] | None:
    """The whole-number observed counts of the batch the active query ``query_name`` is
    writing, by metric name; None when they cannot be read (logged at debug level).
    ``spark``: the session that started the query (a batch's session is a clone that
    knows no active query)."""
    try:
        jspark: Any = spark._jsparkSession  # type: ignore[attr-defined]
        found = [q for q in jspark.streams().active() if q.name() == query_name]
        if not found:
            log.debug("query %s: not among the session's active queries", query_name)
            return None
        execution = found[0].streamingQuery().lastExecution()
        if execution is None:
            return None
        entries = execution.observedMetrics().iterator()
        observed: dict[str, dict[str, int]] = {}
        while entries.hasNext():
            entry = entries.next()
            values = json.loads(entry._2().json())
            observed[str(entry._1())] = {
                key: int(value)
                for key, value in values.items()
                if isinstance(value, int) and not isinstance(value, bool)
            }
        return observed
    except Exception as exc:  # noqa: BLE001 - the note is a figure, never the batch's failure
        log.debug("query %s: observed counts not read: %s", query_name, exc)
        return None
