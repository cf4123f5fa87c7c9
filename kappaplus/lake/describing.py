"""What the descriptions of every lake format share (``kappa table describe``): the one
timestamp column taken as the event time when none is named, and how many files a typical
slice of a backfill would overlap.

>>> slice_overlaps([(0, 9), (10, 19)], rows=4_000_000, slice_rows=2_000_000, bare=0)
(2, 1.0, 1)
"""

from __future__ import annotations

import statistics

from kappaplus.core.errors import OptionNeeded

TYPICAL_SLICE_ROWS = 2_000_000
"""The adaptive slicing's default rows target (the source's ``targetRowsPerTrigger``)."""


def only_timestamp_column(stamps: list[str], table: str) -> str:
    """The event-time column of a table whose columns ``stamps`` are timestamps, when none
    was named: the only one, else the ``--event-time`` option is needed. ``table`` names the
    table in the message (``"Delta table 'x'"``)."""
    if len(stamps) != 1:
        raise OptionNeeded(
            "--event-time",
            f"{table} has {len(stamps)} timestamp columns ({', '.join(stamps) or 'none'}): "
            "name the event-time column with --event-time",
        )
    return stamps[0]


def slice_overlaps(
    spans: list[tuple[int, int]], rows: int, slice_rows: int, bare: int
) -> tuple[int, float, int]:
    """``(slices, median files a slice overlaps, most)``: the event-time extent of
    ``spans`` (each file's ``[min, max]``) tiled into slices of about ``slice_rows`` rows
    (rows assumed spread evenly over it); the ``bare`` files without bounds overlap every
    slice."""
    if not spans:
        return 0, float(bare), bare
    lo, hi = min(s[0] for s in spans), max(s[1] for s in spans) + 1
    count = max(1, -(-rows // max(1, slice_rows)))
    width = max(1, -(-(hi - lo) // count))
    counts = []
    for k in range(count):
        a, b = lo + k * width, min(hi, lo + (k + 1) * width)
        counts.append(sum(1 for s in spans if s[0] < b and s[1] >= a) + bare)
    return count, float(statistics.median(counts)), max(counts)
