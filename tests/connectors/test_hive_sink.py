"""Exactly-once Hive sink: crash at each commit step, restart, exactly N rows, no torn reads."""

from __future__ import annotations

import json
import logging
import os
import random
import re
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from kappaplus.connectors.hive.commits import table_location
from kappaplus.connectors.hive.sink import HiveTableSink, write_stream
from kappaplus.connectors.hive.sink_options import HiveSinkOptions
from kappaplus.core.errors import ConfigError, DataError, TableError
from kappaplus.core.table import BATCH_COLUMN

SCHEMA = "id long, city string, event_time timestamp"
PER_FILE = 60
FILES = 3
DAY0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)


class Crash(RuntimeError):
    """The simulated crash."""


def _rows(file_no: int) -> list[dict[str, object]]:
    # each file spans two event dates, so every batch touches two partitions
    rows = []
    for i in range(PER_FILE):
        ident = file_no * 1000 + i
        when = DAY0 + timedelta(days=i % 2, minutes=file_no * 10 + i)
        rows.append({"id": ident, "city": f"c{i % 3}", "event_time": when.isoformat()})
    return rows


def _expected() -> dict[int, dict[str, set[int]]]:
    """file number -> partition value -> ids (the independently computed ground truth)."""
    truth: dict[int, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    for file_no in range(FILES):
        for row in _rows(file_no):
            day = datetime.fromisoformat(str(row["event_time"])).date().isoformat()
            truth[file_no][day].add(int(row["id"]))  # type: ignore[call-overload]
    return truth


def _write_inputs(directory: Path) -> None:
    directory.mkdir(parents=True)
    for file_no in range(FILES):
        path = directory / f"part-{file_no}.json"
        path.write_text("\n".join(json.dumps(row) for row in _rows(file_no)) + "\n")
        stamp = 1_700_000_000 + file_no * 10  # the file source orders files by mtime
        os.utime(path, (stamp, stamp))


def _visible(spark, table: str) -> list[tuple[int, str, str]]:  # type: ignore[no-untyped-def]
    """(id, dt, published batch dir) of every row a fresh reader of ``table`` sees.

    In batch visibility every batch (the query and batch id its file names carry) has one
    ``kappa_batch`` number, its files lie in partitions of that number, and no two
    batches share a number.
    """
    from pyspark.sql import functions as F

    if not spark.catalog.tableExists(table):
        return []
    spark.catalog.refreshTable(table)
    df = spark.table(table)
    batch = F.col(BATCH_COLUMN) if BATCH_COLUMN in df.columns else F.lit(None).cast("long")
    rows = df.select(
        "id",
        F.col("dt").cast("string").alias("dt"),
        F.input_file_name().alias("f"),
        batch.alias("b"),
    ).collect()
    seen = []
    number: dict[str, int] = {}
    for r in rows:
        found = re.search(r"/(kappa-[^/]+-(\d{20}))-\d{5}\.", r.f)
        assert found is not None, r.f
        if r.b is not None:
            assert number.setdefault(found.group(1), r.b) == r.b, (r.f, r.b)
            assert f"/{BATCH_COLUMN}={r.b}/" in r.f, r.f
        seen.append((r.id, r.dt, found.group(1)))
    assert len(set(number.values())) == len(number), f"batches share a number: {number}"
    return seen


def _assert_consistent(rows: list[tuple[int, str, str]]) -> dict[str, set[str]]:
    """Every (batch, partition) a reader sees holds all of that batch's rows for it.

    Returns batch dir -> partitions visible. Fails on duplicates or torn partitions.
    """
    truth = _expected()
    ids = [r[0] for r in rows]
    dupes = [i for i, n in Counter(ids).items() if n > 1]
    assert not dupes, f"duplicate ids visible: {dupes[:5]}"
    seen: dict[tuple[str, str], set[int]] = defaultdict(set)
    for ident, dt, batch_dir in rows:
        seen[(batch_dir, dt)].add(ident)
    visible: dict[str, set[str]] = defaultdict(set)
    for (batch_dir, dt), got in seen.items():
        files = {ident // 1000 for ident in got}
        assert len(files) == 1, f"{batch_dir} mixes input files {files}"
        assert got == truth[files.pop()][dt], f"{batch_dir} {dt}: torn partition"
        visible[batch_dir].add(dt)
    return visible


def _run(spark, source: Path, checkpoint: Path, options: HiveSinkOptions, hook=None):  # type: ignore[no-untyped-def]
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
    query = write_stream(
        stream,
        options,
        checkpoint_location=str(checkpoint),
        trigger={"availableNow": True},
        fault_hook=hook,
    )
    try:
        query.awaitTermination(300)
    finally:
        query.stop()
    return query


PARTITION_STEPS = [
    (0, "written"),  # data staged, no manifest yet: re-staged from scratch
    (0, "staged"),  # manifest written: the staged files are kept as they are
    (0, "published:dt=2024-03-01"),  # one of two partitions published: rolled forward
    (1, "registered"),  # partitions registered, nothing published
    (1, "committed"),  # marker written, Spark never saw the batch end: the replay skips it
    (2, "published:dt=2024-03-02"),  # all files published, no marker yet
]
BATCH_STEPS = [
    (0, "written"),
    (0, "staged"),
    (0, "published:dt=2024-03-01/kappa_batch=0"),  # some files moved, nothing registered
    (1, "published"),  # every file moved, nothing registered: invisible, rolled forward
    (1, "registered"),  # all partitions registered, no marker: the replay commits
    (2, "committed"),  # marker written: the replay skips the batch
]
STEPS = {"partition": PARTITION_STEPS, "batch": BATCH_STEPS}
QUICK_STEPS = {
    "partition": [PARTITION_STEPS[2], PARTITION_STEPS[4]],
    "batch": [BATCH_STEPS[3], BATCH_STEPS[4]],
}
BOTH_DAYS = {"2024-03-01", "2024-03-02"}


def _crash_and_restart(spark, scratch: Path, table: str, visibility: str, crashes) -> None:  # type: ignore[no-untyped-def]
    """Crash a streaming query at each (batch, step), restart it from its checkpoint each
    time, and check what readers saw at every step and what the table holds at the end."""
    source, checkpoint = scratch / "in", scratch / "ckpt"
    _write_inputs(source)
    options = HiveSinkOptions(
        table=table,
        query_name="q1",
        event_time_column="event_time",
        visibility=visibility,  # type: ignore[arg-type]
    )
    observations: list[tuple[int, str, dict[str, set[str]]]] = []

    def observe_and_crash_at(crash_batch: int | None, crash_step: str | None):  # type: ignore[no-untyped-def]
        def hook(step: str, batch_id: int) -> None:
            visible = _assert_consistent(_visible(spark, table))
            observations.append((batch_id, step, visible))
            if batch_id == crash_batch and step == crash_step:
                raise Crash(f"crash after {step} of batch {batch_id}")

        return hook

    for crash_batch, crash_step in crashes:
        with pytest.raises(Exception, match="crash after") as err:
            _run(spark, source, checkpoint, options, observe_and_crash_at(crash_batch, crash_step))
        assert crash_step in str(err.value)
        # a reader right after the crash: whole (batch, date) units only, no duplicates
        visible = _assert_consistent(_visible(spark, table))
        if visibility == "batch":
            # ... and whole batches: before registration none of the crashed batch
            registered = crash_step in ("registered", "committed")
            assert visible.get(f"kappa-q1-{crash_batch:020d}", set()) == (
                BOTH_DAYS if registered else set()
            )
    _run(spark, source, checkpoint, options, observe_and_crash_at(None, None))

    rows = _visible(spark, table)
    assert len(rows) == FILES * PER_FILE
    visible = _assert_consistent(rows)
    assert len(visible) == FILES and all(len(p) == 2 for p in visible.values())
    assert {r[0] for r in rows} == {i for f in _expected().values() for s in f.values() for i in s}
    assert HiveTableSink(options).committed_batches(spark) == list(range(FILES))
    partitions = {r[0] for r in spark.sql(f"SHOW PARTITIONS {table}").collect()}
    if visibility == "batch":
        assert partitions == {f"dt={d}/kappa_batch={b}" for d in BOTH_DAYS for b in range(FILES)}
    else:
        assert partitions == {f"dt={d}" for d in BOTH_DAYS}

    first_attempt = {}
    for batch_id, step, seen in observations:
        first_attempt.setdefault((batch_id, step), seen)
    if visibility == "batch":
        # a reader sees all of a batch or nothing, at every step; nothing before its
        # partitions are registered (unless a replay of a batch registered before a crash)
        for batch_id, step, seen in observations:
            mine = seen.get(f"kappa-q1-{batch_id:020d}", set())
            assert mine in (set(), BOTH_DAYS), (batch_id, step, mine)
            if step in ("registered", "committed"):
                assert mine == BOTH_DAYS, (batch_id, step)
        for (batch_id, step), seen in first_attempt.items():
            if step not in ("registered", "committed"):
                assert f"kappa-q1-{batch_id:020d}" not in seen, (batch_id, step)
    else:
        # nothing before publishing (unless it was a replay of a batch published before the
        # crash), one more whole date per publish step, the whole batch once committed
        for batch_id, step, seen in observations:
            mine = seen.get(f"kappa-q1-{batch_id:020d}", set())
            if step in ("written", "staged", "registered"):
                assert mine in (set(), {"2024-03-01"}, BOTH_DAYS)
            elif step == "committed":
                assert mine == BOTH_DAYS
            else:
                assert step.removeprefix("published:dt=") in mine
        for (batch_id, step), seen in first_attempt.items():
            if step in ("written", "staged", "registered"):
                assert f"kappa-q1-{batch_id:020d}" not in seen, (batch_id, step)
    location = table_location(spark, table).removeprefix("file:")
    assert not list(Path(location, "_kappa_staging", "q1").glob("*/data"))


@pytest.mark.parametrize("visibility", ["batch", "partition"])
def test_streaming_crash_mid_commit_then_restart_exactly_once(  # type: ignore[no-untyped-def]
    spark, scratch: Path, visibility: str
) -> None:
    table = f"default.sink_crash_quick_{visibility}"
    _crash_and_restart(spark, scratch, table, visibility, QUICK_STEPS[visibility])


@pytest.mark.slow
@pytest.mark.parametrize("visibility", ["batch", "partition"])
def test_streaming_crash_at_every_step_then_restart_exactly_once(  # type: ignore[no-untyped-def]
    spark, scratch: Path, visibility: str
) -> None:
    table = f"default.sink_crash_all_{visibility}"
    _crash_and_restart(spark, scratch, table, visibility, STEPS[visibility])


def _count(spark, table: str) -> int:  # type: ignore[no-untyped-def]
    spark.catalog.refreshTable(table)
    return int(spark.table(table).count())


def test_batch_mode_moved_but_unregistered_batch_is_invisible(spark) -> None:  # type: ignore[no-untyped-def]
    table = "default.sink_batch_invisible"
    options = HiveSinkOptions(table=table, query_name="qb", event_time_column="event_time")
    assert options.visibility == "batch"  # the default
    first = spark.createDataFrame([(i, "a", DAY0) for i in range(10)], SCHEMA)
    assert HiveTableSink(options).write_batch(first, 0) is True

    def three_days(base: int):  # type: ignore[no-untyped-def]
        rows = [(base + i, "m", DAY0 + timedelta(hours=i)) for i in range(48)]
        return spark.createDataFrame(rows, SCHEMA)

    def crash_after(wanted: str):  # type: ignore[no-untyped-def]
        def hook(step: str, batch_id: int) -> None:
            if step == wanted:
                raise Crash(step)

        return hook

    # stopped after every file was moved, before the partitions were registered
    with pytest.raises(Crash):
        HiveTableSink(options, fault_hook=crash_after("published")).write_batch(
            three_days(100).repartition(1), 1
        )
    assert _count(spark, table) == 10  # none of batch 1
    location = Path(table_location(spark, table).removeprefix("file:"))
    moved = sorted(p.parent.name for p in location.glob("dt=*/kappa_batch=1/*.parquet"))
    assert moved == ["kappa_batch=1"] * 3  # the files are there, in unlisted partitions
    listed = {r[0] for r in spark.sql(f"SHOW PARTITIONS {table}").collect()}
    assert not any(p.endswith("kappa_batch=1") for p in listed)
    assert spark.sql(f"SELECT * FROM {table} WHERE kappa_batch = 1").count() == 0
    # the replay (with another file split) registers what was moved: all rows, once
    assert HiveTableSink(options).write_batch(three_days(100).repartition(3), 1) is True
    assert _count(spark, table) == 58
    ids = [r.id for r in spark.table(table).select("id").collect()]
    assert sorted(ids) == sorted([*range(10), *range(100, 148)])

    # stopped after registration, before the commit marker: visible as a whole, replayed
    with pytest.raises(Crash):
        HiveTableSink(options, fault_hook=crash_after("registered")).write_batch(three_days(200), 2)
    assert _count(spark, table) == 106
    assert HiveTableSink(options).committed_batches(spark) == [0, 1]
    assert HiveTableSink(options).write_batch(three_days(200).repartition(2), 2) is True
    assert HiveTableSink(options).committed_batches(spark) == [0, 1, 2]
    rows = spark.table(table).select("id", BATCH_COLUMN).collect()
    assert len(rows) == 106 and len({r.id for r in rows}) == 106
    assert {r.id: r[BATCH_COLUMN] for r in rows if r.id >= 200} == {i: 2 for i in range(200, 248)}
    partitions = {r[0] for r in spark.sql(f"SHOW PARTITIONS {table}").collect()}
    assert partitions == {
        "dt=2024-03-01/kappa_batch=0",
        *(f"dt=2024-03-0{d}/kappa_batch={b}" for d in (1, 2, 3) for b in (1, 2)),
    }
    assert not list(location.glob("_kappa_staging/qb/*"))


@pytest.mark.parametrize("visibility", ["batch", "partition"])
def test_replay_with_a_different_file_split_adds_nothing(spark, visibility: str) -> None:  # type: ignore[no-untyped-def]
    table = f"default.sink_replay_split_{visibility}"
    options = HiveSinkOptions(
        table=table,
        query_name="q2",
        event_time_column="event_time",
        visibility=visibility,  # type: ignore[arg-type]
    )
    rows = [(i, "x", DAY0 + timedelta(hours=i)) for i in range(48)]
    df = spark.createDataFrame(rows, SCHEMA)
    suffix = "/kappa_batch=0" if visibility == "batch" else ""

    def crash(step: str, batch_id: int) -> None:
        if step == f"published:dt=2024-03-02{suffix}":
            raise Crash(step)

    with pytest.raises(Crash):
        HiveTableSink(options, fault_hook=crash).write_batch(df.repartition(1), 0)
    # the replayed batch has the same rows in a different number of files
    assert HiveTableSink(options).write_batch(df.repartition(3), 0) is True
    assert HiveTableSink(options).write_batch(df.repartition(2), 0) is False  # committed
    got = [r[0] for r in _visible(spark, table)]
    assert sorted(got) == list(range(48))
    days = Counter(r[1] for r in _visible(spark, table))
    assert days == {"2024-03-01": 12, "2024-03-02": 24, "2024-03-03": 12}
    partitions = {r[0] for r in spark.sql(f"SHOW PARTITIONS {table}").collect()}
    assert partitions == {f"dt=2024-03-0{d}{suffix}" for d in (1, 2, 3)}


def test_two_queries_write_one_table_independently(spark, caplog) -> None:  # type: ignore[no-untyped-def]
    table = "default.sink_two_queries"
    df = spark.createDataFrame([(i, "x", DAY0) for i in range(10)], SCHEMA)
    with caplog.at_level(logging.WARNING, logger="kappaplus.connectors.hive.sink"):
        for name in ("stream", "backfill"):
            opts = HiveSinkOptions(table=table, query_name=name, event_time_column="event_time")
            assert HiveTableSink(opts).write_batch(df, 0) is True
    assert len(_visible(spark, table)) == 20
    # both wrote batch 0 of the same date, each into a partition of its own: two numbers
    partitions = sorted(r[0] for r in spark.sql(f"SHOW PARTITIONS {table}").collect())
    assert partitions == ["dt=2024-03-01/kappa_batch=0", "dt=2024-03-01/kappa_batch=1"]
    assert not [r for r in caplog.records if "already registered" in r.getMessage()]
    # a third query on the same table continues the sequence; its replay keeps its number
    opts = HiveSinkOptions(table=table, query_name="later", event_time_column="event_time")

    def crash(step: str, batch_id: int) -> None:
        if step == "published":
            raise Crash(step)

    with pytest.raises(Crash):
        HiveTableSink(opts, fault_hook=crash).write_batch(df, 0)
    assert HiveTableSink(opts).write_batch(df, 0) is True
    assert len(_visible(spark, table)) == 30
    numbers = {r[0] for r in spark.table(table).select(BATCH_COLUMN).distinct().collect()}
    assert numbers == {0, 1, 2}


def test_a_partition_registered_by_something_else_is_named(spark, caplog) -> None:  # type: ignore[no-untyped-def]
    """The sink asks the metastore about the batch's number while Spark writes the rows:
    what it then reports must be about the number it reserved, also when another writer
    took the number it expected (here: slot 1 taken behind the ``_next`` hint's back)."""
    table = "default.sink_shared_slot"
    opts = HiveSinkOptions(table=table, query_name="q", event_time_column="event_time")
    df = spark.createDataFrame([(i, "x", DAY0) for i in range(10)], SCHEMA)
    assert HiveTableSink(opts).write_batch(df, 0) is True  # kappa_batch 0; _next says 1
    location = Path(table_location(spark, table).removeprefix("file:"))
    (location / "_kappa_batch_slots" / "1").write_text("")  # another writer holds 1
    stray = location / "dt=2024-03-01" / "kappa_batch=2"
    stray.mkdir(parents=True)
    spark.sql(
        f"ALTER TABLE {table} ADD PARTITION (dt = '2024-03-01', kappa_batch = 2) "
        f"LOCATION 'file:{stray}'"
    )
    with caplog.at_level(logging.WARNING, logger="kappaplus.connectors.hive.sink"):
        assert HiveTableSink(opts).write_batch(df, 1) is True
    warned = [r.getMessage() for r in caplog.records if "already registered" in r.getMessage()]
    assert len(warned) == 1 and "dt=2024-03-01/kappa_batch=2" in warned[0], warned
    visible = sorted(r[0] for r in _visible(spark, table))
    assert visible == sorted([*range(10), *range(10)]), visible
    # a number nobody else used: no warning
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kappaplus.connectors.hive.sink"):
        assert HiveTableSink(opts).write_batch(df, 2) is True
    assert not [r for r in caplog.records if "already registered" in r.getMessage()]
    assert spark.table(table).where(f"{BATCH_COLUMN} = 3").count() == 10


def test_explicit_partition_column_and_schema_checks(spark) -> None:  # type: ignore[no-untyped-def]
    table = "default.sink_schema"
    opts = HiveSinkOptions(
        table=table, query_name="q", partition_column="day", partition_expr="to_date(event_time)"
    )
    df = spark.createDataFrame([(1, "x", DAY0)], SCHEMA)
    HiveTableSink(opts).write_batch(df, 0)
    parts = [c.name for c in spark.catalog.listColumns(table) if c.isPartition]
    assert parts == ["day", BATCH_COLUMN]
    wrong = spark.createDataFrame([(1, 2, DAY0)], "id long, city int, event_time timestamp")
    with pytest.raises(TableError, match="column 'city' is string in the table but int"):
        HiveTableSink(opts).write_batch(wrong, 1)
    extra = df.withColumn("fare", df.id * 2)
    with pytest.raises(TableError, match=r"unexpected: \['fare'\]"):
        HiveTableSink(opts).write_batch(extra, 1)
    reserved = df.withColumn(BATCH_COLUMN, df.id)
    with pytest.raises(TableError, match="reserves for the batch id"):
        HiveTableSink(opts).write_batch(reserved, 1)
    # the partition columns must be what the sink writes
    as_partition = HiveSinkOptions(
        table=table,
        query_name="q",
        partition_column="day",
        partition_expr="to_date(event_time)",
        visibility="partition",
    )
    with pytest.raises(TableError, match=r"table default.sink_schema is partitioned by"):
        HiveTableSink(as_partition).write_batch(df, 1)
    hourly = HiveSinkOptions(
        table=table,
        query_name="q",
        partition_column="day",
        partition_expr="to_date(event_time)",
        extra_partitions=(("hr", "hour(event_time)"),),
    )
    with pytest.raises(
        TableError, match=r"\['day', 'kappa_batch'\].*\['day', 'hr', 'kappa_batch'\]"
    ):
        HiveTableSink(hourly).write_batch(df, 1)
    by_date = HiveSinkOptions(
        table="default.sink_schema_dates",
        query_name="q",
        event_time_column="event_time",
        visibility="partition",
    )
    HiveTableSink(by_date).write_batch(df, 0)
    batched = HiveSinkOptions(
        table="default.sink_schema_dates", query_name="q", event_time_column="event_time"
    )
    with pytest.raises(TableError, match="without the 'kappa_batch' partition column takes"):
        HiveTableSink(batched).write_batch(df, 1)
    no_rule = HiveSinkOptions(table=table, query_name="q")
    with pytest.raises(ConfigError, match="partition_column"):
        HiveTableSink(no_rule).write_batch(df, 1)
    with pytest.raises(ConfigError, match="table"):
        HiveSinkOptions(table="not a table", query_name="q")


def test_option_validation() -> None:
    with pytest.raises(ConfigError, match="option 'visibility' = 'atomic'"):
        HiveSinkOptions(table="a.b", query_name="q", visibility="atomic")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="option 'files_per_partition'"):
        HiveSinkOptions(table="a.b", query_name="q", files_per_partition=0)
    with pytest.raises(ConfigError, match="option 'extra_partitions' = 'h r': not an identifier"):
        HiveSinkOptions(table="a.b", query_name="q", extra_partitions=(("h r", "hour(t)"),))
    with pytest.raises(ConfigError, match="option 'extra_partitions' = 'dt'"):
        HiveSinkOptions(table="a.b", query_name="q", extra_partitions=(("dt", "hour(t)"),))
    with pytest.raises(ConfigError, match="option 'extra_partitions' = 'kappa_batch'"):
        HiveSinkOptions(table="a.b", query_name="q", extra_partitions=(("kappa_batch", "1"),))
    with pytest.raises(ConfigError, match="option 'extra_partitions'"):
        HiveSinkOptions(table="a.b", query_name="q", extra_partitions=(("hr",),))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="empty SQL expression"):
        HiveSinkOptions(table="a.b", query_name="q", extra_partitions=(("hr", " "),))
    with pytest.raises(ConfigError, match="option 'partition_column' = 'kappa_batch'"):
        HiveSinkOptions(table="a.b", query_name="q", partition_column="kappa_batch")
    listed = HiveSinkOptions(table="a.b", query_name="q", extra_partitions=[["hr", "hour(t)"]])  # type: ignore[arg-type]
    assert listed.extra_partitions == (("hr", "hour(t)"),)
    assert listed.table_partition_columns == ["dt", "hr", BATCH_COLUMN]


