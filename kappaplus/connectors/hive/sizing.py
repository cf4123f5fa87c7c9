"""Adaptive slice sizing: how far a slice may reach to hold about a target number of rows.

The planner knows, from Parquet row-group statistics (or the time range of an ORC file's
partition), how many rows each row group holds and between which event times. Assuming
the rows of a group spread evenly over its range, the estimated number of rows in
``[lo, x)`` is a continuous, non-decreasing, piecewise-linear function of ``x``;
:func:`estimate_end` finds where it reaches the target. Dense hours therefore get short
slices and sparse days long ones. The result is an estimate, not a cap: the exact caps
(``maxRowsPerTrigger``, ``maxBytesPerTrigger``, ``maxEventTimePerTrigger``) are applied
after it by the planner.

Pure functions of numbers, so they are property-tested without Spark.

>>> import numpy as np
>>> HOUR = 3_600_000_000
>>> starts = np.array([0, HOUR, 2 * HOUR]); ends = starts + HOUR
>>> rows = np.array([1000, 1000, 1000])
>>> estimate_end(starts, ends, rows, 0, 3 * HOUR, 1500) == int(1.5 * HOUR)
True
>>> estimate_end(starts, ends, rows, 0, 3 * HOUR, 10_000)  # everything fits: the limit
10800000000
>>> round_down_to_grid(int(1.5 * HOUR) + 17, 0, 3 * HOUR) == HOUR
True
>>> choose_end(starts, ends, rows, 0, 3 * HOUR, 1000) == HOUR  # 1000 rows end on the hour
True
"""

from __future__ import annotations

import numpy as np

SECOND = 1_000_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR
GRID = (DAY, HOUR, MINUTE, SECOND, 1)
"""Boundaries are rounded down to the coarsest of these steps that keeps the slice non-empty,
so slices read ``[2024-03-01T06:00:00Z, 2024-03-02T00:00:00Z)`` rather than odd microseconds."""


def estimate_end(
    starts: np.ndarray, ends: np.ndarray, rows: np.ndarray, lo: int, limit: int, target: int
) -> int:
    """The largest ``x`` in ``(lo, limit]`` whose estimated rows in ``[lo, x)`` stay within
    ``target`` (at least ``lo + 1``).

    Group ``i`` holds ``rows[i]`` rows spread evenly over ``[starts[i], ends[i])``
    (``ends[i] > starts[i]``). Groups are clipped to ``[lo, limit)`` with their rows in
    proportion.
    """
    if limit <= lo + 1:
        return limit
    a = np.maximum(starts.astype(np.float64), float(lo))
    b = np.minimum(ends.astype(np.float64), float(limit))
    width = ends.astype(np.float64) - starts.astype(np.float64)
    keep = (b > a) & (width > 0) & (rows > 0)
    if not np.any(keep):
        return limit
    a, b = a[keep], b[keep]
    rate = rows[keep].astype(np.float64) / width[keep]  # rows per microsecond
    positions = np.concatenate([a, b])
    deltas = np.concatenate([rate, -rate])
    order = np.argsort(positions, kind="stable")
    positions, deltas = positions[order], deltas[order]
    points, first = np.unique(positions, return_index=True)
    slope_change = np.add.reduceat(deltas, first)
    slopes = np.cumsum(slope_change)  # slope on [points[k], points[k + 1])
    gains = slopes[:-1] * np.diff(points)
    cumulative = np.concatenate([[0.0], np.cumsum(gains)])  # estimated rows in [lo, points[k])
    if cumulative[-1] <= target:
        return limit
    k = int(np.searchsorted(cumulative, target, side="right")) - 1  # last point within target
    x = points[k]
    if slopes[k] > 0:
        x += (target - cumulative[k]) / slopes[k]
    end = int(min(x, points[k + 1]))
    return max(end, lo + 1)


def choose_end(
    starts: np.ndarray, ends: np.ndarray, rows: np.ndarray, lo: int, limit: int, target: int
) -> int:
    """The end of an adaptive slice: the coarsest boundary of :data:`GRID` whose estimated
    rows lie within 7/8 to 9/8 of ``target`` (or ``limit``, if that holds fewer rows).

    The tolerance lets slices end on whole days, hours or minutes instead of leaving a
    sliver of a few rows before the next boundary.
    """
    high = estimate_end(starts, ends, rows, lo, limit, max(1, target * 9 // 8))
    if high >= limit:
        return limit
    low = estimate_end(starts, ends, rows, lo, limit, max(1, target * 7 // 8))
    for step in GRID:
        rounded = high - (high % step)
        if rounded > lo and rounded >= low:
            return rounded
    return high


def round_down_to_grid(x: int, lo: int, limit: int) -> int:
    """``x`` rounded down to the coarsest step of :data:`GRID` that stays above ``lo``
    (``limit`` itself is kept)."""
    if x >= limit:
        return limit
    for step in GRID:
        rounded = x - (x % step)
        if rounded > lo:
            return rounded
    return max(x, lo + 1)
