"""Property tests of the pure planning code of the Hive source (no Spark): the slice
planner's invariants over generated tables, positions, manifests, partition layouts and
time arithmetic. The planner reads real parquet files written here with pyarrow."""

from __future__ import annotations

import tempfile
from bisect import bisect_left
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import LongType, StructField, StructType, TimestampType

from kappaplus.connectors.hive.layout import PartitionTimeLayout
from kappaplus.connectors.hive.planner import HiveSlicePlanner
from kappaplus.connectors.lake.options import (
    LakeSourceOptions,
    NullEventTimePolicy,
    PartitionTimeKind,
)
from kappaplus.core.timeutil import format_duration, from_micros, parse_duration, to_micros
from kappaplus.slicing.manifest import ManifestEntry, ManifestStore, SliceManifest
from kappaplus.slicing.offsets import PHASE_DATA, Position, align_down

S = 1_000_000
HOUR = 3600 * S
SCHEMA = StructType([StructField("id", LongType()), StructField("ts", TimestampType())])

tables = st.lists(
    st.lists(st.integers(0, 48 * 3600 - 1), min_size=1, max_size=60),  # seconds, per file
    min_size=1,
    max_size=4,
)


def write_table(root: Path, files: list[list[int]], group_rows: int) -> list[int]:
    """One parquet file per list of event times (seconds); returns all times in micros."""
    times: list[int] = []
    for i, seconds in enumerate(files):
        micros = [s * S for s in seconds]
        times += micros
        table = pa.table(
            {
                "id": pa.array(range(len(micros)), pa.int64()),
                "ts": pa.array(micros, pa.timestamp("us", tz="UTC")),
            }
        )
        pq.write_table(table, root / f"part-{i:03d}.parquet", row_group_size=group_rows)
    return sorted(times)


def options(root: Path, manifests: Path, **kw: object) -> LakeSourceOptions:
    base: dict[str, object] = {
        "table": "t",
        "location": str(root),
        "format": "parquet",
        "schema": SCHEMA,
        "partition_columns": (),
        "event_time_column": "ts",
        "starting_timestamp": 0,
        "ending_timestamp": 48 * HOUR,
        "max_event_time_per_trigger": HOUR,
        "max_rows_per_trigger": None,
        "max_bytes_per_trigger": None,
        "partition_time_format": None,
        "partition_time_kind": PartitionTimeKind.EVENT,
        "max_lateness": 0,
        "completeness_delay": 0,
        "null_event_time_policy": NullEventTimePolicy.FAIL,
        "dead_letter_path": None,
        "manifest_dir": str(manifests),
        "watermark_delay": None,
        "rows_per_partition": 100_000,
    }
    base.update(kw)
    return LakeSourceOptions(**base)  # type: ignore[arg-type]