def test_options_from_a_resolved_config() -> None:
    from kappaplus.config import parse_config, resolve

    base = """
        [inputs.rides.hive]
        table = "raw.rides"
        event_time_column = "event_time"
        [outputs.counts.hive]
        table = "agg.counts"
        partition_column = "day"
        """
    cfg = parse_config(base)
    out = resolve(cfg, "backfill").outputs["counts"].hive
    assert out is not None
    opts = HiveSinkOptions.from_config(out, query_name="counts", event_time_column="start")
    assert (opts.table, opts.partition_column) == ("agg.counts_backfill", "day")
    assert opts.partition_expression() == "to_date(`start`)"
    assert (opts.visibility, opts.extra_partitions) == ("batch", ())
    assert opts.table_partition_columns == ["day", BATCH_COLUMN]

    hourly = parse_config(base + 'hour_partition = "hr"\nvisibility = "partition"\n')
    out = resolve(hourly, "backfill").outputs["counts"].hive
    assert out is not None
    opts = HiveSinkOptions.from_config(out, query_name="counts", event_time_column="start")
    assert opts.visibility == "partition"
    assert opts.extra_partitions == (("hr", "hour(`start`)"),)
    assert opts.table_partition_columns == ["day", "hr"]
    with pytest.raises(ConfigError, match="option 'hour_partition' = 'hr'.*no event-time column"):
        HiveSinkOptions.from_config(out, query_name="counts")

    bad = {
        'visibility = "atomic"': "outputs.counts.hive.visibility",
        'hour_partition = "day"': "outputs.counts.hive.hour_partition",
        'hour_partition = "kappa_batch"': "outputs.counts.hive.hour_partition",
        'hour_partition = "h-r"': "outputs.counts.hive.hour_partition",
    }
    for line, key in bad.items():
        with pytest.raises(ConfigError, match=f"option '{re.escape(key)}'"):
            parse_config(base + line + "\n")


