"""Schema unification in a backfill: a lake written by another pipeline (flattened, renamed,
event time in epoch milliseconds, a column added half-way with a narrower type) read through
the binding's ``columns`` and ``event_time = { column, unit }``, equal to a pandas ground
truth; a narrowing type is refused before any query starts, naming binding, column, types.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from runtime_helpers import uid
from typer.testing import CliRunner

from kappaplus.config import config_from_dict
from kappaplus.core.errors import ConfigError
from kappaplus.jobs import InputSpec, Job, OutputSpec, Params
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job

START = datetime(2013, 1, 1, tzinfo=UTC)
HOURS = 8


def per_window(inputs: Mapping[str, DataFrame], params: Params) -> dict[str, DataFrame]:
    rides = inputs["rides"]
    grouped = rides.groupBy(F.window("ride_time", "30 minutes"), "city").agg(
        F.count("*").alias("rides"), F.sum("tip").alias("tips"), F.max("ride_id").alias("last")
    )
    return {
        "counts": grouped.select(
            F.col("window.start").alias("start"), "city", "rides", "tips", "last"
        )
    }


SCHEMA = "ride_id string, city string, tip double, ride_time timestamp"
JOB = Job(
    name="mapped-ride-counts",
    inputs=[InputSpec("rides", SCHEMA, "ride_time")],
    outputs=[OutputSpec("counts", output_mode="append", event_time_column="start")],
    transform=per_window,
    watermark_delay="10 minutes",
)


def lake_rows(seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = 2400
    ts_ms = START.timestamp() * 1000 + np.sort(rng.integers(0, HOURS * 3600 * 1000, n))
    return pd.DataFrame(
        {
            "ride_no": np.arange(n, dtype=np.int64) + 10_000,
            "city_name": rng.choice(["sf", "nyc", "la"], n),
            "ts_ms": ts_ms.astype(np.int64),
            "tip": rng.integers(0, 40, n).astype(np.float32) / 4,
        }
    )


def write_lake(
    spark: SparkSession, root: Path, table: str, rows: pd.DataFrame, text: bool = False
) -> None:
    """Hourly partitions; the first half has no ``tip`` column (added half-way, as float).
    ``text``: the event time stored as ``ts_text`` ('2013-01-01 05:17:00'), not ``ts_ms``."""
    hour = pd.to_datetime(rows["ts_ms"], unit="ms", utc=True).dt.floor("h")
    stamp = "ts_text" if text else "ts_ms"
    for i, (moment, part) in enumerate(rows.groupby(hour)):
        folder = root / f"dt={moment:%Y-%m-%d}" / f"hr={moment:%H}"
        folder.mkdir(parents=True)
        if text:
            at = pd.to_datetime(part["ts_ms"], unit="ms", utc=True)
            part = part.assign(ts_text=at.dt.strftime("%Y-%m-%d %H:%M:%S"))
        columns = ["ride_no", "city_name", stamp] + (["tip"] if i >= HOURS // 2 else [])
        pq.write_table(
            pa.Table.from_pandas(part[columns], preserve_index=False), folder / "part-0.parquet"
        )
    kind = "string" if text else "bigint"
    spark.sql(
        f"CREATE TABLE {table} (ride_no bigint, city_name string, {stamp} {kind}, tip double, "
        f"dt string, hr string) USING parquet PARTITIONED BY (dt, hr) LOCATION '{root}'"
    )
    spark.sql(f"MSCK REPAIR TABLE {table}")


def truth(
    rows: pd.DataFrame, tips_from_hour: int = HOURS // 2
) -> dict[tuple[int, str], tuple[int, float | None, str]]:
    """Per 30-minute window and city: rides, tips (null before the column existed), last id."""
    frame = rows.copy()
    hour_index = (frame["ts_ms"] // 3_600_000) - int(START.timestamp()) // 3600
    frame.loc[hour_index < tips_from_hour, "tip"] = np.nan
    frame["start"] = (frame["ts_ms"] // 1000) // 1800 * 1800
    frame["ride_id"] = frame["ride_no"].astype(str)
    out = {}
    for (start, city), group in frame.groupby(["start", "city_name"]):
        tips = group["tip"].astype(float)
        out[(int(start), str(city))] = (
            len(group),
            None if tips.isna().all() else round(float(tips.sum()), 6),
            max(group["ride_id"]),
        )
    return out


def config(table: str, out: str, scratch: Path, **hive: Any) -> Any:
    binding = {
        "table": table,
        "partition_format": "dt=%Y-%m-%d/hr=%H",
        "event_time": {"column": "ts_ms", "unit": "ms"},
        "columns": {"ride_id": "cast(ride_no as string)", "city": "city_name"},
        **hive,
    }
    return config_from_dict(
        {
            "checkpoint_dir": str(scratch / "checkpoints"),
            "inputs": {"rides": {"hive": binding}},
            "outputs": {"counts": {"hive": {"table": out}}},
        }
    )


def test_backfill_reads_a_renamed_epoch_millis_lake_with_a_column_added_half_way(
    spark: SparkSession, scratch: Path
) -> None:
    rows = lake_rows()
    table, out = f"rides_raw_{uid()}", f"mapped_counts_{uid()}"
    write_lake(spark, scratch / "lake", table, rows)
    end = START + timedelta(hours=HOURS)
    result = run_job(
        spark,
        JOB,
        config(table, out, scratch),
        RunOptions("backfill", START.isoformat(), end.isoformat()),
    )
    assert result.status == "finished"
    got = (
        spark.table(f"{out}_backfill")
        .select(F.unix_seconds("start"), "city", "rides", "tips", "last")
        .collect()
    )
    produced = {(r[0], r[1]): (r[2], None if r[3] is None else round(r[3], 6), r[4]) for r in got}
    assert len(got) == len(produced)  # each window once
    assert produced == truth(rows)


def test_a_narrowing_type_is_refused_before_the_queries_start(
    spark: SparkSession, scratch: Path
) -> None:
    rows = lake_rows()
    table, out = f"rides_narrow_{uid()}", f"narrow_counts_{uid()}"
    write_lake(spark, scratch / "lake", table, rows)
    narrow = Job(
        name="narrow-ride-counts",
        inputs=[
            InputSpec(
                "rides", "ride_id int, city string, tip double, ride_time timestamp", "ride_time"
            )
        ],
        outputs=JOB.outputs,
        transform=per_window,
        watermark_delay="10 minutes",
    )
    cfg = config(table, out, scratch, columns={"ride_id": "ride_no", "city": "city_name"})
    end = (START + timedelta(hours=1)).isoformat()
    with pytest.raises(ConfigError) as refused:
        run_job(spark, narrow, cfg, RunOptions("backfill", START.isoformat(), end))
    text = str(refused.value)
    assert "inputs.rides.hive" in text and "'ride_id'" in text, text
    assert "bigint" in text and "declares int" in text, text
    assert not spark.catalog.tableExists(f"{out}_backfill")


def test_job_columns_the_lake_lacks_are_all_named_with_the_mapping_that_makes_them_null(
    spark: SparkSession, scratch: Path
) -> None:
    """Issue 47 item 10: a mapped binding whose job columns the lake lacks failed naming the
    first one; the error names them all and the ``cast(null as <type>)`` mapping, which,
    given as written, is accepted."""
    from kappaplus.runtime.binding.unify import describe_bindings

    rows = lake_rows()
    table, out = f"rides_lacking_{uid()}", f"lacking_counts_{uid()}"
    write_lake(spark, scratch / "lake", table, rows)
    wider = Job(
        name="wider-ride-counts",
        inputs=[InputSpec("rides", SCHEMA + ", driver string, fare decimal(8,2)", "ride_time")],
        outputs=JOB.outputs,
        transform=per_window,
        watermark_delay="10 minutes",
    )
    end = (START + timedelta(hours=1)).isoformat()
    with pytest.raises(ConfigError) as refused:
        run_job(
            spark,
            wider,
            config(table, out, scratch),
            RunOptions("backfill", START.isoformat(), end),
        )
    text = str(refused.value)
    assert "inputs.rides.hive" in text and "driver, fare" in text, text
    shown = text[text.index("columns = {") :]
    assert 'driver = "cast(null as string)"' in shown, text
    assert 'fare = "cast(null as decimal(8,2))"' in shown, text
    assert not spark.catalog.tableExists(f"{out}_backfill")
    nulls = {"driver": "cast(null as string)", "fare": "cast(null as decimal(8,2))"}
    mapped = {"ride_id": "cast(ride_no as string)", "city": "city_name", **nulls}
    (resolved,) = describe_bindings(spark, wider, config(table, out, scratch, columns=mapped))
    assert not resolved.mismatches and resolved.reads == ["ride_no", "city_name", "tip", "ts_ms"]


def test_check_shows_where_each_column_comes_from_and_run_refuses_a_narrowed_file(
    spark: SparkSession, scratch: Path
) -> None:
    from kappaplus.runtime.binding.unify import describe_bindings

    rows = lake_rows()
    table, out = f"rides_evolved_{uid()}", f"evolved_counts_{uid()}"
    write_lake(spark, scratch / "lake", table, rows)
    cfg = config(table, out, scratch)
    (shown,) = describe_bindings(spark, JOB, cfg)
    lines = [c.line() for c in shown.columns]
    assert "ride_id string <- cast(ride_no as string) (string)" in lines, lines
    assert "city string <- city_name (string)" in lines, lines
    assert "ride_time timestamp <- `ts_ms` (timestamp)" in lines, lines
    assert "tip double <- `tip` (double)" in lines, lines
    assert shown.reads == ["ride_no", "city_name", "tip", "ts_ms"] and not shown.mismatches

    # one later file stores ride_no as a string: named with its column and both types
    bad = next((scratch / "lake").glob("dt=*/hr=07/part-0.parquet"))
    stored = pq.read_table(bad)
    pq.write_table(stored.set_column(0, "ride_no", stored.column(0).cast(pa.string())), bad)
    spark.sql(f"REFRESH TABLE {table}")
    (shown,) = describe_bindings(spark, JOB, cfg)
    assert len(shown.mismatches) == 1, shown.mismatches
    line = shown.mismatches[0]
    assert "inputs.rides.hive" in line and "'ride_no'" in line and str(bad) in line, line
    assert "is string, read as bigint" in line, line
    end = (START + timedelta(hours=HOURS)).isoformat()
    with pytest.raises(ConfigError) as refused:
        run_job(spark, JOB, cfg, RunOptions("backfill", START.isoformat(), end))
    assert line in str(refused.value)
    assert not spark.catalog.tableExists(f"{out}_backfill")


def test_kappa_check_is_a_command() -> None:
    from typer.testing import CliRunner

    from kappaplus.cli import app

    result = CliRunner().invoke(app, ["check", "--help"])
    assert result.exit_code == 0 and "--config" in result.output, result.output


def produce_nested(bootstrap: str, topic: str, rows: pd.DataFrame) -> int:
    """Every row as a nested JSON record with an ISO timestamp and a field the lake lacks
    (``driver``), then one flush record at 09:30 that moves the watermark past the last
    window; returns how many records were produced."""
    import json

    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for r in rows.itertuples():
        ms = int(r.ts_ms)  # exactly, not through a float
        at = datetime.fromtimestamp(ms // 1000, tz=UTC) + timedelta(milliseconds=ms % 1000)
        record = {
            "ride": {"no": int(r.ride_no), "city": r.city_name},
            "at": at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "tip": float(r.tip),
            "driver": f"d{int(r.ride_no) % 7}",
        }
        producer.produce(topic, json.dumps(record).encode())
    flush = {"ride": {"no": 1, "city": "zz"}, "at": "2013-01-01T09:30:00Z", "tip": 0.0}
    producer.produce(topic, json.dumps(flush).encode())
    producer.flush(30)
    assert rows["ts_ms"].max() < START.timestamp() * 1000 + HOURS * 3_600_000
    return len(rows) + 1


def both_bindings(
    spark: SparkSession, scratch: Path, table: str, out: str, topic: str, bootstrap: str
) -> Any:
    """The nested topic's binding and the flattened lake's, mapped to the same columns."""
    return config_from_dict(
        {
            "checkpoint_dir": str(scratch / "checkpoints"),
            "inputs": {
                "rides": {
                    "kafka": {
                        "topic": topic,
                        "bootstrap_servers": bootstrap,
                        "starting_offsets": "earliest",
                        "fields": "ride struct<no:bigint, city:string>, at timestamp, "
                        "tip double, driver string",
                        "event_time": {"column": "at"},
                        "columns": {"ride_id": "cast(ride.no as string)", "city": "ride.city"},
                    },
                    "hive": config(table, out, scratch)
                    .inputs["rides"]
                    .hive.model_dump(exclude_none=True),
                    "event_time_bounds": {"max_future": "none"},
                }
            },
            "outputs": {"counts": {"hive": {"table": out}}},
        }
    )


def read_counts(
    spark: SparkSession, name: str, end: str
) -> dict[tuple[int, str], tuple[int, float | None, str]]:
    """An output table's windows before ``end`` (each once), as :func:`truth` has them."""
    got = spark.table(name).where(F.col("start") < F.lit(end).cast("timestamp"))
    collected = got.select(F.unix_seconds("start"), "city", "rides", "tips", "last").collect()
    result = {
        (r[0], r[1]): (r[2], None if r[3] is None else round(r[3], 6), r[4]) for r in collected
    }
    assert len(result) == len(collected), f"a window twice in {name}"
    return result


