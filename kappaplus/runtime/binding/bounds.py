"""Event-time sanity bounds: rows whose event time cannot be real never reach the watermark.

One event dated 9999-12-31 moves a stream's watermark there; the watermark is
checkpointed, so every later event of a stateful job is dropped as late, forever. Each
input has :class:`~kappaplus.config.EventTimeBounds` (``[min, max)`` and ``max_future``
ahead of processing time, with defaults); the runtime applies them BELOW
``withWatermark`` (the watermark only ever sees rows within them):

- Kafka inputs (``stream`` mode): an out-of-bounds decoded record becomes a dead letter
  (reason ``event time ... is ...``) in the output queries, which skip it; the one that
  publishes the input's dead letters writes it
  (:mod:`kappaplus.runtime.side_outputs.dead_letter_tap`). The check runs in the one Python
  pass of :mod:`kappaplus.runtime.binding.checked_decode` (the same bounds, in Arrow), or,
  after the JVM JSON decoder, as :func:`mark_out_of_bounds`.
- A bootstrap's Kafka phase: the hybrid source makes such a record a dead letter itself
  (:func:`kappaplus.connectors.hybrid.reader.out_of_bounds_reasons`).
- Every input (all modes): :func:`drop_out_of_bounds` removes what is left out of bounds
  (in a backfill or bootstrap: rows of the lake; end-of-input markers are kept) and counts
  it as ``out_of_bounds`` under the observed metric :func:`bounds_metrics_name`.

The filters reference the event-time column: Spark keeps them where they are, below the
watermark (it only pushes filters that do not reference it down past ``withWatermark``).
``max_future`` is relative to the micro-batch's timestamp (``current_timestamp()``, the
same on a replay of the batch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kappaplus.core.event_time import MARKER_COLUMN
from kappaplus.core.timeutil import parse_timestamp

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from kappaplus.config import EventTimeBounds
    from kappaplus.core.ahead import AheadRule
    from kappaplus.runtime.side_outputs.dead_letter_tap import DeadLetterPlan


def bounds_metrics_name(input_name: str, prefix: str = "kappa_bounds") -> str:
    """Name of the observed ``out_of_bounds`` count of an input."""
    return f"{prefix}_{input_name}"


def range_within_bounds(
    bounds: EventTimeBounds, start: int, end: int, now: int | None = None
) -> bool:
    """True when no event time in ``[start, end)`` (epoch microseconds) can be out of
    ``bounds``, ``max_future`` judged from ``now`` (default: the clock; later batches only
    move it on): then :func:`drop_out_of_bounds` could drop nothing and is left out.

    >>> from kappaplus.config import EventTimeBounds
    >>> day = 86_400_000_000
    >>> range_within_bounds(EventTimeBounds(), 19_000 * day, 19_007 * day)
    True
    >>> range_within_bounds(EventTimeBounds(min="2024-01-01"), 0, 19_007 * day)
    False
    """
    import time

    if bounds.min is not None and start < parse_timestamp(bounds.min, "min"):
        return False
    if bounds.max is not None and end > parse_timestamp(bounds.max, "max"):
        return False
    if bounds.max_future is not None:
        clock = now if now is not None else int(time.time() * 1_000_000)
        if end > clock + bounds.max_future.micros:
            return False
    return True


def bound_words(bounds: EventTimeBounds) -> tuple[str, str, str]:
    """What a reason says after the event time, per bound: ``min``, ``max``, ``max_future``."""
    return (
        f"is before the bound min = {bounds.min}",
        f"is not before the bound max = {bounds.max}",
        f"is more than max_future = {bounds.max_future} ahead of now",
    )


def _violations(column: str, bounds: EventTimeBounds) -> list[tuple[Column, Column]]:
    """``(condition, reason)`` per bound; conditions are false for a null event time."""
    from pyspark.sql import functions as F

    col = F.col(f"`{column}`")
    shown = F.date_format(col, "yyyy-MM-dd'T'HH:mm:ss'Z'")
    found: list[tuple[Column, Column]] = []

    def reason(text: str) -> Column:
        return F.concat(F.lit(f"event time {column} = "), shown, F.lit(f" {text}"))

    words = bound_words(bounds)

    if bounds.min is not None:
        low = F.timestamp_micros(F.lit(parse_timestamp(bounds.min, "min")))
        found.append((col < low, reason(words[0])))
    if bounds.max is not None:
        high = F.timestamp_micros(F.lit(parse_timestamp(bounds.max, "max")))
        found.append((col >= high, reason(words[1])))
    if bounds.max_future is not None:
        ahead = bounds.max_future.micros
        limit = F.timestamp_micros(F.unix_micros(F.current_timestamp()) + F.lit(ahead))
        found.append((col > limit, reason(words[2])))
    return found


def out_of_bounds_reason(column: str, bounds: EventTimeBounds) -> Column | None:
    """Why a row is out of bounds (a string), null when it is within; None if unbounded."""
    from pyspark.sql import functions as F

    checks = _violations(column, bounds)
    if not checks:
        return None
    reason = F.when(checks[0][0], checks[0][1])
    for condition, text in checks[1:]:
        reason = reason.when(condition, text)
    return reason


def mark_out_of_bounds(
    decoded: DataFrame,
    column: str,
    bounds: EventTimeBounds,
    metrics: str,
    ahead: AheadRule | None = None,
    tap: DeadLetterPlan | None = None,
) -> DataFrame:
    """A :func:`~kappaplus.codecs.decode_kafka` result where a decoded record whose event
    time is out of bounds has failed (its reason in the error column): good_events skips
    it, dead_letters writes it. Counted as ``out_of_bounds`` (observed metric ``metrics``),
    with the records then further ahead of their peers than ``ahead`` allows
    (:mod:`kappaplus.runtime.binding.outliers`), which fail the same way (an out-of-bounds
    record is judged first: it is neither judged again nor anyone's peer). With ``tap``
    (the input's dead letters) the judge's pass is the dead-letter tap as well
    (:class:`~kappaplus.runtime.side_outputs.dead_letter_tap.DeadLetterTap`)."""
    from pyspark.sql import functions as F

    from kappaplus.codecs import ERROR_COL
    from kappaplus.runtime.binding.outliers import PEERS, mark_far_ahead

    reason = out_of_bounds_reason(column, bounds)
    if (reason is None and ahead is None) or column not in decoded.columns:
        return mark_far_ahead(decoded, column, None, tap)
    if reason is None:
        reason = F.lit(None).cast("string")
    error = F.col(ERROR_COL)
    metadata = decoded.schema[ERROR_COL].metadata
    outside = F.coalesce(error.isNull() & reason.isNotNull(), F.lit(False)).alias(_OUTSIDE)
    marked = F.when(error.isNull(), reason).otherwise(error).alias(ERROR_COL, metadata=metadata)
    columns = [marked if c == ERROR_COL else F.col(f"`{c}`") for c in decoded.columns]
    judged = mark_far_ahead(decoded.select(*columns, outside), column, ahead, tap)
    far = F.coalesce(F.col(ERROR_COL).contains(PEERS), F.lit(False))
    bad = F.col(_OUTSIDE) | far
    counted = judged.observe(metrics, F.count(F.when(bad, 1)).alias("out_of_bounds"))
    return counted.drop(_OUTSIDE)


_OUTSIDE = "__kappa_out_of_bounds"
"""A record's own bounds failed it (a column between the two checks, dropped after)."""


def drop_out_of_bounds(
    df: DataFrame, column: str, bounds: EventTimeBounds, metrics: str
) -> DataFrame:
    """``df`` without its out-of-bounds rows, counted as ``out_of_bounds`` (observed metric
    ``metrics``). End-of-input marker rows pass."""
    from pyspark.sql import functions as F

    checks = _violations(column, bounds)
    if not checks:
        return df
    bad = checks[0][0]
    for condition, _ in checks[1:]:
        bad = bad | condition
    if MARKER_COLUMN in df.columns:
        bad = bad & (F.col(MARKER_COLUMN).isNull() | ~F.col(MARKER_COLUMN))
    bad = F.coalesce(bad, F.lit(False))
    counted = df.observe(metrics, F.count(F.when(bad, 1)).alias("out_of_bounds"))
    return counted.where(~bad)
