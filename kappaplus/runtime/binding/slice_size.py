"""The default slicing of a job's lake inputs, from what its queries keep in state.

A backfill's micro-batch pays a fixed cost whatever its rows (offset and commit logs,
planning, the state store's commit, the exactly-once sink commit: ``docs/benchmarks.md``),
so fewer, larger slices make a long backfill cheaper. What bounds a slice is what the job
holds per row:

- a job whose every query is a windowed or keyed aggregation (over stateless steps:
  projections, filters, stream-static joins) holds one entry per group, not per row, and
  writes one row per group: its lake inputs take :data:`AGGREGATION_TARGET_ROWS`;
- a job that keeps rows in state until the watermark passes them (a session window, a join
  of two streams, deduplication, arbitrary state; :func:`keeps_rows`) holds a slice's rows
  and sorts them at once, so its memory follows the slice: its lake inputs take
  :data:`ROW_STATE_TARGET_ROWS`, and what a slice closed is dropped before the next one is
  merged in: in the slice's own batch, the watermark having gone ahead to its end
  (``watermarkAhead``), or where it cannot, in an eviction batch after it
  (``evictBetweenSlices``);
- any other job keeps :data:`~kappaplus.slicing.planner.DEFAULT_TARGET_ROWS`.

A binding that sets a slice size (or ``watermarkAhead`` or ``evictBetweenSlices``) keeps its
choice. The plan is read from the job's own DataFrames before any query starts (Spark's
analyzed logical plan); any operator not known to be stateless or bounded keeps the default.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kappaplus.slicing.planner import DEFAULT_FIRST_SLICE_ROWS, DEFAULT_TARGET_ROWS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from kappaplus.config import ResolvedConfig

log = logging.getLogger(__name__)

AGGREGATION_TARGET_ROWS = 4 * DEFAULT_TARGET_ROWS
"""Rows per slice by default for a job whose queries only aggregate (see the module doc).
8,000,000: against 4,000,000, three alternating pairs at 30 days took 21.6 / 21.2 / 20.5 s
against 23.7 / 22.1 / 23.8 s and two at 90 days 34.7 / 35.2 s against 43.7 / 40.3 s, at the
same peak memory (910 / 900 / 913 against 908 / 859 / 926 MB; 1,005 / 932 against 986 / 974
MB). A task reads at most ``rowsPerPartition`` rows whatever the slice, so what grows with
the slice is the number of tasks, not what one holds."""

ROW_STATE_TARGET_ROWS = DEFAULT_FIRST_SLICE_ROWS
"""Rows per slice by default for a job that keeps rows in state (see the module doc):
500,000. The demo's sessionization under a 1 GB driver, 30 days x 100,000 rows/day: peak PSS
1,159 MB against 1,539 MB with 2,000,000-row slices (1,027 MB for 7 days, one slice of
700,000 rows), for 1.09x the time (63.1 against 57.8 s; docs/benchmarks.md, issue 51)."""

#: Streaming operators that keep nothing per row between micro-batches.
_STATELESS = frozenset(
    {
        "Project",
        "Filter",
        "EventTimeWatermark",
        "StreamingRelation",
        "StreamingRelationV2",
        "StreamingDataSourceV2Relation",
        "StreamingExecutionRelation",
        "SubqueryAlias",
        "Union",
        "Expand",
        "Generate",
        "CollectMetrics",
        "Repartition",
        "RepartitionByExpression",
        "DeserializeToObject",
        "SerializeFromObject",
        "MapPartitions",
        "MapPartitionsInPandas",
        "PythonMapInArrow",
        "MapInPandas",
        "MapInArrow",
        "BatchEvalPython",
        "ArrowEvalPython",
        "ResolvedHint",
        "Sample",
    }
)
#: Node names of a streaming aggregation (one state entry per group and window).
_AGGREGATE = "Aggregate"
#: Joins hold rows when both sides stream; a stream-static join holds nothing.
_JOIN = "Join"


#: Streaming operators that keep rows (not one entry per group) until the watermark passes.
_ROW_STATE = frozenset(
    {
        "FlatMapGroupsWithState",
        "FlatMapGroupsInPandasWithState",
        "TransformWithState",
        "TransformWithStateInPandas",
        "TransformWithStateInPySpark",
        "Deduplicate",
        "DeduplicateWithinWatermark",
    }
)


def keeps_rows(df: DataFrame) -> bool:
    """Whether ``df``'s streaming plan keeps rows in state until the watermark passes them:
    a session window, a join of two streams, deduplication or arbitrary state."""
    plan = df._jdf.queryExecution().analyzed()

    def visit(node: Any) -> bool:
        if not node.isStreaming():
            return False
        name = str(node.nodeName())
        children = node.children()
        kids = [children.apply(i) for i in range(children.size())]
        if name == _AGGREGATE and "session_window" in str(node.simpleString(200)).lower():
            return True
        if name == _JOIN and sum(1 for kid in kids if kid.isStreaming()) > 1:
            return True
        if name in _ROW_STATE:
            return True
        return any(visit(kid) for kid in kids)

    return bool(visit(plan))


def holds_groups_only(df: DataFrame) -> bool:
    """Whether ``df``'s streaming plan aggregates and keeps state only per group.

    True when it has a streaming aggregation that is not a session window and every other
    streaming operator is stateless (:data:`_STATELESS`, or a join with one streaming side).
    """
    plan = df._jdf.queryExecution().analyzed()
    found = {"aggregate": False}

    def visit(node: Any) -> bool:
        if not node.isStreaming():
            return True  # the static side of a stream-static join
        name = str(node.nodeName())
        children = node.children()
        kids = [children.apply(i) for i in range(children.size())]
        if name == _AGGREGATE:
            if "session_window" in str(node.simpleString(200)).lower():
                log.debug("slice size: a session window aggregation holds rows")
                return False
            found["aggregate"] = True
        elif name == _JOIN:
            if sum(1 for kid in kids if kid.isStreaming()) > 1:
                log.debug("slice size: a stream-stream join holds rows")
                return False
        elif name not in _STATELESS:
            log.debug("slice size: %s may hold rows", name)
            return False
        return all(visit(kid) for kid in kids)

    return visit(plan) and found["aggregate"]


#: The slice settings a lake binding may set; any set keeps the user's choice.
_SLICE_FIELDS = (
    "target_rows_per_trigger",
    "target_bytes_per_trigger",
    "max_event_time_per_trigger",
    "target_batch_duration",
)


def with_state_slices(
    resolved: ResolvedConfig, frames: Mapping[str, DataFrame], *, paced: bool = False
) -> ResolvedConfig | None:
    """``resolved`` with the slicing its queries' state calls for, on each lake binding that
    does not set it; None when nothing changes:

    - every query only aggregates (:func:`holds_groups_only`): slices of
      :data:`AGGREGATION_TARGET_ROWS`;
    - some query keeps rows in state (:func:`keeps_rows`): slices of
      :data:`ROW_STATE_TARGET_ROWS`, and a slice's closed sessions leave the state store
      before the next slice's rows are merged with what is stored: in the slice's own batch
      (``watermarkAhead``, a bounded run, when Spark judges late rows by the previous
      batch's watermark: :func:`late_rows_judged_by_previous_batch`), else in an eviction
      batch after each slice (``evictBetweenSlices``; not when ``paced``, a processing-time
      trigger: one slice per trigger is the run's rate limit, and an eviction batch would
      take a trigger of its own, halving the rate). A binding that sets either keeps its
      choice.
    """
    if not frames:
        return None
    if any(keeps_rows(df) for df in frames.values()):
        sized = _each_lake(
            resolved, {"target_rows_per_trigger": ROW_STATE_TARGET_ROWS}, _SLICE_FIELDS
        )
        dropping: dict[str, Any] = {}
        if late_rows_judged_by_previous_batch(next(iter(frames.values()))):
            dropping["watermark_ahead"] = True
        if not paced:  # where the watermark cannot go ahead (a run without an end)
            dropping["evict_between_slices"] = True
        chosen = None
        if dropping:  # a binding that chooses either way keeps its choice
            chosen = _each_lake(
                sized or resolved, dropping, ("watermark_ahead", "evict_between_slices")
            )
        if sized is not None:
            log.info(
                "slices of about %d rows by default: the job keeps rows in state until the "
                "watermark passes them; a binding's targetRowsPerTrigger overrides it",
                ROW_STATE_TARGET_ROWS,
            )
        if chosen is not None and "watermark_ahead" in dropping:
            log.info(
                "each slice's micro-batch drops what the slice closed: the job keeps rows in "
                "state, the watermark goes ahead to the end of the slice being read "
                "(watermarkAhead = false turns it off)"
            )
        elif chosen is not None:
            log.info(
                "an eviction micro-batch after each slice: the job keeps rows in state "
                "(evictBetweenSlices = false turns it off)"
            )
        return chosen or sized
    if not all(holds_groups_only(df) for df in frames.values()):
        return None
    changed = _each_lake(
        resolved, {"target_rows_per_trigger": AGGREGATION_TARGET_ROWS}, _SLICE_FIELDS
    )
    if changed is not None:
        log.info(
            "slices of about %d rows by default: every query of the job aggregates (state per "
            "group, not per row); a binding's targetRowsPerTrigger overrides it",
            AGGREGATION_TARGET_ROWS,
        )
    return changed


ALLOW_MULTIPLE = "spark.sql.streaming.statefulOperator.allowMultiple"


def late_rows_judged_by_previous_batch(df: DataFrame) -> bool:
    """Whether Spark's stateful operators judge a micro-batch's late rows by the previous
    batch's watermark and evict by the batch's own (its watermark propagation, on by
    default: ``spark.sql.streaming.statefulOperator.allowMultiple``); with one watermark
    for both, a watermark moved ahead would make the next slice's rows late."""
    value = df.sparkSession.conf.get(ALLOW_MULTIPLE, "true") or "true"
    return value.strip().lower() == "true"


def _each_lake(
    resolved: ResolvedConfig, values: Mapping[str, Any], unless: tuple[str, ...]
) -> ResolvedConfig | None:
    """``resolved`` with ``values`` (field -> value) on each lake binding that sets none of
    ``unless``; None when no binding changes."""
    import dataclasses

    updated: dict[str, Any] = {}
    for name, binding in resolved.inputs.items():
        lakes = {}
        for lake in ("hive", "iceberg", "delta"):
            model = getattr(binding, lake, None)
            if model is not None and all(getattr(model, f, None) is None for f in unless):
                lakes[lake] = model.model_copy(update=dict(values))
        if lakes:
            updated[name] = dataclasses.replace(binding, **lakes)
    if not updated:
        return None
    return dataclasses.replace(resolved, inputs={**resolved.inputs, **updated})
