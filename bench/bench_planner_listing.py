"""The slice planner alone over a long bounded range: listing the table for every slice
against the default ``listingInterval``, side by side (no Spark).

    .venv/bin/python bench/bench_planner_listing.py \\
        --table-dir /work/bench-state/home/warehouse/bench_riders_365d_100000 [--rounds 2]

The table is one ``bench/bench_state.py`` generates (hourly ``dt``/``hr`` partitions of
parquet, ``event_time``); the planner plans it the way a backfill of the state-heavy case
does (slices of 500,000 rows, an eviction batch after each, the end markers), from its
first offset to its end, in one process, alternating ``listingInterval = 0`` (a listing,
audit and sort before every slice) and the default, ``--rounds`` times each. Prints each
run's calls and seconds and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import glob
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def plan_through(table_dir: str, interval: str, start: str, end: str) -> tuple[int, float]:
    """Calls and seconds to plan ``[start, end)`` of the table from a fresh planner."""
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import StringType, StructField, StructType

    from kappaplus.connectors.hive.planner import HiveSlicePlanner
    from kappaplus.connectors.lake.options import LakeSourceOptions

    data = glob.glob(f"{table_dir}/dt=*/hr=*/*.parquet")
    if not data:
        raise SystemExit(f"no dt=*/hr=*/*.parquet under {table_dir} (make it with bench_state.py)")
    fields = list(from_arrow_schema(pq.read_schema(data[0])).fields)
    schema = StructType([*fields, StructField("dt", StringType()), StructField("hr", StringType())])
    options = LakeSourceOptions.parse(
        {
            "table": Path(table_dir).name,
            "location": table_dir,
            "format": "parquet",
            "schema": schema.json(),
            "partitionColumns": "dt,hr",
            "eventTimeColumn": "event_time",
            "manifestDir": tempfile.mkdtemp(prefix="bench-planner-"),
            "startingTimestamp": start,
            "endingTimestamp": end,
            "partitionTimeFormat": "dt=%Y-%m-%d/hr=%H",
            "targetRowsPerTrigger": "500000",
            "evictBetweenSlices": "true",
            "watermarkDelay": "10 minutes",
            **({"listingInterval": interval} if interval else {}),
        }
    )
    planner = HiveSlicePlanner(options)
    began = time.perf_counter()
    offset = planner.initial_offset()
    calls = 0
    while True:
        calls += 1
        following = planner.next(offset, None)
        if following == offset:
            return calls, time.perf_counter() - began
        offset = following


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table-dir", required=True)
    parser.add_argument("--start", default="2024-03-01T00:00:00Z")
    parser.add_argument("--end", default="2025-03-01T00:00:00Z")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    seconds: dict[str, list[float]] = {"every slice": [], "default": []}
    for _ in range(args.rounds):
        for way, interval in (("every slice", "0 seconds"), ("default", "")):
            calls, took = plan_through(args.table_dir, interval, args.start, args.end)
            seconds[way].append(took)
            print(f"{way:12} {calls} calls, {took:.2f} s", flush=True)
    every, default = (statistics.median(v) for v in seconds.values())
    print(f"median: listing every slice {every:.2f} s, default {default:.2f} s")
    print(f"ratio (default / every slice): {default / every:.3f}x")


if __name__ == "__main__":
    main()
