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
# Eviction batches (``evictBetweenSlices``): for a job that keeps rows in state (session
# windows, stream-stream joins), a batch with no rows after each data slice. Its operators run
# with the watermark the slice reached and drop (emit) what it closed, so the next slice's
# batch does not read, merge and rewrite the closed sessions of every key it touches before
# evicting them (docs/benchmarks.md, issue 51). Such an offset repeats the slice's manifest
# (the chain a restart follows) with ``"evict": true``; it reads nothing.
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
    evict: bool = False
    """An eviction batch: no rows, the slice before it already read (``evictBetweenSlices``);
    the job's stateful operators drop what that slice's watermark closed."""

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
            evict=bool(offset.get("evict", False)),
        )


def align_down(value: int, step: int) -> int:
    return value - (value % step)
