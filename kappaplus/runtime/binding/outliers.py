"""A watermark one outlier cannot move: ``max_ahead`` of an input's event-time bounds.

Spark's watermark follows the largest event time seen, less the delay. One plausible record
dated three days ahead of its peers (inside ``max_future``, which is measured against the
clock) moves it three days ahead: most later rows are late. A decoded Kafka record whose
event time is too far ahead of its *peers* -- the median event time of the records read
with it from the same Kafka partition in the same micro-batch (a robust estimate: one
outlier does not move a median) -- fails like an out-of-bounds record: it goes to the
input's dead letters with its reason (``event time ... is more than ... ahead of its peers
in partition t-0 (median ...)``), is counted as ``out_of_bounds`` and never reaches the
watermark.

How far is too far is :func:`ahead_rule`: by default (``max_ahead = "auto"``) a floor
sized from the watermark delay and the trigger plus twice the peers' own span behind their
median (:class:`~kappaplus.core.ahead.AheadRule`), stated in the log when the run starts;
``max_ahead = "<duration>"`` a fixed bound; ``"none"`` opts out.

The rule itself is :func:`kappaplus.core.event_time.far_ahead_reasons` (pure Arrow, shared
with a bootstrap's Kafka phase, :mod:`kappaplus.connectors.hybrid.reader`). In a stream, the
check runs in the output queries' decoding (:func:`judge_table`, in the one Python pass of
:mod:`kappaplus.runtime.binding.checked_decode`, or :func:`mark_far_ahead` after the JVM JSON
decoder: a ``mapInArrow`` over each task; a task reads one offset range of one partition).
The peers of a record are exactly the records of its offset range, so a replayed
micro-batch judges every record the same way. A record has peers only if its range has
others: a partition that delivers one record per batch is not judged (the median is the
record itself), nor records whose event time is null or that already failed.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING

from kappaplus.core.ahead import AUTO, AUTO_SPREAD, AheadRule
from kappaplus.core.event_time import PEERS, far_ahead_reasons
from kappaplus.core.timeutil import Duration, parse_duration

__all__ = ["PEERS", "ahead_rule", "far_ahead_reasons", "judge_table", "mark_far_ahead"]

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from kappaplus.config import EventTimeBounds
    from kappaplus.runtime.side_outputs.dead_letter_tap import DeadLetterPlan

log = logging.getLogger(__name__)

AUTO_FLOOR = Duration.parse("1 day", "max_ahead")
"""The least floor of ``auto``: the margin ``max_future`` gives against the clock."""


def ahead_rule(
    bounds: EventTimeBounds, watermark_delay: str, trigger: str | None = None
) -> AheadRule | None:
    """The ``max_ahead`` rule of an input: None when opted out (``"none"``), the duration's
    alone when one is given, and for ``"auto"`` (the default) a floor of the larger of
    :data:`AUTO_FLOOR` and twice the watermark delay plus the trigger interval (the disorder
    the job declares and one trigger's span), plus twice the peers' own span behind their
    median (a batch of a backlog spans hours).

    >>> from kappaplus.config import EventTimeBounds
    >>> ahead_rule(EventTimeBounds(), "10 minutes", "10 seconds").text()
    'auto 1 day'
    >>> ahead_rule(EventTimeBounds(), "1 day", "available-now").text()
    'auto 172800 seconds'
    >>> ahead_rule(EventTimeBounds(max_ahead="2 days"), "10 minutes").text()
    '2 days'
    >>> ahead_rule(EventTimeBounds(max_ahead="none"), "10 minutes") is None
    True
    """
    chosen = bounds.max_ahead
    if chosen is None:
        return None
    if chosen != AUTO:
        return AheadRule(Duration.parse(chosen, "max_ahead"))
    interval = 0
    if trigger is not None and trigger[:1].isdigit():
        interval = parse_duration(trigger, "trigger")
    floor = max(AUTO_FLOOR.micros, 2 * (parse_duration(watermark_delay, "delay") + interval))
    reach = (
        AUTO_FLOOR if floor == AUTO_FLOOR.micros else Duration.parse(timedelta(microseconds=floor))
    )
    return AheadRule(reach, AUTO_SPREAD)


def state_ahead_rule(input_name: str, rule: AheadRule | None) -> None:
    """Say in the log what the input's ``max_ahead`` does (and how to change it)."""
    key = f"[inputs.{input_name}.event_time_bounds] max_ahead"
    if rule is None:
        log.info("%s = none: a Kafka record far ahead of its peers is not judged", key)
        return
    what = (
        f"{rule.reach} (the larger of {AUTO_FLOOR} and twice the watermark delay plus the "
        "trigger interval) plus twice their span behind that median"
        if rule.spread
        else str(rule.reach)
    )
    log.info(
        "inputs.%s: a Kafka record further ahead of its peers (the median event time of its "
        "partition's records in its micro-batch) than %s is a dead letter with its reason, "
        'not a watermark mover (%s = %s; "none" opts out)',
        input_name,
        what,
        key,
        f'"{AUTO}"' if rule.spread else f'"{rule.reach}"',
    )


def judge_table(table: pa.Table, column: str, max_ahead: AheadRule) -> pa.Table:
    """``table`` (one task's decoded records) with the error of each record further ahead of
    its partition's median than ``max_ahead`` allows set to its reason (earlier errors kept)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from kappaplus.codecs import ERROR_COL
    from kappaplus.codecs.schema import RECORD_COL

    errors = table.column(ERROR_COL).combine_chunks()
    record = table.column(RECORD_COL).combine_chunks()
    reasons = far_ahead_reasons(
        table.column(column).combine_chunks(),
        record.field("partition"),
        pc.is_valid(errors),
        column,
        max_ahead,
    )
    marked = pc.coalesce(errors, pa.array(reasons, errors.type))
    index = table.schema.get_field_index(ERROR_COL)
    return table.set_column(index, table.field(index), marked)


def mark_far_ahead(
    decoded: DataFrame,
    column: str,
    max_ahead: AheadRule | None,
    tap: DeadLetterPlan | None = None,
) -> DataFrame:
    """A :func:`~kappaplus.codecs.decode_kafka` result where a decoded record further ahead
    of its partition's median in its task than ``max_ahead`` allows has failed (its reason
    in the error column), as :func:`~kappaplus.runtime.binding.bounds.mark_out_of_bounds`
    fails an out-of-bounds record; unchanged when ``max_ahead`` is None and there is no
    ``tap``. With ``tap`` the same Python pass is the input's dead-letter tap
    (:class:`~kappaplus.runtime.side_outputs.dead_letter_tap.DeadLetterTap`): one crossing
    between the JVM and Python instead of two."""
    from pyspark.sql import functions as F

    from kappaplus.codecs import ERROR_COL
    from kappaplus.runtime.side_outputs.dead_letter_tap import DeadLetterTap

    judging = max_ahead is not None and column in decoded.columns
    if not judging and tap is None:
        return decoded
    schema = decoded.schema
    metadata = schema[ERROR_COL].metadata
    names = schema.names
    judge = (column, max_ahead) if judging and max_ahead is not None else None
    judged = decoded.mapInArrow(DeadLetterTap(tap, judge), schema)
    error = F.col(ERROR_COL).alias(ERROR_COL, metadata=metadata)
    return judged.select(*[error if c == ERROR_COL else F.col(f"`{c}`") for c in names])
