"""Adaptive slicing: property tests of the sizing function and of the planner over real
Parquet files (written with pyarrow, read back by the source's own reader; no Spark).

The planner loop here is the one Spark drives: ``initialOffset``, then ``latestOffset``
from the previous end until it returns its argument, then ``partitions(start, end)`` and
``read`` per micro-batch.
"""

from __future__ import annotations

import json
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from kappaplus.connectors.hive.datasource import HiveStreamReader
from kappaplus.connectors.hive.file_reader import read_partition
from kappaplus.connectors.lake.options import LakeSourceOptions
from kappaplus.slicing.files import DataFile, RowGroupStats
from kappaplus.slicing.pacing import MAX_STEP, MIN_ROWS, BatchPacer
from kappaplus.slicing.sizing import GRID, choose_end, estimate_end, round_down_to_grid, row_density

US = 1_000_000
HOUR = 3600 * US
BASE = int(datetime(2024, 3, 1, tzinfo=UTC).timestamp()) * US
SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("ts", TimestampType()),
        StructField("dt", StringType()),
        StructField("hr", StringType()),
    ]
)


# -- the sizing function --------------------------------------------------------------


@st.composite
def groups(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = draw(st.integers(1, 30))
    starts = np.array(draw(st.lists(st.integers(0, 10**6), min_size=n, max_size=n)))
    widths = np.array(draw(st.lists(st.integers(1, 10**5), min_size=n, max_size=n)))
    rows = np.array(draw(st.lists(st.integers(0, 10**4), min_size=n, max_size=n)))
    return starts, starts + widths, rows


def estimated_rows(starts: np.ndarray, ends: np.ndarray, rows: np.ndarray, lo: int, x: int):
    """Independent reference: rows of each group in proportion to its overlap with [lo, x)."""
    total = 0.0
    for s, e, n in zip(starts.tolist(), ends.tolist(), rows.tolist(), strict=True):
        overlap = max(0, min(e, x) - max(s, lo))
        total += n * overlap / (e - s)
    return total


@given(groups(), st.integers(0, 10**6), st.integers(1, 2 * 10**6), st.integers(1, 10**5))
def test_estimate_end_reaches_the_target_and_no_further(g, lo, length, target):
    starts, ends, rows = g
    limit = lo + length
    end = estimate_end(starts, ends, rows, lo, limit, target)
    assert lo < end <= limit
    got = estimated_rows(starts, ends, rows, lo, end)
    if end == limit:
        return
    # within the target (one row of float slack), or the minimal one-microsecond slice
    assert got <= target + 1 or end == lo + 1
    # ...and maximal: one microsecond more exceeds it (up to float rounding)
    more = estimated_rows(starts, ends, rows, lo, end + 1)
    assert more >= target - 1


@given(groups(), st.integers(0, 10**6), st.integers(1, 2 * 10**6), st.integers(1, 10**5))
def test_choose_end_lies_within_the_tolerance_of_the_target(g, lo, length, target):
    starts, ends, rows = g
    limit = lo + length
    end = choose_end(starts, ends, rows, lo, limit, target)
    assert lo < end <= limit
    if end < limit:
        high = estimate_end(starts, ends, rows, lo, limit, max(1, target * 9 // 8))
        low = estimate_end(starts, ends, rows, lo, limit, max(1, target * 7 // 8))
        assert min(low, high) <= end <= high


@given(st.integers(0, 10**12), st.integers(1, 10**12), st.integers(0, 10**12))
def test_round_down_to_grid_keeps_slices_non_empty(lo, extra, beyond):
    x = lo + extra
    limit = x + beyond
    rounded = round_down_to_grid(x, lo, limit)
    assert lo < rounded <= x or (x >= limit and rounded == limit)
    assert any(rounded % step == 0 for step in GRID)


@st.composite
def hourly_files(draw: st.DrawFn) -> dict[DataFile, tuple[RowGroupStats, ...]]:
    """Files of hourly partitions in shuffled order, some hours with several or none, each
    with row groups spread over (a part of) its hour."""
    files: dict[DataFile, tuple[RowGroupStats, ...]] = {}
    for hour in range(draw(st.integers(1, 40))):
        for n in range(draw(st.integers(0, 3))):
            lo = BASE + hour * HOUR
            f = DataFile(f"h{hour}/{n}.parquet", 1, 1, f"h{hour}", {}, lo, lo + HOUR)
            groups = []
            for i in range(draw(st.integers(1, 3))):
                a = lo + draw(st.integers(0, HOUR - 1))
                b = draw(st.integers(a, lo + HOUR - 1))
                groups.append(RowGroupStats(i, draw(st.integers(0, 500)), 10, a, b, 0))
            files[f] = tuple(groups)
    order = draw(st.permutations(list(files)))
    return {f: files[f] for f in order}


@settings(max_examples=60, deadline=None)
@given(hourly_files(), st.integers(0, 40), st.integers(1, 40), st.integers(1, 2000))
def test_density_stops_reading_statistics_where_no_slice_can_reach(files, start, hours, target):
    """The slice chosen from the statistics read up to ``complete_below`` is the one chosen
    from all of them, and the range holds more than one target either way."""
    lo, hi = BASE + start * HOUR, BASE + (start + hours) * HOUR
    read: list[DataFile] = []

    def stats(f: DataFile) -> tuple[RowGroupStats, ...]:
        read.append(f)
        return files[f]

    full = row_density(list(files), files.__getitem__, lo, hi)
    early = row_density(list(files), stats, lo, hi, enough=2 * target)
    assert lo < early.complete_below <= hi
    if early.complete_below < hi:
        unread = [f for f in files if f not in read and f.admits(lo, hi)]
        assert unread and all(f.admissible_lo >= early.complete_below for f in unread)
        assert early.rows_within(lo, early.complete_below) >= 2 * target
    end = choose_end(full.starts, full.ends, full.rows, lo, hi, target)
    capped = choose_end(
        early.starts, early.ends, early.rows, lo, min(hi, early.complete_below), target
    )
    assert capped == end
    assert (early.rows_total > target) == (full.rows_total > target)


# -- the planner over real files ------------------------------------------------------


def write_table(root: Path, hours: list[int], seed: int, row_group_size: int) -> pa.Table:
    """One Parquet file per hour partition with ``hours[h]`` rows at random times inside
    hour ``h``; returns every row (id, ts in microseconds)."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    ids, times = [], []
    next_id = 0
    for h, n in enumerate(hours):
        if n == 0:
            continue
        t = BASE + h * HOUR + rng.integers(0, HOUR, n)
        i = np.arange(next_id, next_id + n)
        next_id += n
        ids.append(i)
        times.append(t)
        moment = datetime.fromtimestamp((BASE + h * HOUR) / US, tz=UTC)
        part = root / f"dt={moment:%Y-%m-%d}" / f"hr={moment:%H}"
        part.mkdir(parents=True, exist_ok=True)
        table = pa.table(
            {"id": pa.array(i, pa.int64()), "ts": pa.array(t, pa.timestamp("us", tz="UTC"))}
        )
        pq.write_table(table, part / "part-0.parquet", row_group_size=row_group_size)
    if not ids:
        return pa.table({"id": pa.array([], pa.int64()), "ts": pa.array([], pa.int64())})
    return pa.table({"id": np.concatenate(ids), "ts": np.concatenate(times)})


def options(root: Path, manifests: Path, start: int, end: int, **extra: str) -> LakeSourceOptions:
    def stamp(micros: int) -> str:
        return datetime.fromtimestamp(micros / US, tz=UTC).isoformat()

    raw = {
        "table": "events",
        "location": str(root),
        "format": "parquet",
        "schema": json.dumps(SCHEMA.jsonValue()),
        "partitionColumns": "dt,hr",
        "partitionTimeFormat": "dt=%Y-%m-%d/hr=%H",
        "eventTimeColumn": "ts",
        "startingTimestamp": stamp(start),
        "endingTimestamp": stamp(end),
        "manifestDir": str(manifests),
        **extra,
    }
    return LakeSourceOptions.parse(raw)


def run_planner(opts: LakeSourceOptions) -> list[tuple[dict, dict]]:
    """(start, end) offsets of every micro-batch, as Spark would drive the source."""
    reader = HiveStreamReader(opts)
    reader.prepareForTriggerAvailableNow()
    offset = reader.initialOffset()
    batches = []
    for _ in range(10_000):
        following = reader.latestOffset(offset, reader.getDefaultReadLimit())
        if following == offset:
            return batches
        batches.append((offset, following))
        offset = following
    raise AssertionError("the planner did not finish")


def delivered(opts: LakeSourceOptions, start: dict, end: dict) -> list[tuple[int, int]]:
    """(id, ts) of the rows a micro-batch delivers, read by the source's reader."""
    reader = HiveStreamReader(opts)  # a fresh reader: what a restarted query would do
    out: list[tuple[int, int]] = []
    for part in reader.partitions(start, end):
        for batch in read_partition(opts, part):
            ts = batch.column("ts").cast(pa.int64()).to_pylist()
            out.extend(zip(batch.column("id").to_pylist(), ts, strict=True))
    return out


hours_strategy = st.lists(st.sampled_from([0, 0, 1, 3, 20, 150, 600]), min_size=1, max_size=40)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    hours=hours_strategy,
    seed=st.integers(0, 1000),
    row_group_size=st.sampled_from([50, 1000]),
    start_cut=st.integers(0, 90),
    end_cut=st.integers(0, 90),
    target=st.sampled_from([1, 40, 300, 2000, 100_000]),
    cap=st.sampled_from([None, "rows", "span"]),
    first_rows=st.sampled_from([None, 1, 30]),
)
def test_adaptive_slices_cover_the_range_exactly_once(
    hours, seed, row_group_size, start_cut, end_cut, target, cap, first_rows
):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "events"
        truth = write_table(root, hours, seed, row_group_size)
        start = BASE + start_cut * 60 * US
        end = BASE + len(hours) * HOUR - end_cut * 60 * US
        if end <= start:
            end = start + HOUR
        extra = {"targetRowsPerTrigger": str(target)}
        if cap == "rows":
            extra["maxRowsPerTrigger"] = "120"
        if cap == "span":
            extra["maxEventTimePerTrigger"] = "2 hours"
        if first_rows is not None:
            extra["firstSliceRows"] = str(first_rows)
        opts = options(root, Path(tmp) / "manifests", start, end, **extra)
        batches = run_planner(opts)

        ts = np.asarray(truth.column("ts").to_pylist() or [], dtype=np.int64)
        ids = np.asarray(truth.column("id").to_pylist() or [], dtype=np.int64)
        inside = (ts >= start) & (ts < end)
        expected = sorted(zip(ids[inside].tolist(), ts[inside].tolist(), strict=True))

        got: list[tuple[int, int]] = []
        previous_hi = batches[0][0]["hi"] if batches else start
        for first, last in batches:
            lo, hi = last["lo"], last["hi"]
            assert hi >= lo >= previous_hi, "slices never overlap nor go back"
            gap = (ts >= previous_hi) & (ts < lo)
            assert not np.any(gap), "a slice skips only ranges without rows"
            if cap == "span" and hi > lo:
                assert hi - lo <= 2 * HOUR
            rows = delivered(opts, first, last)
            assert all(lo <= t < hi for _, t in rows), "rows lie in their slice"
            if cap == "rows":
                times = [t for _, t in rows]
                assert len(rows) <= 120 or len(set(times)) == 1
            assert delivered(opts, first, last) == rows, "a replay reads the same rows"
            got.extend(rows)
            previous_hi = hi
        if expected:
            assert batches and batches[-1][1]["hi"] == end, "the slices reach the end bound"
        assert len(got) == len(set(got)), "no duplicates"
        assert sorted(got) == expected, "no loss"


def test_dense_hours_get_short_slices_and_sparse_days_long_ones(tmp_path: Path):
    hours = [5] * 24 + [2000] * 3 + [5] * 24
    root = tmp_path / "events"
    write_table(root, hours, seed=3, row_group_size=10_000)
    start, end = BASE, BASE + len(hours) * HOUR
    opts = options(root, tmp_path / "manifests", start, end, targetRowsPerTrigger="1000")
    spans = [(b["lo"], b["hi"]) for _, b in run_planner(opts)]
    dense = [(lo, hi) for lo, hi in spans if lo >= BASE + 24 * HOUR and hi <= BASE + 27 * HOUR]
    assert len(dense) >= 4, "2000-row hours are cut into slices of about 1000 rows"
    assert all(hi - lo <= HOUR for lo, hi in dense)
    assert all(hi % (60 * US) == 0 for _, hi in spans), "slices end on whole minutes"
    assert spans[0][1] - spans[0][0] >= 8 * HOUR, "120 rows a day fit in one long slice"
    assert spans[-1][1] == end


def slice_rows(opts: LakeSourceOptions) -> list[int]:
    """Rows each data slice of a whole run delivers."""
    return [len(delivered(opts, a, b)) for a, b in run_planner(opts) if b["phase"] == "data"]


def test_a_long_range_starts_with_a_smaller_slice_and_a_short_one_does_not(tmp_path: Path):
    root = tmp_path / "events"
    write_table(root, [600] * 10, seed=4, row_group_size=100)  # 6,000 rows: six targets
    start = BASE
    opts = options(
        root,
        tmp_path / "m1",
        start,
        BASE + 10 * HOUR,
        targetRowsPerTrigger="1000",
        firstSliceRows="250",
    )
    rows = slice_rows(opts)
    assert sum(rows) == 6000
    assert 150 <= rows[0] <= 350, f"the first slice aims at 250 rows: {rows}"
    assert all(700 <= n <= 1300 for n in rows[1:-1]), f"the rest at 1000: {rows}"
    # 600 rows fit one target: read in one slice, not a small one and the rest
    short = options(
        root,
        tmp_path / "m2",
        start,
        BASE + HOUR,
        targetRowsPerTrigger="1000",
        firstSliceRows="250",
    )
    one = slice_rows(short)
    assert one == [600], one
    # a restart plans the same slices: the first slice is a property of the offsets
    assert [b for _, b in run_planner(opts)] == [b for _, b in run_planner(opts)]
    assert options(root, tmp_path / "m3", start, start + HOUR).first_slice_rows == 500_000


def test_replay_after_new_files_reads_the_planned_files_only(tmp_path: Path):
    root = tmp_path / "events"
    write_table(root, [100] * 6, seed=5, row_group_size=1000)
    start, end = BASE, BASE + 6 * HOUR
    opts = options(root, tmp_path / "manifests", start, end, targetRowsPerTrigger="250")
    batches = run_planner(opts)
    assert len(batches) >= 3
    before = [delivered(opts, a, b) for a, b in batches]
    # a restarted planner plans the same slices (boundaries are a function of the files)
    assert [b for _, b in run_planner(opts)] == [b for _, b in batches]
    # a late file lands in an hour already planned: a replay of the batch ignores it
    extra = pa.table(
        {
            "id": pa.array([10**6], pa.int64()),
            "ts": pa.array([BASE + 30 * 60 * US], pa.timestamp("us", tz="UTC")),
        }
    )
    pq.write_table(extra, root / "dt=2024-03-01" / "hr=00" / "part-late.parquet")
    after = [delivered(opts, a, b) for a, b in batches]
    assert after == before


def test_targets_are_validated_and_default_to_two_million_rows(tmp_path: Path):
    import pytest

    from kappaplus.connectors.lake.options import DEFAULT_TARGET_ROWS
    from kappaplus.core.errors import ConfigError

    opts = options(tmp_path, tmp_path / "m", BASE, BASE + HOUR)
    assert opts.target_rows_per_trigger == DEFAULT_TARGET_ROWS == 2_000_000
    assert opts.max_event_time_per_trigger is None, "no span cap unless asked for"
    by_bytes = options(tmp_path, tmp_path / "m", BASE, BASE + HOUR, targetBytesPerTrigger="64")
    assert by_bytes.target_rows_per_trigger is None and by_bytes.target_bytes_per_trigger == 64
    with pytest.raises(ConfigError, match="'targetRowsPerTrigger' = '0': must be positive"):
        options(tmp_path, tmp_path / "m", BASE, BASE + HOUR, targetRowsPerTrigger="0")


def test_the_last_data_slice_carries_the_first_end_of_input_marker(tmp_path: Path):
    root = tmp_path / "events"
    truth = write_table(root, [100] * 6, seed=9, row_group_size=1000)
    start, end = BASE, BASE + 6 * HOUR
    delay = 10 * 60 * US
    opts = options(
        root, tmp_path / "m", start, end, targetRowsPerTrigger="250", watermarkDelay="10 minutes"
    )
    batches = run_planner(opts)
    phases = [(b["phase"], b.get("markers", 0)) for _, b in batches]
    assert phases[-2:] == [("data", 1), ("end", 2)], phases
    assert all(m == 0 for p, m in phases[:-2]), "no marker before the last data slice"
    markers_seen = []
    rows = 0
    for first, last in batches:
        got = delivered(opts, first, last)
        markers_seen.append(sum(1 for i, t in got if i is None and t == end + delay))
        rows += sum(1 for i, _ in got if i is not None)
    assert markers_seen == [0] * (len(batches) - 2) + [1, 1]
    assert rows == truth.num_rows


def test_a_drain_file_stops_admission_and_a_restart_plans_the_rest(tmp_path: Path):
    """What a stopping run relies on (kappaplus.core.draining): once the drain file exists the
    source reports no new data; a later run (no drain file) plans exactly the remaining
    slices, so together they deliver every row once."""
    root = tmp_path / "events"
    truth = write_table(root, [100] * 6, seed=9, row_group_size=1000)
    start, end = BASE, BASE + 6 * HOUR
    drain = tmp_path / "drain"
    opts = options(
        root, tmp_path / "manifests", start, end, targetRowsPerTrigger="250", drainFile=str(drain)
    )
    reader = HiveStreamReader(opts)
    reader.prepareForTriggerAvailableNow()
    first = reader.initialOffset()
    second = reader.latestOffset(first, reader.getDefaultReadLimit())
    assert second != first
    drain.touch()
    assert reader.latestOffset(second, reader.getDefaultReadLimit()) == second
    drain.unlink()
    rest = [b for b in run_planner(opts) if b[0]["hi"] >= second["hi"]]
    got = delivered(opts, first, second)
    for a, b in rest:
        got.extend(delivered(opts, a, b))
    assert sorted(got) == sorted(
        zip(truth.column("id").to_pylist(), truth.column("ts").to_pylist(), strict=True)
    )


# -- slices paced to a target micro-batch duration ------------------------------------------


@given(
    target=st.floats(0.1, 600),
    start_rows=st.integers(1, 10**8),
    batches=st.lists(st.tuples(st.floats(1, 10**7), st.floats(0.001, 3600)), max_size=30),
)
def test_the_pacer_moves_by_bounded_steps_and_never_below_its_floor(target, start_rows, batches):
    pacer = BatchPacer(target_seconds=target, rows=start_rows)
    now = 0.0
    for key, (rows, elapsed) in enumerate(batches):
        before = pacer.rows
        pacer.planned(key, rows, now)
        now += elapsed
        pacer.committed(key, now)
        assert pacer.rows >= MIN_ROWS
        assert pacer.rows <= max(before * MAX_STEP, MIN_ROWS) + 1
        assert pacer.rows >= min(before / MAX_STEP, before) - 1 or pacer.rows == MIN_ROWS
        after = pacer.rows
        pacer.committed(key, now + 5)  # a second commit of the batch changes nothing
        pacer.committed("marker", now + 5)  # nor does a batch it did not plan
        assert pacer.rows == after


@given(fixed=st.floats(0.0, 1.0), rate=st.floats(100, 10**6), target=st.floats(2.0, 60.0))
def test_the_pacer_converges_on_the_target_duration(fixed, rate, target):
    """A sink that takes ``fixed + rows / rate`` seconds per batch: after a few batches the
    batches take about the target (when the fixed cost leaves room for rows at all)."""
    pacer = BatchPacer(target_seconds=target, rows=2_000_000)
    now, took = 0.0, 0.0
    pending = None
    for key in range(40):  # in Spark's order: plan batch n, then commit batch n - 1
        rows = pacer.rows
        pacer.planned(key, rows, now)
        if pending is not None:
            pacer.committed(pending, now)
        took = fixed + rows / rate
        now += took
        pending = key
    ideal = (target - fixed) * rate
    if ideal >= 2 * MIN_ROWS:
        assert 0.7 * target <= took <= 1.3 * target


def test_slices_follow_the_observed_batch_duration(tmp_path: Path, monkeypatch):
    """With ``targetBatchDuration`` the planner sizes each slice from how long the last
    committed batch took (a clock here: 1 s + 1 ms per row, target 3 s, so ~2000 rows;
    commits arrive in Spark's order, after the next slice is planned);
    the slices still cover the range exactly once and a replay reads the same rows."""
    from kappaplus.slicing import planner as planner_module

    hours = [800] * 60
    root = tmp_path / "events"
    truth = write_table(root, hours, seed=5, row_group_size=100)
    start, end = BASE, BASE + len(hours) * HOUR
    opts = options(
        root,
        tmp_path / "manifests",
        start,
        end,
        targetRowsPerTrigger="12000",
        targetBatchDuration="3 seconds",
    )
    clock = [0.0]
    monkeypatch.setattr(planner_module.time, "monotonic", lambda: clock[0])
    reader = HiveStreamReader(opts)
    reader.prepareForTriggerAvailableNow()
    offset = reader.initialOffset()
    got: list[tuple[int, int]] = []
    sizes: list[int] = []
    previous_hi = start
    ran: dict | None = None
    for _ in range(1000):
        following = reader.latestOffset(offset, reader.getDefaultReadLimit())
        if ran is not None:  # Spark commits the batch before only after planning this one
            reader.commit(ran)
        if following == offset:
            break
        lo, hi = following["lo"], following["hi"]
        assert hi >= lo >= previous_hi, "slices never overlap nor go back"
        rows = delivered(opts, offset, following)
        assert delivered(opts, offset, following) == rows, "a replay reads the same rows"
        got.extend(rows)
        if following.get("phase") == "data" and hi > lo:
            sizes.append(len(rows))
        clock[0] += 1.0 + len(rows) / 1000  # the batch runs, the sink writes
        previous_hi, offset, ran = hi, following, following
    ts = np.asarray(truth.column("ts").to_pylist(), dtype=np.int64)
    ids = np.asarray(truth.column("id").to_pylist(), dtype=np.int64)
    assert sorted(got) == sorted(zip(ids.tolist(), ts.tolist(), strict=True)), "no loss, no dup"
    assert sizes[0] > 8000, "the first slice is sized by the rows target"
    steady = sizes[4:-1]
    assert steady and all(1000 <= n <= 4000 for n in steady), sizes
