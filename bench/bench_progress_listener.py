"""What a progress event costs the driver's Python process: PySpark's conversion against
the JSON text in one call (:mod:`kappaplus.runtime.observe.json_listener`), side by side.

    .venv/bin/python bench/bench_progress_listener.py [--batches 40]

Runs one stateful streaming query (a session window over a file source, so its progress
has a source, a sink and a state operator, as a backfill's has) for ``--batches``
micro-batches with two listeners registered at once: one through PySpark's own bridge
(``QueryProgressEvent.fromJObject``, a Py4J call per field) and one through
:class:`JsonProgressListener`. Each bridge's time per event is measured around the
conversion, on the thread Spark calls it on; prints the medians, the total per run of
``--batches`` events, and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=40)
    args = parser.parse_args()

    from pyspark import SparkContext
    from pyspark.sql import functions as F
    from pyspark.sql.streaming import StreamingQueryListener
    from pyspark.sql.streaming.listener import JStreamingQueryListener

    from kappaplus.runtime.observe import json_listener
    from kappaplus.session import create_session

    times: dict[str, list[float]] = {"pyspark": [], "json": []}

    class TimedPySpark(JStreamingQueryListener):
        def onQueryProgress(self, jevent: Any) -> None:  # noqa: N802
            start = time.perf_counter()
            super().onQueryProgress(jevent)
            times["pyspark"].append(time.perf_counter() - start)

    class TimedJson(json_listener._JsonProgressBridge):
        def onQueryProgress(self, jevent: Any) -> None:  # noqa: N802
            start = time.perf_counter()
            super().onQueryProgress(jevent)
            times["json"].append(time.perf_counter() - start)

    class Reads(StreamingQueryListener):
        """Reads the progress as the run's listeners do."""

        def onQueryStarted(self, event: Any) -> None:  # noqa: N802
            return

        def onQueryProgress(self, event: Any) -> None:  # noqa: N802
            event.progress.json  # noqa: B018 - what the run's listeners read

        def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
            return

    home = tempfile.mkdtemp(prefix="bench-listener-")
    spark = create_session("bench-progress-listener", home=home)
    jvm = SparkContext._jvm
    assert jvm is not None
    pyspark_way, json_way = Reads(), Reads()
    wrapper = jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper
    pyspark_way._jlistenerobj = wrapper(TimedPySpark(pyspark_way))
    json_way._jlistenerobj = wrapper(TimedJson(json_way))
    spark.streams.addListener(pyspark_way)
    spark.streams.addListener(json_way)

    source = Path(home) / "in"
    source.mkdir()
    for batch in range(args.batches):
        lines = [
            f'{{"rider": "r{i % 50}", "ts": "2024-03-01T{batch % 24:02d}:{i % 60:02d}:00Z"}}'
            for i in range(200)
        ]
        (source / f"{batch:05d}.json").write_text("\n".join(lines))
    sessions = (
        spark.readStream.schema("rider STRING, ts TIMESTAMP")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .withWatermark("ts", "10 minutes")
        .groupBy("rider", F.session_window("ts", "30 minutes"))
        .count()
    )
    query = (
        sessions.writeStream.format("noop")
        .outputMode("append")
        .option("checkpointLocation", str(Path(home) / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and min(len(t) for t in times.values()) < args.batches:
        time.sleep(0.2)
    spark.stop()

    pyspark_ms = statistics.median(times["pyspark"]) * 1e3
    json_ms = statistics.median(times["json"]) * 1e3
    print(f"events: {len(times['pyspark'])} (PySpark's bridge), {len(times['json'])} (JSON)")
    print(
        f"PySpark's conversion: median {pyspark_ms:.1f} ms per event, "
        f"{sum(times['pyspark']):.2f} s for all"
    )
    total = sum(times["json"])
    print(f"JSON in one call:     median {json_ms:.1f} ms per event, {total:.2f} s for all")
    print(f"ratio (JSON / PySpark's): {json_ms / pyspark_ms:.3f}x")


if __name__ == "__main__":
    main()