def test_stream_of_nested_iso_json_equals_the_truth_and_the_backfill_where_they_overlap(
    spark: SparkSession, kafka_bootstrap: str, new_topic: Any, scratch: Path
) -> None:
    """The topic carries nested records with ISO timestamps and a field the lake lacks
    (``driver``); the stream maps them to the same columns as the lake's binding."""
    rows = lake_rows()
    topic = new_topic(prefix="nested")
    produce_nested(kafka_bootstrap, topic, rows)
    table, out = f"rides_both_{uid()}", f"both_counts_{uid()}"
    write_lake(spark, scratch / "lake", table, rows)
    cfg = both_bindings(spark, scratch, table, out, topic, kafka_bootstrap)
    stream = run_job(spark, JOB, cfg, RunOptions("stream", trigger="available-now"))
    assert stream.status == "finished"
    end = (START + timedelta(hours=HOURS)).isoformat()
    backfill = run_job(spark, JOB, cfg, RunOptions("backfill", START.isoformat(), end))
    assert backfill.status == "finished"

    streamed, backfilled = read_counts(spark, out, end), read_counts(spark, f"{out}_backfill", end)
    assert streamed == truth(rows, tips_from_hour=0)
    assert backfilled == truth(rows)
    half = int(START.timestamp()) + HOURS // 2 * 3600
    overlap = {k: v for k, v in backfilled.items() if k[0] >= half}
    assert overlap and overlap == {k: v for k, v in streamed.items() if k[0] >= half}


