"""Offsets of the ``kappa_hive`` source: a :class:`Position` in event time.

An offset says everything in ``[origin, hi)`` has been planned, which slice ``[lo, hi)`` the
last micro-batch covered (and its manifest), and the end-of-input phase. Offsets are event
times, so slices never overlap nor go backwards, and a checkpoint replays exactly the
slices it planned.
"""

from __future__ import annotations

from dataclasses import dataclass

from kappaplus.core.timeutil import iso

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
# Watermark ahead (``watermarkAhead``), which makes eviction batches unneeded: a data slice's
# offset also fixes the next slice, ``"ahead": [lo, hi]``, and its batch carries a marker row
# at that slice's end (``hi`` - 1 microsecond). Spark judges a batch's late rows by the
# watermark of the batch before and evicts by the batch's own, so the next slice's batch
# reads every row of ``[lo, hi)`` as on time and then evicts with a watermark of its own
# end less the delay: what the slice closed leaves the state store in the slice's own
# batch, where an eviction batch would follow. The next call of the planner reads exactly
# that slice (a replay too: it is in the offset), since the watermark already stands there.
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
    ahead: tuple[int, int] | None = None
    """The next slice ``[lo, hi)``, fixed by this batch, whose marker row moves the watermark
    to its end (``watermarkAhead``)."""

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
            ahead=_ahead(offset.get("ahead")),
        )


def _ahead(value: object) -> tuple[int, int] | None:
    if isinstance(value, list | tuple) and len(value) == 2:
        return int(value[0]), int(value[1])
    return None


def marker_times(first: Position, last: Position, watermark_delay: int | None) -> list[int]:
    """Event times of the marker rows the micro-batch from ``first`` to ``last`` carries:
    the end-of-input marker (the end bound plus the watermark delay) when the batch starts or
    advances the end phase, and the watermark-ahead marker, one microsecond before the end
    of the next slice, when the batch reads a slice that fixed its successor.

    >>> data = Position(0, 0, 10, "m0", PHASE_DATA, ahead=(10, 20))
    >>> marker_times(Position(0, 0, 0, None, PHASE_DATA), data, 5)
    [19]
    >>> last = Position(0, 20, 30, "m2", PHASE_DATA, markers=1)
    >>> marker_times(data, last, 5)
    [35]
    """
    times: list[int] = []
    if (first.phase, first.markers) != (last.phase, last.markers) and last.markers > 0:
        assert last.hi is not None and watermark_delay is not None
        times.append(last.hi + watermark_delay)
    if last.ahead is not None and last.phase == PHASE_DATA and not last.evict and first != last:
        times.append(last.ahead[1] - 1)
    return times


def align_down(value: int, step: int) -> int:
    return value - (value % step)


def slice_offset(
    origin: int | None,
    lo: int | None,
    hi: int | None,
    manifest: str | None,
    phase: str,
    files: int,
    late_files: int,
    late_rows: int,
    done: float | None,
) -> dict:
    """The offset of a micro-batch as the planner writes it (:class:`Position` reads it):
    the planned range, the slice and its manifest, the phase, the files read and the late
    files found so far, with the slice in words and the fraction done for people reading
    the checkpoint."""
    offset: dict = {
        "v": OFFSET_VERSION,
        "origin": origin,
        "lo": lo,
        "hi": hi,
        "manifest": manifest,
        "phase": phase,
        "files": files,
        "lateFiles": late_files,
        "lateRows": late_rows,
    }
    if lo is not None and hi is not None:
        offset["range"] = f"[{iso(lo)}, {iso(hi)})"
    if done is not None:
        offset["done"] = done
    return offset
