"""Offsets of the ``kappa_hive`` source: a :class:`Position` in event time.

An offset says everything in ``[origin, hi)`` has been planned, which slice ``[lo, hi)`` the
last micro-batch covered (and its manifest), and the end-of-input phase. Offsets are event
times, so slices never overlap nor go backwards, and a checkpoint replays exactly the
slices it planned.
"""

from __future__ import annotations

from dataclasses import dataclass

PHASE_DATA = "data"
PHASE_END = "end"
# End-of-input markers. The first moves the watermark to the end bound; it rides in the
# last data slice (it is later than every row there, so it changes nothing but the
# watermark). Operators evict with the watermark of the batch before, so one marker batch
# follows with the final watermark and emits the last windows (tumbling, sliding and session
# windows: tests/connectors/test_hive_watermark_claims.py). MARKER_BATCHES counts both.
MARKER_BATCHES = 2
OFFSET_VERSION = 1
FALLBACK_SPAN = 3_600_000_000  # adaptive slicing without statistics: 1 hour


@dataclass(frozen=True)
class Position:
    """A parsed offset: everything in ``[origin, hi)`` has been planned."""

    origin: int | None
    lo: int | None
    hi: int | None
    manifest: str | None
    phase: str
    markers: int = 0
    late_files: int = 0
    late_rows: int = 0

    @classmethod
    def parse(cls, offset: dict) -> Position:
        return cls(
            origin=offset.get("origin"),
            lo=offset.get("lo"),
            hi=offset.get("hi"),
            manifest=offset.get("manifest"),
            phase=offset.get("phase", PHASE_DATA),
            markers=int(offset.get("markers", 0)),
            late_files=int(offset.get("lateFiles", 0)),
            late_rows=int(offset.get("lateRows", 0)),
        )


def align_down(value: int, step: int) -> int:
    return value - (value % step)