def test_bootstrap_of_a_mapped_lake_then_a_nested_topic_equals_the_truth_and_both_modes(
    spark: SparkSession, kafka_bootstrap: str, new_topic: Any, scratch: Path
) -> None:
    """Bootstrap over the flattened, renamed, epoch-ms lake (``tip`` added half-way) up to a
    cutoff inside an hourly partition and a 30-minute window, then the nested ISO topic:
    each side through its own binding's mapping. Two rides sit 1 ms before and exactly at
    the cutoff, so a bound converted to the wrong unit duplicates or loses one. The result
    equals the pandas truth, the backfill over the whole range and the stream after the
    lake's ``tip`` appears; the Kafka records the lake owns are counted as skipped."""
    cutoff = START + timedelta(hours=5, minutes=17)
    cutoff_ms = int(cutoff.timestamp() * 1000)
    rows = lake_rows()
    edge = pd.DataFrame(
        {
            "ride_no": np.array([99_998, 99_999], dtype=np.int64),
            "city_name": ["sf", "sf"],
            "ts_ms": np.array([cutoff_ms - 1, cutoff_ms], dtype=np.int64),
            "tip": np.array([1.25, 2.5], dtype=np.float32),
        }
    )
    rows = pd.concat([rows, edge]).sort_values("ts_ms", kind="stable").reset_index(drop=True)
    topic = new_topic(prefix="nested-boot")
    produced = produce_nested(kafka_bootstrap, topic, rows)
    table, out, early = f"rides_boot_{uid()}", f"boot_counts_{uid()}", f"early_counts_{uid()}"
    write_lake(spark, scratch / "lake", table, rows)
    end = (START + timedelta(hours=HOURS)).isoformat()

    boot_cfg = both_bindings(spark, scratch / "boot", table, out, topic, kafka_bootstrap)
    result = run_job(
        spark,
        JOB,
        boot_cfg,
        RunOptions(
            "bootstrap",
            start=START.isoformat(),
            cutoff=cutoff.isoformat(),
            trigger="available-now",
        ),
    )
    assert result.status == "finished"
    booted = read_counts(spark, out, end)
    assert booted == truth(rows)
    counts = result.record.inputs["rides"]
    owned = int((rows["ts_ms"] < cutoff_ms).sum())
    assert counts["skipped"] == owned, counts
    assert counts["delivered"] == produced - owned and counts["dead"] == 0, counts

    cfg = both_bindings(spark, scratch / "other", table, early, topic, kafka_bootstrap)
    assert run_job(spark, JOB, cfg, RunOptions("backfill", START.isoformat(), end)).status == (
        "finished"
    )
    assert run_job(spark, JOB, cfg, RunOptions("stream", trigger="available-now")).status == (
        "finished"
    )
    assert booted == read_counts(spark, f"{early}_backfill", end)
    half = int(START.timestamp()) + HOURS // 2 * 3600
    streamed = read_counts(spark, early, end)
    assert streamed == truth(rows, tips_from_hour=0)
    after = {k: v for k, v in booted.items() if k[0] >= half}
    assert after and after == {k: v for k, v in streamed.items() if k[0] >= half}


