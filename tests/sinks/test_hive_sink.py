"""Exactly-once Hive sink: crash at each commit step, restart, exactly N rows, no torn reads."""

from __future__ import annotations

import json
import os
import re
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kappaplus.errors import ConfigError, TableError
from kappaplus.sinks.hive import HiveSinkOptions, HiveTableSink, table_location, write_stream

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
    """(id, dt, published batch dir) of every row a fresh reader of ``table`` sees."""
    from pyspark.sql import functions as F

    if not spark.catalog.tableExists(table):
        return []
    spark.catalog.refreshTable(table)
    rows = (
        spark.table(table)
        .select("id", F.col("dt").cast("string").alias("dt"), F.input_file_name().alias("f"))
        .collect()
    )
    return [(r.id, r.dt, re.search(r"/(kappa-[^/]+-\d{20})-\d{5}\.", r.f).group(1)) for r in rows]


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


ALL_STEPS = [
    (0, "written"),  # data staged, no manifest yet: re-staged from scratch
    (0, "staged"),  # manifest written: the staged files are kept as they are
    (0, "published:dt=2024-03-01"),  # one of two partitions published: rolled forward
    (1, "registered"),  # partitions registered, nothing published
    (1, "committed"),  # marker written, Spark never saw the batch end: the replay skips it
    (2, "published:dt=2024-03-02"),  # all files published, no marker yet
]
QUICK_STEPS = [ALL_STEPS[2], ALL_STEPS[4]]


def _crash_and_restart(spark, scratch: Path, table: str, crashes) -> None:  # type: ignore[no-untyped-def]
    """Crash a streaming query at each (batch, step), restart it from its checkpoint each
    time, and check what readers saw at every step and what the table holds at the end."""
    source, checkpoint = scratch / "in", scratch / "ckpt"
    _write_inputs(source)
    options = HiveSinkOptions(table=table, query_name="q1", event_time_column="event_time")
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
        _assert_consistent(_visible(spark, table))
    _run(spark, source, checkpoint, options, observe_and_crash_at(None, None))

    rows = _visible(spark, table)
    assert len(rows) == FILES * PER_FILE
    visible = _assert_consistent(rows)
    assert len(visible) == FILES and all(len(p) == 2 for p in visible.values())
    assert {r[0] for r in rows} == {i for f in _expected().values() for s in f.values() for i in s}
    assert HiveTableSink(options).committed_batches(spark) == list(range(FILES))

    # what a reader saw at each step of each batch: nothing before publishing (unless it
    # was a replay of a batch published before the crash), one more whole date per publish
    # step, the whole batch once committed
    both = {"2024-03-01", "2024-03-02"}
    for batch_id, step, seen in observations:
        mine = seen.get(f"kappa-q1-{batch_id:020d}", set())
        if step in ("written", "staged", "registered"):
            assert mine in (set(), {"2024-03-01"}, both)
        elif step == "committed":
            assert mine == both
        else:
            assert step.removeprefix("published:dt=") in mine
    first_attempt = {}
    for batch_id, step, seen in observations:
        first_attempt.setdefault((batch_id, step), seen)
    for (batch_id, step), seen in first_attempt.items():
        if step in ("written", "staged", "registered"):
            assert f"kappa-q1-{batch_id:020d}" not in seen, (batch_id, step)
    location = table_location(spark, table).removeprefix("file:")
    assert not list(Path(location, "_kappa_staging", "q1").glob("*/data"))


def test_streaming_crash_mid_commit_then_restart_exactly_once(spark, scratch: Path) -> None:  # type: ignore[no-untyped-def]
    _crash_and_restart(spark, scratch, "default.sink_crash_quick", QUICK_STEPS)


@pytest.mark.slow
def test_streaming_crash_at_every_step_then_restart_exactly_once(spark, scratch: Path) -> None:  # type: ignore[no-untyped-def]
    _crash_and_restart(spark, scratch, "default.sink_crash_all", ALL_STEPS)


def test_replay_with_a_different_file_split_adds_nothing(spark) -> None:  # type: ignore[no-untyped-def]
    table = "default.sink_replay_split"
    options = HiveSinkOptions(table=table, query_name="q2", event_time_column="event_time")
    rows = [(i, "x", DAY0 + timedelta(hours=i)) for i in range(48)]
    df = spark.createDataFrame(rows, SCHEMA)

    def crash(step: str, batch_id: int) -> None:
        if step == "published:dt=2024-03-02":
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
    assert partitions == {"dt=2024-03-01", "dt=2024-03-02", "dt=2024-03-03"}


def test_two_queries_write_one_table_independently(spark) -> None:  # type: ignore[no-untyped-def]
    table = "default.sink_two_queries"
    df = spark.createDataFrame([(i, "x", DAY0) for i in range(10)], SCHEMA)
    for name in ("stream", "backfill"):
        opts = HiveSinkOptions(table=table, query_name=name, event_time_column="event_time")
        assert HiveTableSink(opts).write_batch(df, 0) is True
    assert len(_visible(spark, table)) == 20


def test_explicit_partition_column_and_schema_checks(spark) -> None:  # type: ignore[no-untyped-def]
    table = "default.sink_schema"
    opts = HiveSinkOptions(
        table=table, query_name="q", partition_column="day", partition_expr="to_date(event_time)"
    )
    df = spark.createDataFrame([(1, "x", DAY0)], SCHEMA)
    HiveTableSink(opts).write_batch(df, 0)
    assert [c.name for c in spark.catalog.listColumns(table) if c.isPartition] == ["day"]
    wrong = spark.createDataFrame([(1, 2, DAY0)], "id long, city int, event_time timestamp")
    with pytest.raises(TableError, match="column 'city' is string in the table but int"):
        HiveTableSink(opts).write_batch(wrong, 1)
    extra = df.withColumn("fare", df.id * 2)
    with pytest.raises(TableError, match=r"unexpected: \['fare'\]"):
        HiveTableSink(opts).write_batch(extra, 1)
    no_rule = HiveSinkOptions(table=table, query_name="q")
    with pytest.raises(ConfigError, match="partition_column"):
        HiveTableSink(no_rule).write_batch(df, 1)
    with pytest.raises(ConfigError, match="table"):
        HiveSinkOptions(table="not a table", query_name="q")


def test_options_from_a_resolved_config() -> None:
    from kappaplus.config import parse_config, resolve

    cfg = parse_config(
        """
        [inputs.rides.hive]
        table = "raw.rides"
        event_time_column = "event_time"
        [outputs.counts.hive]
        table = "agg.counts"
        partition_column = "day"
        """
    )
    out = resolve(cfg, "backfill").outputs["counts"].hive
    assert out is not None
    opts = HiveSinkOptions.from_config(out, query_name="counts", event_time_column="start")
    assert (opts.table, opts.partition_column) == ("agg.counts_backfill", "day")
    assert opts.partition_expression() == "to_date(`start`)"
    with pytest.raises(ConfigError, match="files_per_partition"):
        HiveSinkOptions(table="a.b", query_name="q", files_per_partition=0)
