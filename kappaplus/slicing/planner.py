"""Planning event-time slices: which ``[lo, hi)`` a micro-batch covers and which files it reads.

The planner knows nothing of the lake format. It works on "data files with per-file (per row
group where the format gives it) event-time min/max, row counts and bytes, and the
event-time range each file admits" (:mod:`kappaplus.slicing.files`), which a
:class:`FileLister` per format produces: partition directories and footers for Hive
(:mod:`kappaplus.connectors.hive.planner`), manifests of a pinned snapshot for Iceberg
(:mod:`kappaplus.connectors.iceberg.lister`). A file not partitioned by event time admits
every event time: its statistics place it in every slice its ``[min, max]`` overlaps, and
the reader applies the slice's filter.

The planner runs in the source's driver-side Python process. Each call of :meth:`next`
lists the table (a bounded run reuses a listing younger than ``listingInterval``), checks
it for files that appeared in already-delivered ranges (reported, never mixed in), picks
the next slice within the per-trigger budgets, stores the slice's manifest, and returns
the new offset.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

import numpy as np

from kappaplus.core.timeutil import format_duration, iso
from kappaplus.slicing.files import UNBOUNDED_HI, DataFile, RowGroupStats
from kappaplus.slicing.late_files import DeliveredFiles
from kappaplus.slicing.manifest import ManifestEntry, ManifestStore, SliceManifest, slice_entries
from kappaplus.slicing.offsets import (
    FALLBACK_SPAN,
    MARKER_BATCHES,
    PHASE_DATA,
    PHASE_END,
    Position,
    align_down,
    slice_offset,
)
from kappaplus.slicing.pacing import BatchPacer
from kappaplus.slicing.sizing import RowDensity, choose_end, row_density

DEFAULT_TARGET_ROWS = 2_000_000
"""Rows per micro-batch that adaptive slicing aims at when no target is set: large enough
that a micro-batch's fixed cost is small against its rows, small enough that one
slice's rows and its shuffle fit a production executor (see ``docs/benchmarks.md``)."""

DEFAULT_FIRST_SLICE_ROWS = 500_000
"""Rows the first slice of a query aims at by default when the range is long
(:data:`RAMP_SLICES`): its micro-batch is the one where the JVM, Python workers and state
store warm up, so a smaller one shows the run's first output and audit counts seconds
sooner, for one more micro-batch in a run that needs two or more (``firstSliceRows``)."""

RAMP_SLICES = 1
"""The first slice is smaller only when the range holds more than this many slices' worth
of rows: a backfill that fits one slice keeps its one micro-batch (a range of one slice
made to start small only shows its first output later; ``docs/benchmarks.md``)."""

DEFAULT_LISTING_INTERVAL = 30_000_000
"""How long (microseconds) a bounded run plans from one listing of the table (a year of
hourly partitions: 0.3-0.6 s a listing; one per slice grew with the square of the range).
A file landing meanwhile in a range the table had declared complete is reported as late
by the next listing; the run's end and a wait list afresh; a followed table lists every
micro-batch (``docs/hive-source.md``)."""

log = logging.getLogger(__name__)


class SliceOptions(Protocol):
    """The options the planner reads (a source's validated options object has them)."""

    @property
    def table(self) -> str: ...
    @property
    def manifest_dir(self) -> str: ...
    @property
    def starting_timestamp(self) -> int | None: ...
    @property
    def ending_timestamp(self) -> int | None: ...
    @property
    def completeness_delay(self) -> int: ...
    @property
    def max_event_time_per_trigger(self) -> int | None: ...
    @property
    def max_rows_per_trigger(self) -> int | None: ...
    @property
    def max_bytes_per_trigger(self) -> int | None: ...
    @property
    def target_rows_per_trigger(self) -> int | None: ...
    @property
    def target_bytes_per_trigger(self) -> int | None: ...
    @property
    def target_batch_duration(self) -> int | None: ...
    @property
    def first_slice_rows(self) -> int: ...
    @property
    def emits_end_marker(self) -> bool: ...
    @property
    def evict_between_slices(self) -> bool: ...
    @property
    def watermark_ahead(self) -> bool: ...
    @property
    def listing_interval(self) -> int: ...