def _hour_rows(base: int, n: int, step_minutes: int) -> list[tuple[int, str, datetime]]:
    return [(base + i, f"c{i % 3}", DAY0 + timedelta(minutes=step_minutes * i)) for i in range(n)]


@pytest.mark.parametrize("visibility", ["batch", "partition"])
def test_extra_hour_partition_directories_and_values(spark, visibility: str) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    table = f"default.sink_hours_{visibility}"
    opts = HiveSinkOptions(
        table=table,
        query_name="qh",
        event_time_column="event_time",
        visibility=visibility,  # type: ignore[arg-type]
        extra_partitions=(("hr", "hour(`event_time`)"),),
    )
    batches = {0: _hour_rows(0, 60, 37), 1: _hour_rows(1000, 30, 53)}  # 37 h and 26 h
    # fewer partitions per metastore call than a batch has: still ONE ADD statement/call
    spark.conf.set("spark.sql.addPartitionInBatch.size", "4")
    try:
        for batch_id, rows in batches.items():
            df = spark.createDataFrame(rows, SCHEMA)
            assert HiveTableSink(opts).write_batch(df, batch_id) is True
        assert spark.conf.get("spark.sql.addPartitionInBatch.size") == "4"
    finally:
        spark.conf.unset("spark.sql.addPartitionInBatch.size")

    expected_parts = set()
    expected_rows = set()
    for batch_id, rows in batches.items():
        for ident, city, when in rows:
            day, hour = when.date().isoformat(), when.hour
            part = f"dt={day}/hr={hour}"
            if visibility == "batch":
                part += f"/kappa_batch={batch_id}"
            expected_parts.add(part)
            expected_rows.add((ident, city, when, day, hour, batch_id))
    assert len({p.rsplit("/kappa_batch", 1)[0] for p in expected_parts}) > 24  # two dates

    parts = [c.name for c in spark.catalog.listColumns(table) if c.isPartition]
    assert parts == (["dt", "hr", BATCH_COLUMN] if visibility == "batch" else ["dt", "hr"])
    listed = {r[0] for r in spark.sql(f"SHOW PARTITIONS {table}").collect()}
    assert listed == expected_parts
    location = Path(table_location(spark, table).removeprefix("file:"))
    on_disk = {
        str(p.parent.relative_to(location))
        for p in location.rglob("*.parquet")
        if not str(p.relative_to(location)).startswith("_")
    }
    assert on_disk == expected_parts

    spark.catalog.refreshTable(table)
    df = spark.table(table)
    batch = F.col(BATCH_COLUMN) if visibility == "batch" else F.lit(None)
    name = F.regexp_extract(F.input_file_name(), r"kappa-qh-(\d{20})-", 1).cast("long")
    seconds = F.col("event_time").cast("long")
    got = df.select("id", "city", seconds, F.col("dt").cast("string"), "hr", batch, name)
    got_rows = [tuple(r) for r in got.collect()]
    assert len(got_rows) == 90
    assert {r[:5] + (r[6],) for r in got_rows} == {
        (i, c, int(w.timestamp()), d, h, b) for i, c, w, d, h, b in expected_rows
    }
    if visibility == "batch":
        assert all(r[5] == r[6] for r in got_rows)
    assert dict(df.dtypes)["hr"] == "int"


