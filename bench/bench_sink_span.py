"""What recording each batch's event-time span costs the exactly-once Hive sink, side by side.

    .venv/bin/python bench/bench_sink_span.py [--batches 12] [--rows 20000] [--rounds 3]

Every commit marker records ``event_time`` (min/max of the output's event-time column over
the batch, observed while the batch is staged) and the query's cumulative ``span``
(:mod:`kappaplus.connectors.hive.sink`). This writes the same ``--batches`` batches of
``--rows`` rows through :class:`HiveTableSink.write_batch` into fresh tables, with the
event-time column named (span observed and recorded) and without it (nothing observed;
the partition column given by expression instead), alternating the two for ``--rounds``
rounds in one process, and prints the median time per batch of each and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from pyspark.sql import functions as F

    from kappaplus.connectors.hive.sink import HiveTableSink
    from kappaplus.connectors.hive.sink_options import HiveSinkOptions
    from kappaplus.session import create_session

    home = tempfile.mkdtemp(prefix="bench-sink-span-")
    spark = create_session("bench-sink-span", home=home)
    frames = [
        spark.range(args.rows)
        .withColumn("area", (F.col("id") % 50).cast("string"))
        .withColumn(
            "start",
            F.timestamp_seconds(F.lit(1_709_251_200 + batch * 3600) + F.col("id") % 3600),
        )
        .withColumn("dt", F.to_date("start"))
        .cache()
        for batch in range(args.batches)
    ]
    for frame in frames:
        frame.count()

    def run(observed: bool) -> float:
        table = f"bench_span_{uuid.uuid4().hex[:8]}"
        options = HiveSinkOptions(
            table=table,
            query_name=f"q{uuid.uuid4().hex[:6]}",
            event_time_column="start" if observed else None,
        )
        sink = HiveTableSink(options)
        began = time.perf_counter()
        for batch_id, frame in enumerate(frames):
            sink.write_batch(frame, batch_id)
        elapsed = (time.perf_counter() - began) / len(frames)
        spark.sql(f"DROP TABLE {table}")
        return elapsed

    run(True)  # warm-up: JIT, catalog, first table
    times: dict[bool, list[float]] = {True: [], False: []}
    for round_ in range(args.rounds):
        for observed in (False, True) if round_ % 2 else (True, False):
            times[observed].append(run(observed))
    with_span = statistics.median(times[True])
    without = statistics.median(times[False])
    print(
        f"{args.batches} batches x {args.rows} rows, {args.rounds} alternating rounds: "
        f"per batch {with_span * 1000:.0f} ms with the span recorded, "
        f"{without * 1000:.0f} ms without; ratio {with_span / without:.2f}x"
    )
    print("raw (s/batch):", {k: [round(v, 3) for v in vs] for k, vs in times.items()})


if __name__ == "__main__":
    main()
