"""The exactly-once Delta sink vs the Iceberg sink, side by side in one run: the same
micro-batches (Arrow tables, as both sinks receive them from ``DataFrame.toArrow()``)
committed by each, in alternating rounds so load on the machine falls on both alike.

    .venv/bin/python bench/bench_lake_sinks.py [--batches 40] [--rows 20000] [--rounds 3]

Per batch each sink checks its marker (Delta: the query's ``txn``; Iceberg: the table
property), writes one data file and commits one table version. Reported: rows/s of the
commits, the median commit, and the median cost of skipping a replayed batch (the marker
check alone). Every table is read back (delta-rs / pyiceberg) and counted: rows =
batches x rows, no batch twice.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

BASE = int(datetime(2024, 3, 1, tzinfo=UTC).timestamp()) * 1_000_000


def batch(i: int, rows: int, rng: np.random.Generator) -> pa.Table:
    ts = BASE + i * 60_000_000 + rng.integers(0, 60_000_000, rows)
    return pa.table(
        {
            "key": pa.array([f"k{k}" for k in rng.integers(0, 50, rows)]),
            "amount": pa.array(rng.random(rows)),
            "n": pa.array(np.arange(i * rows, (i + 1) * rows, dtype=np.int64)),
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
        }
    )


def sinks(work: Path, round_: int) -> dict[str, Any]:
    from kappaplus.connectors.delta.sink import DeltaTableSink
    from kappaplus.connectors.iceberg.sink import IcebergTableSink

    props = {
        "type": "sql",
        "uri": f"sqlite:///{work / 'catalog.db'}",
        "warehouse": f"file://{work / 'warehouse'}",
    }
    return {
        "delta": DeltaTableSink(str(work / f"delta_{round_}"), None, query=f"q-{round_}"),
        "iceberg": IcebergTableSink(f"bench.out_{round_}", props, query=f"q-{round_}"),
    }


def count(name: str, sink: Any) -> int:
    if name == "delta":
        from deltalake import DeltaTable

        column = DeltaTable(sink.location).to_pyarrow_table(columns=["n"])["n"]
    else:
        column = sink.load().scan(selected_fields=("n",)).to_arrow()["n"]
    assert len(column) == len(set(column.to_pylist())), f"{name}: a row twice"
    return len(column)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    batches = [batch(i, args.rows, rng) for i in range(args.batches)]
    commits: dict[str, list[float]] = {"delta": [], "iceberg": []}
    skips: dict[str, list[float]] = {"delta": [], "iceberg": []}
    walls: dict[str, float] = {"delta": 0.0, "iceberg": 0.0}
    with tempfile.TemporaryDirectory(prefix="bench-lake-sinks-") as tmp:
        for round_ in range(args.rounds):
            order = ["delta", "iceberg"] if round_ % 2 == 0 else ["iceberg", "delta"]
            made = sinks(Path(tmp), round_)
            for name in order:
                sink = made[name]
                start = time.perf_counter()
                for i, rows in enumerate(batches):
                    t = time.perf_counter()
                    assert sink.write_arrow(rows, i) is True
                    commits[name].append(time.perf_counter() - t)
                walls[name] += time.perf_counter() - start
                for i in range(0, args.batches, max(1, args.batches // 10)):
                    t = time.perf_counter()
                    assert sink.write_arrow(batches[i], i) is False
                    skips[name].append(time.perf_counter() - t)
                assert count(name, sink) == args.batches * args.rows
    total = args.rounds * args.batches * args.rows
    print(
        f"{args.rounds} rounds x {args.batches} batches x {args.rows:,} rows "
        "(key string, amount double, n long, ts timestamptz), alternating order"
    )
    print("sink     rows/s      median commit  median replay skip")
    for name in ("delta", "iceberg"):
        print(
            f"{name:8} {total / walls[name]:>10,.0f}  "
            f"{statistics.median(commits[name]) * 1000:>10.1f} ms  "
            f"{statistics.median(skips[name]) * 1000:>10.1f} ms"
        )
    print(f"delta / iceberg rows/s: {walls['iceberg'] / walls['delta']:.2f}x")


if __name__ == "__main__":
    main()
