"""What a binding's mapping costs per row: the same 7-day hourly aggregation backfilled from
two tables holding the same events, side by side in one run and one session.

    .venv/bin/python bench/bench_mapping.py [--days 7] [--rows-per-day 200000] [--repeat 2]

- ``plain``: ``id bigint, key string, amount double, ts timestamp`` read as the job declares
  them (default reader: the JVM one);
- ``plain-py``: the same with ``reader = "python"`` (the read path a mapped table takes);
- ``mapped``: ``ride_no bigint, key_name string, amount double, ts_ms bigint`` with
  ``columns = { id = "ride_no", key = "upper(key_name)" }`` and
  ``event_time = { column = "ts_ms", unit = "ms" }`` (the Python reader converts the stored
  event time; the mapping is one projection before the watermark).

After one untimed warm-up round, each way runs ``--repeat`` times alternately with
``--fresh``; the medians are printed with
the ratios mapped/plain-py (the mapping's own cost) and mapped/plain (what a user sees), and
every way's windows are checked equal.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

START = datetime(2024, 3, 1, tzinfo=UTC)


def write_tables(spark: Any, root: Path, days: int, per_day: int) -> None:
    rng = np.random.default_rng(1)
    for day in range(days):
        for hour in range(24):
            n = per_day // 24
            base = int((START + timedelta(days=day, hours=hour)).timestamp() * 1000)
            ts_ms = base + rng.integers(0, 3_600_000, n)
            ids = np.arange(n, dtype=np.int64) + (day * 24 + hour) * n
            keys = rng.choice([f"k{i:02d}" for i in range(50)], n)
            amount = rng.random(n)
            part = f"dt={START + timedelta(days=day):%Y-%m-%d}/hr={hour:02d}"
            plain = pa.table(
                {
                    "id": ids,
                    "key": np.char.upper(keys.astype(str)),
                    "amount": amount,
                    "ts": pa.array(ts_ms * 1000, pa.timestamp("us", tz="UTC")),
                }
            )
            mapped = pa.table({"ride_no": ids, "key_name": keys, "amount": amount, "ts_ms": ts_ms})
            for name, table in (("plain", plain), ("mapped", mapped)):
                folder = root / name / part
                folder.mkdir(parents=True)
                pq.write_table(table, folder / "part-0.parquet")
    for name, columns in (
        ("plain", "id bigint, key string, amount double, ts timestamp"),
        ("mapped", "ride_no bigint, key_name string, amount double, ts_ms bigint"),
    ):
        spark.sql(
            f"CREATE TABLE bench_map_{name} ({columns}, dt string, hr string) USING parquet "
            f"PARTITIONED BY (dt, hr) LOCATION '{root / name}'"
        )
        spark.sql(f"MSCK REPAIR TABLE bench_map_{name}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--rows-per-day", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    from pyspark.sql import functions as F

    from kappaplus.config import config_from_dict
    from kappaplus.jobs import InputSpec, Job, OutputSpec
    from kappaplus.runtime.options import RunOptions
    from kappaplus.runtime.runner import run_job
    from kappaplus.session import create_session, stop_session

    def hourly(inputs: Any, params: Any) -> dict[str, Any]:
        grouped = inputs["events"].groupBy(F.window("ts", "1 hour"), "key")
        counted = grouped.agg(F.count("*").alias("n"), F.sum("amount").alias("total"))
        return {"hourly": counted.select(F.col("window.start").alias("start"), "key", "n", "total")}

    job = Job(
        name="bench-mapping",
        inputs=[InputSpec("events", "id bigint, key string, amount double, ts timestamp", "ts")],
        outputs=[OutputSpec("hourly", output_mode="append", event_time_column="start")],
        transform=hourly,
        watermark_delay="10 minutes",
    )
    work = Path(tempfile.mkdtemp(prefix="bench-mapping-"))
    spark = create_session("bench-mapping", home=work / "home", conf={"spark.ui.enabled": "false"})
    write_tables(spark, work / "lake", args.days, args.rows_per_day)
    bindings: dict[str, dict[str, Any]] = {
        "plain": {"table": "bench_map_plain", "event_time_column": "ts"},
        "plain-py": {"table": "bench_map_plain", "event_time_column": "ts", "reader": "python"},
        "mapped": {
            "table": "bench_map_mapped",
            "event_time": {"column": "ts_ms", "unit": "ms"},
            "columns": {"id": "ride_no", "key": "upper(key_name)"},
        },
    }
    end = (START + timedelta(days=args.days)).isoformat()
    times: dict[str, list[float]] = {way: [] for way in bindings}
    results: dict[str, Any] = {}
    for round_ in range(args.repeat + 1):  # round 0 warms the session up, not timed
        for way, hive in bindings.items():
            out = f"bench_map_out_{way.replace('-', '_')}"
            config = config_from_dict(
                {
                    "checkpoint_dir": str(work / "checkpoints" / way),
                    "inputs": {
                        "events": {"hive": {**hive, "partition_format": "dt=%Y-%m-%d/hr=%H"}}
                    },
                    "outputs": {"hourly": {"hive": {"table": out}}},
                }
            )
            began = time.perf_counter()
            run = RunOptions("backfill", START.isoformat(), end, fresh=True, progress=False)
            result = run_job(spark, job, config, run)
            if round_:
                times[way].append(time.perf_counter() - began)
            assert result.status == "finished", (way, result.status)
            rows = spark.table(f"{out}_backfill").select("start", "key", "n", "total").collect()
            results[way] = sorted((r[0], r[1], r[2], round(r[3], 6)) for r in rows)
            spark.sql(f"DROP TABLE {out}_backfill")
    assert results["plain"] == results["plain-py"] == results["mapped"], "results differ"
    median = {way: statistics.median(t) for way, t in times.items()}
    rows = args.days * (args.rows_per_day // 24) * 24
    print(f"{args.days} days, {rows:,} rows, {len(results['plain']):,} windows, equal results")
    for way, seconds in median.items():
        print(f"  {way:9} {seconds:7.1f} s  {rows / seconds:10,.0f} rows/s  runs {times[way]}")
    print(f"  mapped / plain-py {median['mapped'] / median['plain-py']:.2f}x")
    print(f"  mapped / plain    {median['mapped'] / median['plain']:.2f}x")
    stop_session(spark)


if __name__ == "__main__":
    main()