def test_the_readme_step_on_differing_columns_works_as_written(
    spark: SparkSession, scratch: Path
) -> None:
    """The schema-mapping page's binding (``docs/how-to/schema-mapping.md``, "My lake's
    columns differ from my stream's"), taken as written (its first TOML block), backfills the
    lake it describes to the pandas truth."""
    import re
    import tomllib

    page = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "schema-mapping.md"
    section = page.read_text(encoding="utf-8")
    block = re.search(r"```toml\n(.*?)```", section, re.S)
    assert block is not None
    written = tomllib.loads(block.group(1))
    hive = written["inputs"]["rides"]["hive"]
    assert hive["table"] == "lake.rides_raw" and written["inputs"]["rides"]["kafka"]["columns"]

    rows = lake_rows(seed=8)
    spark.sql("CREATE DATABASE IF NOT EXISTS lake")
    spark.sql("DROP TABLE IF EXISTS lake.rides_raw")
    write_lake(spark, scratch / "lake", "lake.rides_raw", rows)
    out = f"readme_counts_{uid()}"
    cfg = config_from_dict(
        {
            "checkpoint_dir": str(scratch / "checkpoints"),
            "inputs": {"rides": {"hive": hive}},
            "outputs": {"counts": {"hive": {"table": out}}},
        }
    )
    end = (START + timedelta(hours=HOURS)).isoformat()
    result = run_job(spark, JOB, cfg, RunOptions("backfill", START.isoformat(), end))
    assert result.status == "finished"
    got = (
        spark.table(f"{out}_backfill")
        .select(F.unix_seconds("start"), "city", "rides", "tips", "last")
        .collect()
    )
    assert {
        (r[0], r[1]): (r[2], None if r[3] is None else round(r[3], 6), r[4]) for r in got
    } == truth(rows)
    spark.sql("DROP TABLE lake.rides_raw")


