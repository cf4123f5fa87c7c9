"""Event-time semantics applied by the runtime, the same way for every source.

The runtime, not the job, calls :func:`apply_watermark` on each input. Sources that know
where their input ends (a bounded backfill) append marker rows whose event time moves the
watermark to the end bound, so the last windows are emitted in append mode; the filter
here removes them *after* the watermark has seen them, before any job code runs.

>>> events = apply_watermark(stream, "event_time", "10 minutes")   # doctest: +SKIP
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kappaplus.core.ahead import AheadRule
from kappaplus.core.timeutil import Duration, format_duration, iso, parse_duration

if TYPE_CHECKING:
    import pyarrow as pa


#: Hidden boolean column of sources that append end-of-input marker rows.
MARKER_COLUMN = "_kappa_marker"


def apply_watermark(
    df: DataFrame,
    event_time_column: str,
    delay: str | int,
    observe_as: str | None = None,
    also: Sequence[Column] = (),
) -> DataFrame:
    """``withWatermark`` on ``event_time_column``, drop end-of-input marker rows, and count
    the rows that pass as ``rows`` (observed metric ``observe_as``, default
    ``kappa_rows_<column>_<id>``), with the aggregates ``also`` in the same observation
    (each observation is one more operator every row passes through).

    ``delay`` is a duration string (``"10 minutes"``) or microseconds.

    The observation is also a barrier. Spark's optimizer pushes a filter that does not
    reference the event-time column below ``withWatermark``: a job filter such as
    ``event_type = 'trip_request'`` would drop the marker rows (their other columns are
    null) before the watermark sees them, and the last windows of a backfill would never
    be emitted. Spark does not push filters below ``observe``, so job filters stay above.
    """
    micros = delay if isinstance(delay, int) else parse_duration(delay, "watermarkDelay")
    watermarked = df.withWatermark(event_time_column, format_duration(micros))
    if MARKER_COLUMN in df.columns:
        watermarked = watermarked.where(not_a_marker(event_time_column)).drop(MARKER_COLUMN)
    name = observe_as or f"kappa_rows_{event_time_column}_{uuid.uuid4().hex[:8]}"
    return watermarked.observe(name, F.count(F.lit(1)).alias("rows"), *also)


def not_a_marker(event_time_column: str) -> Column:
    """True for real rows. It references the event-time column on purpose: Spark's
    optimizer pushes filters that do not below ``withWatermark``, where they would hide
    the marker from the watermark too."""
    marker = F.col(MARKER_COLUMN)
    return marker.isNull() | ~marker | F.col(event_time_column).isNull()


def bound_violation(
    column: str,
    micros: int | None,
    *,
    low: int | None,
    high: int | None,
    max_future: int | None,
    now: int | None,
    now_label: str = "now",
) -> str | None:
    """Why the event time ``micros`` of ``column`` is outside the input's bounds, in the
    words of a stream's dead letters (``[low, high)`` and ``max_future`` ahead of ``now``,
    epoch microseconds), or None. The Python side of :mod:`kappaplus.runtime.binding.bounds`, used
    where records are judged outside Spark (a bootstrap's Kafka phase, a dead-letter replay).

    >>> bound_violation("ts", 86_400_000_000, low=None, high=None, max_future=1, now=0)
    'event time ts = 1970-01-02T00:00:00Z is more than max_future = 0s ahead of now'
    """
    if micros is None:
        return None
    if low is not None and micros < low:
        why = f"is before the bound min = {iso(low)}"
    elif high is not None and micros >= high:
        why = f"is not before the bound max = {iso(high)}"
    elif max_future is not None and now is not None and micros > now + max_future:
        why = f"is more than max_future = {max_future // 1_000_000}s ahead of {now_label}"
    else:
        return None
    return f"event time {column} = {iso(micros)} {why}"


PEERS = "ahead of its peers"
"""Words every ``max_ahead`` reason carries (the out-of-bounds count finds them by it)."""


def far_ahead_reasons(
    times: pa.Array,
    partitions: pa.Array,
    failed: pa.Array,
    column: str,
    max_ahead: AheadRule | Duration,
) -> list[str | None]:
    """Per row, why its event time is too far ahead of its partition's median (None if
    it is not), by ``max_ahead`` (a duration: :class:`AheadRule` of that reach alone).
    ``times``: the event times (timestamps or epoch microseconds), ``failed``: whether a row
    already failed (it is neither judged nor a peer).

    >>> import pyarrow as pa
    >>> from kappaplus.core.timeutil import Duration
    >>> day = 86_400_000_000
    >>> times = pa.array([0, 60_000_000, 3 * day, 120_000_000], pa.int64())
    >>> reasons = far_ahead_reasons(times, pa.array([0, 0, 0, 0]),
    ...     pa.array([False] * 4), "ts", Duration.parse("1 day", "max_ahead"))
    >>> [r is not None for r in reasons]
    [False, False, True, False]
    >>> reasons[2].split(" is ")
    ['event time ts = 1970-01-04T00:00:00Z', 'more than max_ahead = 1 day ahead of its peers \
in partition 0 (median 1970-01-01T00:01:30Z)']
    >>> auto = far_ahead_reasons(times, pa.array([0, 0, 0, 0]),
    ...     pa.array([False] * 4), "ts", AheadRule.parse("auto 1 day"))
    >>> auto[2].split(" is ")[1]
    'more than 1 day, 0:03:00 ahead of its peers in partition 0 (median \
1970-01-01T00:01:30Z; max_ahead = auto: 1 day plus twice their span behind the median)'
    """
    import pyarrow as pa

    rule = max_ahead if isinstance(max_ahead, AheadRule) else AheadRule(max_ahead)
    micros = times.cast(pa.int64()).to_pylist() if times.type != pa.int64() else times.to_pylist()
    parts = partitions.to_pylist()
    bad = failed.to_pylist()
    peers: dict[object, list[int]] = {}
    for moment, part, failed_row in zip(micros, parts, bad, strict=True):
        if moment is not None and not failed_row:
            peers.setdefault(part, []).append(moment)
    limits: dict[object, tuple[int, int]] = {}  # partition -> (median, allowed ahead of it)
    for part, moments in peers.items():
        moments.sort()
        middle = len(moments) // 2
        median = (
            moments[middle] if len(moments) % 2 else (moments[middle - 1] + moments[middle]) // 2
        )
        limits[part] = (median, rule.allowed(median, moments[0]))
    reasons: list[str | None] = []
    for moment, part, failed_row in zip(micros, parts, bad, strict=True):
        limit = limits.get(part)
        if moment is None or failed_row or limit is None or moment - limit[0] <= limit[1]:
            reasons.append(None)
            continue
        reasons.append(_far_ahead_reason(column, moment, part, limit, rule))
    return reasons


def _far_ahead_reason(
    column: str, moment: int, part: object, limit: tuple[int, int], rule: AheadRule
) -> str:
    from datetime import timedelta

    median = _iso_s(iso(limit[0]))
    shown = f"event time {column} = {_iso_s(iso(moment))} is more than"
    if not rule.spread:
        return f"{shown} {rule.describe()} {PEERS} in partition {part} (median {median})"
    allowed = timedelta(microseconds=limit[1])
    return f"{shown} {allowed} {PEERS} in partition {part} (median {median}; {rule.describe()})"


def _iso_s(text: str) -> str:
    """``2024-06-01T00:00:00Z`` (whole seconds, as the other bounds' reasons show it)."""
    head = text.replace("+00:00", "Z")
    if "." in head:
        head = head.split(".", 1)[0] + "Z"
    return head if head.endswith("Z") else head + "Z"
