"""Clock skew and dead letters in the Hive binding of a backfill.

An arrival-time table where many rows sit in an arrival partition *before* their event hour
(a producer's clock ahead of the arrival stamp): ``max_earliness`` admits them and the
backfill equals a ground truth computed by hand; rows beyond the allowance (and rows with a
null event time) fail the run with advice naming the binding's keys, or, with
``unplaceable = "dead_letter"``, land in the dead-letter Hive table with their reasons and
are counted in the run record.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from runtime_helpers import uid

from kappaplus.config import config_from_dict
from kappaplus.core.errors import KappaError
from kappaplus.jobs import InputSpec, Job, OutputSpec, Params
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job

START = datetime(2024, 3, 1, tzinfo=UTC)
END = START + timedelta(hours=6)
WINDOW = timedelta(minutes=10)


def counts(inputs: Mapping[str, DataFrame], params: Params) -> dict[str, DataFrame]:
    per_window = inputs["rides"].groupBy(F.window("event_time", "10 minutes"), "city").count()
    return {"counts": per_window.select(F.col("window.start").alias("start"), "city", "count")}


JOB = Job(
    name="skewed-ride-counts",
    inputs=[InputSpec("rides", "ride_id string, city string, event_time timestamp", "event_time")],
    outputs=[OutputSpec("counts", output_mode="append", event_time_column="start")],
    transform=counts,
    watermark_delay="1 hour",
)


def skewed_rows() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(placeable rows, rows beyond the allowance); arrival hour = partition."""
    rng = random.Random(12)
    good, beyond = [], []
    for i in range(1500):
        event = START + timedelta(seconds=rng.uniform(0, 6 * 3600 - 1))
        # up to 33 minutes early (skew) or 50 minutes late
        arrival = event + timedelta(seconds=rng.uniform(-33 * 60, 50 * 60))
        good.append({"ride_id": f"r{i}", "city": rng.choice("ab"), "event": event, "arr": arrival})
    for i in range(7):  # stamped 3 hours before their event: beyond a 40-minute allowance
        event = START + timedelta(hours=3, minutes=20 * i + 5)
        beyond.append(
            {"ride_id": f"x{i}", "city": "a", "event": event, "arr": event - timedelta(hours=3)}
        )
    for i in range(2):
        beyond.append(
            {"ride_id": f"n{i}", "city": "b", "event": None, "arr": START + timedelta(hours=2)}
        )
    return good, beyond


def write_table(spark: SparkSession, table: str, rows: list[dict[str, Any]]) -> None:
    data = [
        (
            r["ride_id"],
            r["city"],
            r["event"],
            r["arr"].strftime("%Y-%m-%d"),
            r["arr"].strftime("%H"),
        )
        for r in rows
    ]
    frame = spark.createDataFrame(
        data, "ride_id string, city string, event_time timestamp, dt string, hr string"
    )
    frame.repartition(2).write.partitionBy("dt", "hr").format("parquet").saveAsTable(table)


def truth(rows: list[dict[str, Any]]) -> Counter[tuple[int, str]]:
    out: Counter[tuple[int, str]] = Counter()
    for r in rows:
        t = int(r["event"].timestamp())
        out[(t - t % int(WINDOW.total_seconds()), r["city"])] += 1
    return out


def config(table: str, out: str, scratch: Path, **hive: Any) -> Any:
    return config_from_dict(
        {
            "checkpoint_dir": str(scratch / "checkpoints"),
            "inputs": {
                "rides": {
                    "hive": {
                        "table": table,
                        "event_time_column": "event_time",
                        "partition_format": "dt=%Y-%m-%d/hr=%H",
                        "partition_time": "arrival",
                        "max_lateness": "1 hour",
                        "max_earliness": "40 minutes",
                        **hive,
                    }
                }
            },
            "outputs": {"counts": {"hive": {"table": out}}},
        }
    )


def test_skewed_rows_within_the_allowance_give_the_truth_and_the_rest_are_dead_letters(
    spark: SparkSession, scratch: Path
) -> None:
    good, beyond = skewed_rows()
    assert sum(r["arr"] < r["event"].replace(minute=0, second=0, microsecond=0) for r in good) > 100
    table, out, dlq = f"skewed_{uid()}", f"skew_counts_{uid()}", f"skew_dlq_{uid()}"
    write_table(spark, table, good + beyond)
    run = RunOptions("backfill", START.isoformat(), END.isoformat())

    with pytest.raises(KappaError) as failed:
        run_job(spark, JOB, config(table, out, scratch), run)
    advice = str(failed.value)
    assert "inputs.rides.hive" in advice and "max_earliness" in advice, advice[:2000]
    assert 'unplaceable = "dead_letter"' in advice, advice[:2000]

    fresh = RunOptions("backfill", START.isoformat(), END.isoformat(), fresh=True)
    cfg = config(table, out, scratch, unplaceable="dead_letter", dlq={"table": dlq})
    result = run_job(spark, JOB, cfg, fresh)
    assert result.status == "finished"
    rows = spark.table(f"{out}_backfill").select(F.unix_seconds("start"), "city", "count").collect()
    produced = Counter({(r[0], r[1]): r[2] for r in rows})
    assert len(rows) == len(produced)  # every window once
    assert produced == truth(good)

    letters = spark.table(dlq).collect()
    assert len(letters) == len(beyond) == result.record.inputs["rides"]["dead_letters"]
    ids = sorted(json.loads(r["value"])["ride_id"] for r in letters)
    assert ids == sorted(r["ride_id"] for r in beyond)
    reasons = Counter(r["reason"].split(" (table")[0].split(" is ")[-1][:7] for r in letters)
    assert sum(1 for r in letters if "event time is null" in r["reason"]) == 2
    assert sum(1 for r in letters if "outside the range its partition admits" in r["reason"]) == 7
    assert all(table in r["reason"] and r["job"] == JOB.name for r in letters), reasons
    # a rerun (resume) publishes the same dead letters once, not twice
    again = run_job(spark, JOB, cfg, run)
    assert again.status == "finished"
    assert spark.table(dlq).count() == len(beyond)
