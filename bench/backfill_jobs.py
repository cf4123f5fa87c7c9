"""The jobs `bench/bench_backfill.py` runs through `kappa run` (importable as
``backfill_jobs`` with ``bench/`` on ``PYTHONPATH``).

- ``HOURLY``: count and sum of ``amount`` per 1-hour window per key (the issue's
  aggregation);
- ``SESSIONS``: session windows (10-minute gap) per rider: events and sum of ``amount``;
- ``RIDER_SESSIONS``: the demo's own sessionization job (30-minute gap per rider, event
  types seen, trip requested; :mod:`kappaplus.examples.sessionization`), unchanged, for
  the state-heavy case of ``bench/bench_state.py``.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kappaplus.examples.sessionization import JOB as RIDER_SESSIONS
from kappaplus.examples.sessionization import sessionize
from kappaplus.jobs import InputSpec, Job, OutputSpec, Params

__all__ = ["HOURLY", "RIDER_SESSIONS", "SESSIONS", "hourly", "sessionize", "sessions"]

EVENT_DDL = "id bigint, key int, rider int, amount bigint, ts timestamp"
SESSION_GAP = "10 minutes"


def hourly(inputs: Mapping[str, DataFrame], params: Params) -> dict[str, DataFrame]:
    counts = (
        inputs["events"]
        .groupBy(F.window("ts", "1 hour"), "key")
        .agg(F.count("*").alias("n"), F.sum("amount").alias("total"))
    )
    return {
        "counts": counts.select(F.col("window.start").alias("window_start"), "key", "n", "total")
    }


def sessions(inputs: Mapping[str, DataFrame], params: Params) -> dict[str, DataFrame]:
    found = (
        inputs["events"]
        .groupBy(F.session_window("ts", SESSION_GAP).alias("s"), "rider")
        .agg(F.count("*").alias("n"), F.sum("amount").alias("total"))
    )
    return {
        "sessions": found.select(
            F.col("s.start").alias("session_start"),
            F.col("s.end").alias("session_end"),
            "rider",
            "n",
            "total",
        )
    }


HOURLY = Job(
    name="bench-hourly",
    description="Count and sum per 1-hour window per key.",
    inputs=[InputSpec("events", EVENT_DDL, "ts")],
    outputs=[OutputSpec("counts", output_mode="append", event_time_column="window_start")],
    transform=hourly,
    watermark_delay="2 minutes",
)

SESSIONS = Job(
    name="bench-sessions",
    description="Session windows per rider.",
    inputs=[InputSpec("events", EVENT_DDL, "ts")],
    outputs=[OutputSpec("sessions", output_mode="append", event_time_column="session_start")],
    transform=sessions,
    watermark_delay="2 minutes",
)
