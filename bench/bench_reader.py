"""The source's reading code alone (no Spark) against a raw pyarrow read of the same files.

    .venv/bin/python bench/bench_reader.py [--rows 1000000] [--hours 48] [--rounds 5] [--profile]

Writes ``--rows`` events in ``--hours`` hourly Parquet partitions with pyarrow, plans one
slice over the whole range with the source's planner, and reads it (a) with the source's
reader (``read_partition`` over the slice's input partitions: filter to the slice, conform
to the declared schema, partition columns) and (b) with ``pq.read_table`` of the same files
and columns. Rounds alternate; prints the median seconds and the ratio. ``--profile`` prints
a cProfile of one reader pass (where the Python reader's time goes).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

US = 1_000_000
HOUR = 3600 * US
BASE = int(datetime(2024, 3, 1, tzinfo=UTC).timestamp()) * US
COLUMNS = ["ts", "key", "amount"]


def write(root: Path, rows: int, hours: int) -> list[str]:
    rng = np.random.default_rng(1)
    per = rows // hours
    paths = []
    for h in range(hours):
        moment = datetime.fromtimestamp((BASE + h * HOUR) / US, tz=UTC)
        part = root / f"dt={moment:%Y-%m-%d}" / f"hr={moment:%H}"
        part.mkdir(parents=True, exist_ok=True)
        ids = np.arange(h * per, (h + 1) * per)
        table = pa.table(
            {
                "id": ids,
                "key": (ids * 7 % 50).astype(np.int32),
                "kind": pa.array(np.array(["open", "pay"])[ids % 2]),
                "amount": ids * 31 % 1000,
                "ts": pa.array(BASE + h * HOUR + rng.integers(0, HOUR, per), pa.timestamp("us")),
            }
        )
        path = part / "part-0.parquet"
        pq.write_table(table, path)
        paths.append(str(path))
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--hours", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()

    from pyspark.sql.types import (
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    from kappaplus.connectors.hive.datasource import HiveStreamReader
    from kappaplus.connectors.hive.file_reader import read_partition
    from kappaplus.connectors.lake.options import LakeSourceOptions

    work = Path(tempfile.mkdtemp(prefix="bench-reader-"))
    paths = write(work / "t", args.rows, args.hours)
    schema = StructType(
        [
            StructField("id", LongType()),
            StructField("key", IntegerType()),
            StructField("kind", StringType()),
            StructField("amount", LongType()),
            StructField("ts", TimestampType()),
            StructField("dt", StringType()),
            StructField("hr", StringType()),
        ]
    )
    opts = LakeSourceOptions.parse(
        {
            "table": "t",
            "location": str(work / "t"),
            "format": "parquet",
            "schema": json.dumps(schema.jsonValue()),
            "partitionColumns": "dt,hr",
            "eventTimeColumn": "ts",
            "startingTimestamp": "2024-03-01T00:00:00Z",
            "endingTimestamp": datetime.fromtimestamp(
                (BASE + args.hours * HOUR) / US, tz=UTC
            ).isoformat(),
            "manifestDir": str(work / "m"),
            "columns": "ts,key,amount",
            "targetRowsPerTrigger": str(args.rows * 2),
        }
    )
    reader = HiveStreamReader(opts)
    reader.prepareForTriggerAvailableNow()
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    parts = reader.partitions(start, end)

    def source() -> int:
        return sum(b.num_rows for p in parts for b in read_partition(opts, p))

    def raw() -> int:
        return sum(pq.read_table(p, columns=COLUMNS).num_rows for p in paths)

    times: dict[str, list[float]] = {"source": [], "raw": []}
    for _ in range(args.rounds):
        for name, fn in (("raw", raw), ("source", source)):
            t0 = time.perf_counter()
            n = fn()
            times[name].append(time.perf_counter() - t0)
            assert n == args.rows - args.rows % args.hours, (name, n)
    src, rw = statistics.median(times["source"]), statistics.median(times["raw"])
    print(
        f"{args.rows:,} rows, {len(paths)} files, {len(parts)} input partitions: "
        f"source reader {src:.3f} s, raw pq.read_table {rw:.3f} s; "
        f"read rate source/raw {rw / src:.0%}"
    )
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        source()
        profile.disable()
        pstats.Stats(profile).sort_stats("cumulative").print_stats(18)


if __name__ == "__main__":
    main()