def plan_all(opts: LakeSourceOptions, row_budget: int | None) -> list[dict]:
    planner = HiveSlicePlanner(opts)
    planner.prepare_available_now()
    offset = planner.initial_offset()
    offsets = []
    for _ in range(10_000):
        nxt = planner.next(offset, row_budget)
        if nxt == offset:
            return offsets
        offsets.append(nxt)
        offset = nxt
    raise AssertionError("the planner did not reach the end")


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    files=tables,
    span_minutes=st.sampled_from([7, 30, 60, 180, 24 * 60]),
    max_rows=st.one_of(st.none(), st.integers(1, 40)),
    admission=st.one_of(st.none(), st.integers(1, 40)),
    group_rows=st.integers(1, 30),
    evict=st.booleans(),
    ahead=st.booleans(),
)
def test_slices_never_overlap_never_go_back_cover_the_range_and_keep_budgets(
    files: list[list[int]],
    span_minutes: int,
    max_rows: int | None,
    admission: int | None,
    group_rows: int,
    evict: bool,
    ahead: bool,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root, manifests = Path(tmp) / "table", Path(tmp) / "manifests"
        root.mkdir()
        times = write_table(root, files, group_rows)
        span = span_minutes * 60 * S
        opts = options(
            root,
            manifests,
            max_event_time_per_trigger=span,
            max_rows_per_trigger=max_rows,
            evict_between_slices=evict,
            watermark_ahead=ahead,
        )
        planned = plan_all(opts, admission)
        # the watermark ahead: a data slice that fixed the next one is followed by exactly
        # that slice (its marker moved the watermark to that slice's end, so the batch
        # after must read all of it); the eviction batches it replaces do not come
        for before, offset in zip([None, *planned], planned, strict=False):
            if before is not None and before.get("ahead"):
                assert ahead and offset.get("phase", PHASE_DATA) == PHASE_DATA
                assert [offset["lo"], offset["hi"]] == before["ahead"], (before, offset)
            elif ahead and before is not None and before.get("manifest"):
                # only the last slice, or one before a stretch with no data, fixes none
                assert offset.get("markers") or not offset.get("manifest"), (before, offset)
        # an eviction batch follows each slice that read files, and only such a slice: it
        # repeats the slice's position and manifest and reads nothing
        for before, offset in zip([None, *planned], planned, strict=False):
            if offset.get("evict"):
                assert evict and not ahead and before is not None and before.get("manifest")
                assert not before.get("evict")
                assert {**offset, "evict": None, "files": None} == {
                    **before,
                    "evict": None,
                    "files": None,
                }
            elif (
                evict
                and not ahead
                and before is not None
                and before.get("manifest")
                and not before.get("evict")
            ):
                assert offset.get("markers") or offset.get("phase") != PHASE_DATA, offset
        offsets = [o for o in planned if not o.get("evict")]
        slices = [(o["lo"], o["hi"]) for o in offsets if o.get("phase", PHASE_DATA) == PHASE_DATA]
        store = ManifestStore(str(manifests))
        # a slice's manifest is stored, names the slice and chains to the one before
        previous = None
        for offset in offsets:
            if offset.get("manifest"):
                manifest = store.get(offset["manifest"])
                assert (manifest.lo, manifest.hi) == (offset["lo"], offset["hi"])
                assert manifest.previous == previous
                previous = offset["manifest"]

    # never go back, never overlap: each slice starts at or after the previous end
    previous_hi = 0
    for lo, hi in slices:
        assert previous_hi <= lo <= hi, (previous_hi, lo, hi)
        previous_hi = hi
    # the whole range is planned
    assert slices and slices[-1][1] == 48 * HOUR
    # every row falls in exactly one slice
    per_slice = Counter()
    for t in times:
        owners = [i for i, (lo, hi) in enumerate(slices) if lo <= t < hi]
        assert len(owners) == 1, (t, owners)
        per_slice[owners[0]] += 1
    # budgets: event time per slice, rows per slice (unless one timestamp alone exceeds it)
    budgets = [b for b in (max_rows, admission) if b is not None]
    for i, (lo, hi) in enumerate(slices):
        assert hi - lo <= span
        assert align_down(lo, span) <= lo and hi <= align_down(lo, span) + span
        if budgets and per_slice[i] > min(budgets):
            inside = times[bisect_left(times, lo) : bisect_left(times, hi)]
            assert len(set(inside)) == 1, "over budget with more than one timestamp"


def test_a_slice_fixed_ahead_is_read_next_even_by_a_run_without_it() -> None:
    """The watermark already stands at the end of a slice fixed ahead, so the batch after
    must read that slice, also when the run restarts with eviction batches instead (one
    without rows there would drop sessions the slice's rows still extend)."""
    with tempfile.TemporaryDirectory() as tmp:
        root, manifests = Path(tmp) / "table", Path(tmp) / "manifests"
        root.mkdir()
        write_table(root, [list(range(0, 48 * 3600, 60))], 10)
        span = 4 * HOUR
        ahead = HiveSlicePlanner(
            options(root, manifests, watermark_ahead=True, max_event_time_per_trigger=span)
        )
        ahead.prepare_available_now()
        first = ahead.next(ahead.initial_offset(), None)
        assert (first["lo"], first["hi"], first["ahead"]) == (0, span, [span, 2 * span])
        evicting = HiveSlicePlanner(
            options(root, manifests, evict_between_slices=True, max_event_time_per_trigger=span)
        )
        evicting.prepare_available_now()
        second = evicting.next(first, None)
        assert not second.get("evict") and [second["lo"], second["hi"]] == first["ahead"]
        assert "ahead" not in second
        assert evicting.next(second, None).get("evict")


@given(
    origin=st.integers(0, 2**50),
    lo=st.integers(0, 2**50),
    hi=st.integers(0, 2**50),
    markers=st.integers(0, 3),
    late=st.integers(0, 10**6),
)
def test_position_parses_what_offsets_carry(
    origin: int, lo: int, hi: int, markers: int, late: int
) -> None:
    raw = {"origin": origin, "lo": lo, "hi": hi, "manifest": "ab" * 16, "phase": "end"}
    raw |= {"markers": markers, "lateFiles": late, "lateRows": 2 * late}
    pos = Position.parse(raw)
    assert (pos.origin, pos.lo, pos.hi, pos.manifest, pos.phase) == (
        origin,
        lo,
        hi,
        "ab" * 16,
        "end",
    )
    assert (pos.markers, pos.late_files, pos.late_rows) == (markers, late, 2 * late)
    assert Position.parse({}).phase == PHASE_DATA


entries = st.builds(
    ManifestEntry,
    path=st.text("abcdef/._-", min_size=1, max_size=30),
    size=st.integers(0, 2**40),
    mtime_ns=st.integers(0, 2**62),
    partition_values=st.dictionaries(st.sampled_from(["dt", "hr"]), st.text(max_size=8)),
    admissible_lo=st.integers(0, 2**50),
    admissible_hi=st.integers(0, 2**50),
    row_groups=st.lists(st.integers(0, 100), max_size=5),
    route_row_groups=st.lists(st.integers(0, 100), max_size=5),
)


@settings(max_examples=50, deadline=None)
@given(
    lo=st.integers(0, 2**50),
    width=st.integers(1, 2**40),
    items=st.lists(entries, max_size=4),
    previous=st.one_of(st.none(), st.text("0123456789abcdef", min_size=32, max_size=32)),
)
def test_manifests_round_trip_and_are_content_addressed(
    lo: int, width: int, items: list[ManifestEntry], previous: str | None
) -> None:
    manifest = SliceManifest("db.t", lo, lo + width, items, previous)
    assert SliceManifest.from_json(manifest.to_json()) == manifest
    with tempfile.TemporaryDirectory() as tmp:
        store = ManifestStore(tmp)
        digest = store.put(manifest)
        assert store.put(manifest) == digest == manifest.digest  # idempotent
        assert store.get(digest) == manifest
    other = SliceManifest("db.t", lo, lo + width + 1, items, previous)
    assert other.digest != digest


moments = st.datetimes(
    min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)


@given(moment=moments)
def test_hourly_layout_range_contains_the_moment_and_lasts_an_hour(moment: datetime) -> None:
    layout = PartitionTimeLayout("dt=%Y-%m-%d/hr=%H")
    lo, hi = layout.range_of(moment.strftime("dt=%Y-%m-%d/hr=%H") + "/part-0.parquet")
    t = to_micros(moment)
    assert lo <= t < hi and hi - lo == HOUR and lo % HOUR == 0
    assert layout.granularity == "hour" and layout.depth == 2


@given(moment=moments)
def test_daily_and_monthly_layouts_tile_time(moment: datetime) -> None:
    day = PartitionTimeLayout("dt=%Y-%m-%d")
    lo, hi = day.range_of(moment.strftime("dt=%Y-%m-%d"))
    assert lo <= to_micros(moment) < hi and hi - lo == 24 * HOUR
    month = PartitionTimeLayout("month=%Y-%m")
    lo, hi = month.range_of(moment.strftime("month=%Y-%m"))
    assert lo <= to_micros(moment) < hi
    assert from_micros(hi).day == 1 and from_micros(lo).day == 1
    # the next partition starts where this one ends
    nxt = from_micros(hi).strftime("month=%Y-%m")
    assert month.range_of(nxt)[0] == hi


@given(micros=st.integers(0, 10**15))
def test_to_and_from_micros_round_trip(micros: int) -> None:
    assert to_micros(from_micros(micros)) == micros


@given(
    seconds=st.integers(0, 10**9),
    millis=st.integers(0, 10**12),
)
def test_durations_round_trip_through_their_spark_form(seconds: int, millis: int) -> None:
    assert parse_duration(format_duration(seconds * S)) == seconds * S
    assert parse_duration(format_duration(millis * 1000)) == millis * 1000
    assert parse_duration(timedelta(seconds=seconds)) == seconds * S


@given(
    hours=st.integers(0, 1000),
    minutes=st.integers(0, 59),
)
def test_durations_in_words_add_up(hours: int, minutes: int) -> None:
    assert parse_duration(f"{hours} hours {minutes} min") == (hours * 60 + minutes) * 60 * S
    assert parse_duration(f"{hours}h") == hours * HOUR


@given(value=st.integers(0, 2**50), step=st.integers(1, 2**40))
def test_align_down(value: int, step: int) -> None:
    aligned = align_down(value, step)
    assert aligned <= value < aligned + step and aligned % step == 0