def test_bootstrap_of_a_lake_with_text_event_times_hands_over_exactly(
    spark: SparkSession, kafka_bootstrap: str, new_topic: Any, scratch: Path
) -> None:
    """The same bootstrap over a lake keeping its event time as text
    (``event_time = { column = "ts_text", format = "yyyy-MM-dd HH:mm:ss" }``): the planner
    converts the cutoff to the stored text, the rows are read as they are. Rides 1 s before
    and exactly at the cutoff (the format's resolution) are each delivered once."""
    cutoff = START + timedelta(hours=5, minutes=17)
    cutoff_ms = int(cutoff.timestamp() * 1000)
    rows = lake_rows(seed=4)
    rows["ts_ms"] = rows["ts_ms"] // 1000 * 1000  # the text keeps seconds
    edge = pd.DataFrame(
        {
            "ride_no": np.array([99_998, 99_999], dtype=np.int64),
            "city_name": ["la", "la"],
            "ts_ms": np.array([cutoff_ms - 1000, cutoff_ms], dtype=np.int64),
            "tip": np.array([0.5, 0.75], dtype=np.float32),
        }
    )
    rows = pd.concat([rows, edge]).sort_values("ts_ms", kind="stable").reset_index(drop=True)
    topic = new_topic(prefix="nested-text")
    produced = produce_nested(kafka_bootstrap, topic, rows)
    table, out = f"rides_text_{uid()}", f"text_counts_{uid()}"
    write_lake(spark, scratch / "lake", table, rows, text=True)
    cfg = both_bindings(spark, scratch, table, out, topic, kafka_bootstrap)
    hive = cfg.inputs["rides"].hive.model_dump(exclude_none=True, by_alias=True)
    hive.pop("event_time_column")
    hive["event_time"] = {"column": "ts_text", "format": "yyyy-MM-dd HH:mm:ss"}
    kafka = cfg.inputs["rides"].kafka.model_dump(exclude_none=True, by_alias=True)
    cfg = config_from_dict(
        {
            "checkpoint_dir": str(scratch / "checkpoints"),
            "inputs": {
                "rides": {"hive": hive, "kafka": kafka, "event_time_bounds": {"max_future": "none"}}
            },
            "outputs": {"counts": {"hive": {"table": out}}},
        }
    )
    result = run_job(
        spark,
        JOB,
        cfg,
        RunOptions(
            "bootstrap",
            start=START.isoformat(),
            cutoff=cutoff.isoformat(),
            trigger="available-now",
        ),
    )
    assert result.status == "finished"
    end = (START + timedelta(hours=HOURS)).isoformat()
    assert read_counts(spark, out, end) == truth(rows)
    counts = result.record.inputs["rides"]
    owned = int((rows["ts_ms"] < cutoff_ms).sum())
    assert counts["skipped"] == owned and counts["delivered"] == produced - owned, counts