def test_null_partition_values_name_the_column(spark) -> None:  # type: ignore[no-untyped-def]
    table = "default.sink_null_parts"
    opts = HiveSinkOptions(
        table=table,
        query_name="qn",
        event_time_column="event_time",
        extra_partitions=(("hr", "hour(`event_time`)"),),
    )
    no_time = spark.createDataFrame([(1, "x", DAY0), (2, "y", None)], SCHEMA)
    with pytest.raises(DataError, match="NULL partition column 'dt' \\(from to_date"):
        HiveTableSink(opts).write_batch(no_time, 0)
    # rows that carry the hour themselves: used as they are, a NULL one is named
    carried = spark.createDataFrame([(1, "x", DAY0, 12), (2, "y", DAY0, None)], f"{SCHEMA}, hr int")
    with pytest.raises(DataError, match="NULL partition column 'hr'"):
        HiveTableSink(opts).write_batch(carried, 0)
    good = spark.createDataFrame([(1, "x", DAY0, 7)], f"{SCHEMA}, hr int")
    assert HiveTableSink(opts).write_batch(good, 0) is True
    spark.catalog.refreshTable(table)
    assert [tuple(r) for r in spark.table(table).select("id", "hr").collect()] == [(1, 7)]


@pytest.mark.parametrize("hourly", [False, True], ids=["dt", "dt-hr"])
def test_hive_source_reads_what_the_sink_wrote(spark, scratch: Path, hourly: bool) -> None:  # type: ignore[no-untyped-def]
    """~2 days of events written in batches that each span both dates, read back by the
    ``kappa_hive`` streaming source in 6-hour slices: the same rows, once each."""
    from pyspark.sql import functions as F

    from kappaplus.connectors.hive import read_hive_stream

    table = f"default.sink_to_source_{'hr' if hourly else 'dt'}"
    opts = HiveSinkOptions(
        table=table,
        query_name="qs",
        event_time_column="event_time",
        extra_partitions=(("hr", "hour(`event_time`)"),) if hourly else (),
    )
    rng = random.Random(11)
    midnight = datetime(2024, 3, 1, tzinfo=UTC)
    written: dict[int, tuple[int, datetime]] = {}
    for batch_id in range(4):
        rows = []
        for i in range(60):
            ident = batch_id * 1000 + i
            when = midnight + timedelta(seconds=rng.randrange(2 * 86400))
            rows.append((ident, f"c{i % 5}", when))
            written[ident] = (batch_id, when)
        assert len({w.date() for _, _, w in rows}) == 2
        HiveTableSink(opts).write_batch(spark.createDataFrame(rows, SCHEMA), batch_id)

    stream = read_hive_stream(
        spark, table, event_time_column="event_time", max_event_time_per_trigger="6 hours"
    )
    assert BATCH_COLUMN in stream.columns and (("hr" in stream.columns) == hourly)
    hour = F.col("hr") if hourly else F.lit(None).cast("int")
    delivered = _drain(
        stream,
        scratch / "ckpt",
        lambda b: b.select("id", F.col("event_time").cast("long"), F.col(BATCH_COLUMN), hour),
    )
    seen = [(r[0], r[1], r[2], r[3]) for _, r in delivered]
    slices = {batch_id for batch_id, _ in delivered}

    ids = [r[0] for r in seen]
    assert not [i for i, n in Counter(ids).items() if n > 1], "duplicates"
    assert sorted(ids) == sorted(written)
    for ident, seconds, batch_id, hr in seen:
        assert (batch_id, seconds) == (written[ident][0], int(written[ident][1].timestamp()))
        if hourly:
            assert hr == written[ident][1].hour
    assert len(slices) >= 7  # two days in 6-hour slices: the dt layout drove the slicing


