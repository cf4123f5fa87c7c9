"""What keeping late rows costs: the late-row tap's Arrow round trip, side by side.

    .venv/bin/python bench/bench_late_tap.py [--rows 2000000] [--rounds 3]

A job that keeps its late rows (``[outputs.<o>.late]``) passes every input row through a
pass-through ``mapInArrow`` (:class:`kappaplus.runtime.side_outputs.late_rows.LateRowTap`) before
the watermark. This measures, in one process, alternating, the same windowed count over an
in-memory-cached DataFrame of ``--rows`` events:

- plain: ``groupBy(window(ts, 10 minutes), key).count()``;
- tapped: the same over ``tap_input(df, ...)`` with a rule (outside a streaming task the tap
  judges nothing, so this is the pass-through cost, which dominates: the judging itself is
  one vectorized comparison per Arrow batch).

Prints the median seconds of each and the ratio tapped / plain.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    from pyspark.sql import functions as F

    from kappaplus.core.late_rules import LateRule
    from kappaplus.runtime.side_outputs.late_rows import LateRowsPlan, tap_input
    from kappaplus.session import create_session, stop_session

    work = Path(tempfile.mkdtemp(prefix="bench-late-tap-"))
    spark = create_session(
        "bench-late-tap", master=args.master, home=work / "home", conf={"spark.ui.enabled": "false"}
    )
    events = (
        spark.range(0, args.rows)
        .select(
            (F.col("id") % 500).alias("key"),
            F.timestamp_seconds(F.lit(1_709_251_200) + F.col("id") % (30 * 86_400)).alias("ts"),
        )
        .cache()
    )
    events.count()
    plan = LateRowsPlan(
        "counts",
        LateRule("window", 600_000_000, 600_000_000),
        str(work / "cp" / "counts"),
        str(work / "cp" / "_late" / "counts"),
        "counts_late",
        "ts",
    )
    ways = {
        "plain": events,
        "tapped": tap_input(events, "events", "ts", [plan]),
    }

    def run(df) -> float:  # type: ignore[no-untyped-def]
        started = time.monotonic()
        df.groupBy(F.window("ts", "10 minutes"), "key").count().write.format("noop").mode(
            "overwrite"
        ).save()
        return time.monotonic() - started

    for df in ways.values():
        run(df)  # warm-up
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.rounds):
        for name, df in ways.items():
            times[name].append(run(df))
    stop_session(spark)
    shutil.rmtree(work, ignore_errors=True)
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"{args.rows:,} rows, {args.master}, {args.rounds} rounds (medians)")
    for name, seconds in medians.items():
        print(f"  {name:7} {seconds:6.2f} s  {args.rows / seconds:,.0f} rows/s")
    print(f"  tapped / plain: {medians['tapped'] / medians['plain']:.2f}x")


if __name__ == "__main__":
    main()