RENAMED_AT = START + timedelta(hours=3, minutes=30)


def write_renamed_lake(spark: SparkSession, root: Path, table: str, rows: pd.DataFrame) -> None:
    """The city column renamed at :data:`RENAMED_AT`: rows before it are written with
    ``city_name`` (and a legacy ``city`` code that is not the city), rows from it on with
    ``city`` only. The hour holding the date has one file of each kind."""
    renamed_ms = int(RENAMED_AT.timestamp() * 1000)
    hour = pd.to_datetime(rows["ts_ms"], unit="ms", utc=True).dt.floor("h")
    for moment, part in rows.groupby(hour):
        folder = root / f"dt={moment:%Y-%m-%d}" / f"hr={moment:%H}"
        folder.mkdir(parents=True)
        old, new = part[part["ts_ms"] < renamed_ms], part[part["ts_ms"] >= renamed_ms]
        if len(old):
            legacy = old.assign(city=[f"code-{n % 13}" for n in old["ride_no"]])
            columns = ["ride_no", "city_name", "city", "ts_ms", "tip"]
            pq.write_table(
                pa.Table.from_pandas(legacy[columns], preserve_index=False),
                folder / "part-old.parquet",
            )
        if len(new):
            renamed = new.rename(columns={"city_name": "city"})
            pq.write_table(
                pa.Table.from_pandas(
                    renamed[["ride_no", "city", "ts_ms", "tip"]], preserve_index=False
                ),
                folder / "part-new.parquet",
            )
    spark.sql(
        f"CREATE TABLE {table} (ride_no bigint, city_name string, city string, ts_ms bigint, "
        f"tip double, dt string, hr string) USING parquet PARTITIONED BY (dt, hr) "
        f"LOCATION '{root}'"
    )
    spark.sql(f"MSCK REPAIR TABLE {table}")