class FileLister(Protocol):
    """A lake format's view of a table for the planner."""

    def files(self) -> list[DataFile]:
        """The table's data files now (or in the pinned snapshot)."""
        ...

    def stats(self, f: DataFile) -> tuple[RowGroupStats, ...]:
        """Per row group (or per file) row counts, bytes and event-time bounds."""
        ...

    def stats_of_entry(self, entry: ManifestEntry) -> tuple[RowGroupStats, ...]:
        """Statistics of a manifest's file as it was planned."""
        ...

    def times(self, f: DataFile, group: int) -> np.ndarray:
        """Sorted event times (microseconds) of one row group (where statistics lack)."""
        ...

    def partition_frontier(self, files: list[DataFile]) -> int | None:
        """How far time partitions say the table is complete (lateness and earliness
        allowed for); None for a table without time partitions (its data's end counts)."""
        ...


class SlicePlanner:
    """Driver-side state of one streaming query over one table."""

    def __init__(self, options: SliceOptions, lister: FileLister) -> None:
        self.options = options
        self.lister = lister
        self.store = ManifestStore(options.manifest_dir)
        self.target: int | None = None  # fixed end for Trigger.AvailableNow
        self.delivered = DeliveredFiles(options.table, self.store, self._rows_in)
        self._listed: list[DataFile] | None = None
        self._listed_at = 0.0
        self._reused = False  # whether the last listing() returned a kept listing
        self._by_start: tuple[list[DataFile], list[DataFile]] | None = None
        self._frontier: tuple[list[DataFile], int | None] | None = None
        self._fallback_logged = False
        self.pacer: BatchPacer | None = None
        if options.target_batch_duration is not None:
            self.pacer = BatchPacer(
                options.target_batch_duration / 1_000_000,
                options.target_rows_per_trigger or DEFAULT_TARGET_ROWS,
            )

    # -- listing and statistics -------------------------------------------------------

    def listing(self, *, reuse: bool = False) -> list[DataFile]:
        """The files listed now, or (``reuse``) the last listing within ``listingInterval``."""
        age = time.monotonic() - self._listed_at
        self._reused = (
            reuse and self._listed is not None and age * 1_000_000 < self.options.listing_interval
        )
        if self._reused:
            assert self._listed is not None
            return self._listed
        self._listed = self.lister.files()
        self._listed_at = time.monotonic()
        return self._listed

    @property
    def bounded(self) -> bool:
        """Whether this run ends (an end bound, or available-now's target)."""
        return self.target is not None or self.options.ending_timestamp is not None

    def stats(self, f: DataFile) -> tuple[RowGroupStats, ...]:
        return self.lister.stats(f)

    def stats_of_entry(self, entry: ManifestEntry) -> tuple[RowGroupStats, ...]:
        """Statistics of a manifest's file as it was planned (same size and fingerprint)."""
        return self.lister.stats_of_entry(entry)

    def times(self, f: DataFile, group: int) -> np.ndarray:
        return self.lister.times(f, group)

    def _rows_in(self, f: DataFile, lo: int, hi: int) -> int:
        return sum(len(self._times_in(f, g, lo, hi)) for g in self.stats(f))

    def _times_in(self, f: DataFile, group: RowGroupStats, lo: int, hi: int) -> np.ndarray:
        lo, hi = max(lo, f.admissible_lo), min(hi, f.admissible_hi)
        if lo >= hi or not group.may_overlap(lo, hi):
            return np.empty(0, dtype=np.int64)
        values = self.times(f, group.index)
        return values[(values >= lo) & (values < hi)]

    def data_extent(self, files: list[DataFile]) -> tuple[int, int] | None:
        """Smallest and largest admissible event time in the table, or None if it is empty."""
        lows, highs = [], []
        for f in files:
            for group in self.stats(f):
                if group.ts_min is not None and group.ts_max is not None:
                    lows.append(max(group.ts_min, f.admissible_lo))
                    highs.append(min(group.ts_max, f.admissible_hi - 1))
                else:
                    values = self._times_in(f, group, f.admissible_lo, f.admissible_hi)
                    if len(values):
                        lows.append(int(values[0]))
                        highs.append(int(values[-1]))
        if not lows:
            return None
        return min(lows), max(highs)

    def frontier(self, files: list[DataFile]) -> int | None:
        """How far the table is complete: the end of its newest time partition (less the
        lateness an arrival-time partition allows and the completeness delay), or for
        tables without time partitions, the end of its data (worked out once per listing)."""
        if self._frontier is not None and self._frontier[0] is files:
            return self._frontier[1]
        newest = self.lister.partition_frontier(files) if files else None
        if newest is not None:
            found: int | None = newest - self.options.completeness_delay
        else:
            extent = self.data_extent(files)
            found = None if extent is None else extent[1] + 1 - self.options.completeness_delay
        self._frontier = (files, found)
        return found

    # -- Trigger.AvailableNow -----------------------------------------------------------

    def prepare_available_now(self) -> None:
        """Fix the end of this run: the end bound, else the data present now."""
        if self.options.ending_timestamp is not None:
            self.target = self.options.ending_timestamp
            return
        extent = self.data_extent(self.listing())
        self.target = None if extent is None else extent[1] + 1
        if self.target is None:
            self.target = self.options.starting_timestamp or 0
        log.info("table %r: AvailableNow run ends at %s", self.options.table, iso(self.target))

    # -- offsets --------------------------------------------------------------------------

    def initial_offset(self) -> dict:
        start = self.options.starting_timestamp
        if start is None:
            extent = self.data_extent(self.listing())
            start = None if extent is None else extent[0]
        return slice_offset(start, start, start, None, PHASE_DATA, 0, 0, 0, None)

    def _limit(self, files: list[DataFile]) -> tuple[int | None, bool]:
        """The event time planning may reach now, and whether reaching it ends the input."""
        end = self.options.ending_timestamp
        if self.target is not None:
            return self.target, True
        follow = self.frontier(files)
        if end is None:
            return follow, False
        if follow is None or follow >= end:
            return end, True
        return follow, False

    def next(self, start: dict, row_budget: int | None) -> dict:
        """The offset of the next micro-batch after ``start``, or ``start`` when there is none."""
        pos = Position.parse(start)
        if pos.phase == PHASE_END and pos.markers >= MARKER_BATCHES:
            return start
        if (
            self._evicts_after(pos)
            and self.target is not None
            and pos.hi is not None
            and pos.hi < self.target
        ):
            # a bounded run's eviction batch needs no listing (0.5 s a call over a year of
            # hourly partitions): the next call lists, and audits, before the next slice
            return self._eviction(start, pos.late_files, pos.late_rows)
        files = self.listing(reuse=self.bounded and pos.hi is not None)
        self.delivered.seed(pos.manifest)
        limit, ends_input = self._limit(files)
        if self._reused and (limit is None or pos.hi is None or pos.hi >= limit):
            # about to wait, or to end the input: on a listing of now
            files = self.listing()
            limit, ends_input = self._limit(files)
        if pos.hi is None:  # the table was empty when the query started
            extent = self.data_extent(files)
            if extent is None:
                return start
            pos = Position(extent[0], extent[0], extent[0], None, PHASE_DATA)
        assert pos.origin is not None and pos.hi is not None
        late_files, late_rows = self.delivered.audit(files, pos.origin, pos.hi)
        late_files += pos.late_files
        late_rows += pos.late_rows
        if limit is None or pos.hi >= limit:
            if ends_input and self.options.emits_end_marker:
                offset = slice_offset(
                    pos.origin, pos.hi, pos.hi, None, PHASE_END, 0, late_files, late_rows, 1.0
                )
                offset["markers"] = pos.markers + 1
                return offset
            return start
        if self._evicts_after(pos):
            return self._eviction(start, late_files, late_rows)
        offset = self._plan(files, pos, limit, row_budget, late_files, late_rows)
        if ends_input and self.options.emits_end_marker and offset["hi"] >= limit:
            offset["markers"] = 1  # the last data slice carries the first marker
        return offset

    @property
    def plans_ahead(self) -> bool:
        """Whether each slice fixes the next and moves the watermark to its end
        (``watermarkAhead``; a bounded run only: a followed table's next slice may not be
        complete yet). It replaces the eviction batches (:mod:`~kappaplus.slicing.offsets`)."""
        return self.options.watermark_ahead and self.bounded

    def _evicts_after(self, pos: Position) -> bool:
        """Whether an eviction batch comes next: ``pos`` ends a data slice that read files
        and fixed no next slice (a batch with no rows after one that moved the watermark
        ahead would drop sessions the fixed slice's rows still extend)."""
        return (
            self.options.evict_between_slices
            and not self.plans_ahead
            and pos.phase == PHASE_DATA
            and pos.manifest is not None
            and not pos.evict
            and pos.ahead is None
        )

    def _eviction(self, start: dict, late_files: int, late_rows: int) -> dict:
        """The offset of an eviction batch after the slice ending at ``start``: the same
        position and manifest, no rows (see :mod:`~kappaplus.slicing.offsets`)."""
        offset = {**start, "files": 0, "lateFiles": late_files, "lateRows": late_rows}
        offset["evict"] = True
        return offset

    def _plan(
        self,
        files: list[DataFile],
        pos: Position,
        limit: int,
        row_budget: int | None,
        late_files: int,
        late_rows: int,
    ) -> dict:
        o = self.options
        assert pos.origin is not None and pos.hi is not None
        density: RowDensity | None = None
        if pos.ahead is not None:
            # the batch before fixed this slice and moved the watermark to its end: read
            # exactly it, whatever this run's options (a restart from that checkpoint too)
            lo, hi = pos.ahead
        else:
            bounds = self._bounds(files, pos.hi, limit, row_budget, first=pos.manifest is None)
            if bounds is None:  # nothing more until the limit: one empty batch jumps there
                log.info("table %r: no data in [%s, %s)", o.table, iso(pos.hi), iso(limit))
                return slice_offset(
                    pos.origin,
                    limit,
                    limit,
                    None,
                    PHASE_DATA,
                    0,
                    late_files,
                    late_rows,
                    self._done(pos.origin, limit, limit),
                )
            lo, hi, density = bounds
        entries = self._entries(files, lo, hi, pos.origin)
        manifest = SliceManifest(o.table, lo, hi, entries, pos.manifest)
        digest = self.store.put(manifest)
        sliced = {f.path: f for f in files if f.admits(lo, hi)}
        self.delivered.include(sliced)
        rows = sum(
            g.num_rows
            for e in entries
            for g in self.stats(sliced[e.path])
            if g.index in e.row_groups
        )
        log.info(
            "table %r: slice [%s, %s) reads %d files (<= %d rows)",
            o.table,
            iso(lo),
            iso(hi),
            len(entries),
            rows,
        )
        if self.pacer is not None:
            estimate = density.rows_within(lo, hi) if density is not None else 0
            self.pacer.planned(hi, estimate or rows, time.monotonic())
        offset = slice_offset(
            pos.origin,
            lo,
            hi,
            digest,
            PHASE_DATA,
            len(entries),
            late_files,
            late_rows,
            self._done(pos.origin, hi, limit),
        )
        if self.plans_ahead and hi < limit:
            following = self._bounds(files, hi, limit, row_budget, first=False)
            if following is not None:
                offset["ahead"] = [following[0], following[1]]
        return offset

    def _bounds(
        self, files: list[DataFile], start: int, limit: int, row_budget: int | None, *, first: bool
    ) -> tuple[int, int, RowDensity] | None:
        """The slice ``[lo, hi)`` to read after ``start`` (and where its rows lie), within
        the span cap, the rows targets and the row budgets; None when no file has data in
        ``[start, limit)``. ``first``: the query's first slice (``firstSliceRows``)."""
        o = self.options
        span = o.max_event_time_per_trigger
        # files by the start of their partition's range: both the earliest data and the
        # slice's size are found from the first of them (row_density keeps this order)
        by_start = self._ordered(files)
        earliest = self._first_data(by_start, start, limit)
        if earliest is None:
            return None
        if span is None:  # adaptive only: the gap before the data holds no rows, it costs nothing
            lo, hi = start, limit
        else:
            lo = start if earliest < start + span else max(start, align_down(earliest, span))
            hi = min(align_down(lo, span) + span, limit)
        # where the rows of [lo, hi) lie: sizes the slice, and its rows for pacing after the caps
        rows_target = self._rows_target()
        enough = None
        if rows_target is not None:  # the statistics of a few slices ahead are enough
            enough = max(2, RAMP_SLICES + 1) * rows_target
        density = row_density(by_start, self.stats, lo, hi, enough, presorted=True)
        hi = self._adaptive_end(density, lo, min(hi, density.complete_below), first=first)
        budget = self._row_budget(files, lo, hi, row_budget)
        if budget is not None:
            hi = self._fit(files, lo, hi, budget)
        return lo, hi, density

    def batch_committed(self, end: dict) -> None:
        """Spark committed the batch ending at offset ``end`` (the source's ``commit``):
        with ``targetBatchDuration`` the next slices are sized from the time it took."""
        if self.pacer is not None:
            before = self.pacer.rows
            self.pacer.committed(Position.parse(end).hi, time.monotonic())
            if self.pacer.rows != before:
                log.info(
                    "table %r: slices of about %d rows (was %d) for micro-batches of %s",
                    self.options.table,
                    self.pacer.rows,
                    before,
                    format_duration(self.options.target_batch_duration or 0),
                )

    def _done(self, origin: int, hi: int, limit: int) -> float | None:
        end = self.target if self.target is not None else self.options.ending_timestamp
        if end is None or end <= origin:
            return None
        return round(min(1.0, (hi - origin) / (end - origin)), 6)

    def _first_data(self, by_start: list[DataFile], lo: int, hi: int) -> int | None:
        """The earliest event time in ``[lo, hi)`` that some file may deliver; ``by_start``:
        the files ordered by admissible start, so the statistics of files starting after
        the earliest time found are not read."""
        best: int | None = None
        for f in by_start:
            if best is not None and f.admissible_lo >= best:
                break
            if not f.admits(lo, hi):
                continue
            a, b = max(lo, f.admissible_lo), min(hi, f.admissible_hi)
            for group in self.stats(f):
                if not group.may_overlap(a, b):
                    continue
                if group.ts_min is not None:
                    candidate = max(group.ts_min, a)
                else:
                    values = self._times_in(f, group, a, b)
                    if not len(values):
                        continue
                    candidate = int(values[0])
                best = candidate if best is None else min(best, candidate)
        return best

    def _rows_target(self) -> int | None:
        """Rows per slice to aim at: the pacer's (``targetBatchDuration``), else the option."""
        if self.pacer is not None:
            return self.pacer.rows
        return self.options.target_rows_per_trigger

    def _adaptive_end(self, density: RowDensity, lo: int, hi: int, *, first: bool) -> int:
        """Shrink ``hi`` so the slice holds about the target rows (or bytes) per trigger,
        estimated from row-group statistics (:mod:`~kappaplus.slicing.sizing`);
        without statistics or time partitions and without a span cap the slice falls back
        to :data:`FALLBACK_SPAN`. The ``first`` slice of a query aims at no more than
        ``firstSliceRows`` when the range holds more than :data:`RAMP_SLICES` slice
        (not with ``targetBatchDuration``: its pacer sizes every slice itself).
        """
        o = self.options
        if density.unplaceable:
            if o.max_event_time_per_trigger is not None:
                return hi
            if not self._fallback_logged:
                self._fallback_logged = True
                log.info(
                    "table %r: files without event-time statistics or time partitions; "
                    "slices of %s instead of a rows target",
                    o.table,
                    format_duration(FALLBACK_SPAN),
                )
            return min(hi, align_down(lo, FALLBACK_SPAN) + FALLBACK_SPAN)
        targets = [t for t in (self._rows_target(),) if t is not None]
        if o.target_bytes_per_trigger is not None and density.rows_total and density.bytes_total:
            bytes_per_row = density.bytes_total / density.rows_total
            targets.append(max(1, int(o.target_bytes_per_trigger / bytes_per_row)))
        if not targets or not density.starts.size:
            return hi
        target = min(targets)
        if (
            first
            and self.pacer is None
            and o.first_slice_rows < target
            and density.rows_total > RAMP_SLICES * target
        ):
            log.info(
                "table %r: the first slice aims at %d rows (firstSliceRows), the rest at %d",
                o.table,
                o.first_slice_rows,
                target,
            )
            target = o.first_slice_rows
        return choose_end(density.starts, density.ends, density.rows, lo, hi, target)

    def _row_budget(
        self, files: list[DataFile], lo: int, hi: int, row_budget: int | None
    ) -> int | None:
        o = self.options
        budgets = [b for b in (row_budget, o.max_rows_per_trigger) if b is not None]
        if o.max_bytes_per_trigger is not None:
            rows = nbytes = 0
            for f in files:
                if f.admits(lo, hi):
                    for group in self.stats(f):
                        rows += group.num_rows
                        nbytes += group.num_bytes
            if rows:
                budgets.append(max(1, int(o.max_bytes_per_trigger / (nbytes / rows))))
        return min(budgets) if budgets else None

    def _fit(self, files: list[DataFile], lo: int, hi: int, budget: int) -> int:
        """Shrink ``hi`` so the slice holds at most ``budget`` rows (at least one timestamp)."""
        chunks = [
            self._times_in(f, group, lo, hi)
            for f in files
            if f.admits(lo, hi)
            for group in self.stats(f)
        ]
        values = np.sort(np.concatenate(chunks)) if chunks else np.empty(0, dtype=np.int64)
        if len(values) <= budget:
            return hi
        cut = int(values[budget])
        if cut == int(values[0]):
            log.warning(
                "table %r: %d rows share event time %s, more than the per-trigger budget %d",
                self.options.table,
                int(np.sum(values == cut)),
                iso(cut),
                budget,
            )
            return cut + 1
        return cut

    def _entries(self, files: list[DataFile], lo: int, hi: int, origin: int) -> list[ManifestEntry]:
        end = self.options.ending_timestamp
        end = end if end is not None else UNBOUNDED_HI
        return slice_entries(files, lo, hi, origin, end, self.delivered.owned, self.stats)

    def _ordered(self, files: list[DataFile]) -> list[DataFile]:
        """``files`` by the start of their admissible range (sorted once per listing)."""
        if self._by_start is None or self._by_start[0] is not files:
            self._by_start = (files, sorted(files, key=lambda f: f.admissible_lo))
        return self._by_start[1]