def _drain(stream, checkpoint: Path, select) -> list[tuple[int, Any]]:  # type: ignore[no-untyped-def]
    """Run ``stream`` with Trigger.AvailableNow; (micro-batch id, row of ``select(batch)``)
    for every row it delivered."""
    seen: list[tuple[int, Any]] = []

    def collect(batch, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        seen.extend((batch_id, row) for row in select(batch).collect())

    query = (
        stream.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    query.stop()
    return seen


def _source_ids(spark, table: str, checkpoint: Path) -> list[int]:  # type: ignore[no-untyped-def]
    """Ids of every row the ``kappa_hive`` streaming source delivers from ``table`` now."""
    from kappaplus.connectors.hive import read_hive_stream

    stream = read_hive_stream(
        spark,
        table,
        event_time_column="event_time",
        max_event_time_per_trigger="1 day",
        manifestDir=str(checkpoint / "manifests"),
    )
    return [row.id for _, row in _drain(stream, checkpoint / "ckpt", lambda b: b.select("id"))]


@pytest.mark.parametrize("visibility", ["batch", "partition"])
def test_hive_source_sees_committed_batches_only(spark, scratch: Path, visibility: str) -> None:  # type: ignore[no-untyped-def]
    """The ``kappa_hive`` source lists files rather than asking the metastore; a batch
    crashed half published (one of its three dates moved) shows none of its rows there,
    and all of them once the replay commits it."""
    table = f"default.sink_source_commits_{visibility}"
    options = HiveSinkOptions(
        table=table, query_name="qc", event_time_column="event_time", visibility=visibility
    )
    first = spark.createDataFrame([(i, "a", DAY0) for i in range(10)], SCHEMA)
    assert HiveTableSink(options).write_batch(first, 0) is True

    def three_days():  # type: ignore[no-untyped-def]
        rows = [(100 + i, "m", DAY0 + timedelta(hours=i)) for i in range(48)]
        return spark.createDataFrame(rows, SCHEMA).repartition(1)

    def hook(step: str, batch_id: int) -> None:
        if step.startswith("published:"):
            raise Crash(step)

    with pytest.raises(Crash):
        HiveTableSink(options, fault_hook=hook).write_batch(three_days(), 1)
    location = Path(table_location(spark, table).removeprefix("file:"))
    assert len(list(location.glob("dt=*/**/kappa-qc-*00001-*.parquet"))) == 1, "one date moved"
    assert sorted(_source_ids(spark, table, scratch / "before")) == list(range(10))

    assert HiveTableSink(options).write_batch(three_days(), 1) is True
    ids = _source_ids(spark, table, scratch / "after")
    assert sorted(ids) == [*range(10), *range(100, 148)], "every row once"


def test_prepare_creates_the_table_a_streaming_query_then_writes(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``prepare`` on the query's streaming DataFrame creates the same table the first batch
    would (``kappa run`` calls it beside the query's first batch); the batches then write
    into it, and a table the rows do not fit fails ``prepare`` as it would fail a batch."""
    table = "default.sink_prepared"
    inputs = tmp_path / "in"
    _write_inputs(inputs)
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(inputs))
    sink = HiveTableSink(
        HiveSinkOptions(table=table, query_name="q", event_time_column="event_time")
    )
    assert not spark.catalog.tableExists(table)
    sink.prepare(stream)
    assert spark.catalog.tableExists(table)
    created = [(c.name, c.dataType, c.isPartition) for c in spark.catalog.listColumns(table)]
    assert sink._checked is not None
    query = (
        stream.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert [
        (c.name, c.dataType, c.isPartition) for c in spark.catalog.listColumns(table)
    ] == created
    ids = sorted(row[0] for row in _visible(spark, table))
    truth = sorted(i for per_file in _expected().values() for day in per_file.values() for i in day)
    assert ids == truth
    wrong = spark.readStream.schema("id long, city int, event_time timestamp").json(str(inputs))
    with pytest.raises(TableError, match="column 'city' is string in the table but int"):
        HiveTableSink(
            HiveSinkOptions(table=table, query_name="q2", event_time_column="event_time")
        ).prepare(wrong)