def test_a_column_renamed_at_a_known_date_is_mapped_per_range(
    spark: SparkSession, scratch: Path
) -> None:
    """``mappings = [{ from, columns }]``: before the date ``city`` is read from
    ``city_name``, from it on from ``city``; a slice and an hour spanning the date map each
    row by its own event time. The backfill equals the pandas truth; either mapping alone
    does not (the legacy ``city`` codes, or nulls); ``kappa check`` shows both ranges."""
    from kappaplus.runtime.binding.unify import describe_bindings

    rows = lake_rows(seed=5)
    table, out = f"rides_renamed_{uid()}", f"renamed_counts_{uid()}"
    write_renamed_lake(spark, scratch / "lake", table, rows)
    ranges = [{"from": RENAMED_AT.isoformat(), "columns": {"city": "city"}}]
    cfg = config(table, out, scratch, mappings=ranges, maxEventTimePerTrigger="2 hours")
    (shown,) = describe_bindings(spark, JOB, cfg)
    city = next(c for c in shown.columns if c.column == "city")
    assert city.line() == (
        "city string <- before 2013-01-01T03:30:00Z: city_name (string); "
        "from 2013-01-01T03:30:00Z: city (string)"
    ), city.line()
    assert not shown.mismatches, shown.mismatches

    end = (START + timedelta(hours=HOURS)).isoformat()
    result = run_job(spark, JOB, cfg, RunOptions("backfill", START.isoformat(), end))
    assert result.status == "finished"
    got = read_counts(spark, f"{out}_backfill", end)
    expected = truth(rows, tips_from_hour=0)
    assert got == expected
    # the per-range mapping is what makes it equal: one mapping for the whole range is not
    legacy = config(table, f"one_{out}", scratch / "one", maxEventTimePerTrigger="2 hours")
    run_job(spark, JOB, legacy, RunOptions("backfill", START.isoformat(), end))
    assert read_counts(spark, f"one_{out}_backfill", end) != expected


def test_mappings_must_rise_and_name_their_range_in_errors(
    spark: SparkSession, scratch: Path
) -> None:
    """Out-of-order ``from`` is refused at load; a range's unknown column names its key."""
    with pytest.raises(ConfigError) as disorder:
        config(
            "t",
            "o",
            scratch,
            mappings=[
                {"from": "2013-01-02", "columns": {}},
                {"from": "2013-01-01", "columns": {}},
            ],
        )
    assert "mappings" in str(disorder.value) and "later" in str(disorder.value)

    from kappaplus.runtime.binding.unify import describe_bindings

    rows = lake_rows(seed=6)
    table = f"rides_badrange_{uid()}"
    write_renamed_lake(spark, scratch / "lake", table, rows)
    cfg = config(
        table, "o", scratch, mappings=[{"from": "2013-01-01T03:30", "columns": {"city": "town"}}]
    )
    with pytest.raises(ConfigError) as unknown:
        describe_bindings(spark, JOB, cfg)
    assert "inputs.rides.hive.mappings[0].columns.city" in str(unknown.value), unknown.value

    # an incompatible type in one range only: one line naming that range, column, types;
    # the run refuses it with the same line before any query starts
    incompatible = [{"from": "2013-01-01T03:30", "columns": {"tip": "city"}}]
    cfg = config(table, "o", scratch, mappings=incompatible)
    (shown,) = describe_bindings(spark, JOB, cfg)
    (line,) = shown.mismatches
    assert line.startswith("inputs.rides.hive.mappings[0]: column 'tip' <- city is string"), line
    assert "the job declares double" in line, line
    with pytest.raises(ConfigError) as refused:
        run_job(spark, JOB, cfg, RunOptions("backfill", START.isoformat(), RENAMED_AT.isoformat()))
    assert line in str(refused.value)


def test_an_event_time_mapping_the_decoder_never_applies_is_refused_by_check_and_run(
    spark: SparkSession,
    kafka_bootstrap: str,
    new_topic: Any,
    scratch: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 47 item 7: ``columns = { ride_time = "coalesce(ride_time, ts)" }`` on a Kafka
    binding passed ``kappa check``, but the decoder takes the event time from the records'
    ``ride_time`` and dead-letters a record where it is null before the mapping runs: the
    records it was written for were all dead letters. Refused by check and run alike, with
    the reason and the way out; nothing is created."""
    import json

    from confluent_kafka import Producer

    import kappaplus.session
    from kappaplus.cli import app

    topic, out = new_topic(prefix="coalesced"), f"coalesced_counts_{uid()}"
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(4):  # half without ride_time: what the mapping was meant for
        at = (START + timedelta(minutes=i)).isoformat()
        record = {"ride_id": str(i), "city": "sf", "tip": 1.0, "ts": at}
        record["ride_time"] = at if i % 2 else None
        producer.produce(topic, json.dumps(record).encode())
    producer.flush(30)
    binding = {
        "topic": topic,
        "bootstrap_servers": kafka_bootstrap,
        "starting_offsets": "earliest",
        "fields": "ride_id string, city string, tip double, ride_time timestamp, ts timestamp",
        "columns": {"ride_time": "coalesce(ride_time, ts)"},
    }
    toml = scratch / "coalesced.toml"
    toml.write_text(
        'job = "test_schema_mapping:JOB"\n'
        f'checkpoint_dir = "{scratch / "checkpoints"}"\n'
        "[inputs.rides.kafka]\n"
        + "".join(f"{k} = {json.dumps(v)}\n" for k, v in binding.items() if k != "columns")
        + 'columns = { ride_time = "coalesce(ride_time, ts)" }\n'
        f'[outputs.counts.hive]\ntable = "{out}"\n'
    )
    monkeypatch.setattr(kappaplus.session, "create_session", lambda *a, **k: spark)
    monkeypatch.setattr(kappaplus.session, "stop_session", lambda s: None)
    monkeypatch.setattr("kappaplus.cli.run._stop_quietly", lambda s: None)
    result = CliRunner().invoke(
        app, ["check", "test_schema_mapping:JOB", "-c", str(toml)], env={"COLUMNS": "300"}
    )
    text = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert "inputs.rides.kafka.columns.ride_time" in text, text
    assert "dead-letters a record where that is null before any mapping runs" in text, text
    assert "event_time = { column" in text, text

    cfg = config_from_dict(
        {
            "checkpoint_dir": str(scratch / "checkpoints"),
            "inputs": {"rides": {"kafka": binding}},
            "outputs": {"counts": {"hive": {"table": out}}},
        }
    )
    with pytest.raises(ConfigError) as refused:
        run_job(spark, JOB, cfg, RunOptions("stream", trigger="available-now"))
    assert "before any mapping runs" in str(refused.value)
    assert not spark.catalog.tableExists(out)
