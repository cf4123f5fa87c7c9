"""The run's progress comes from Spark's listener bus: every batch's event arrives once."""

from __future__ import annotations

import time

from kappaplus.runtime.observe.progress import QueryStats
from kappaplus.runtime.observe.progress_events import ProgressListener


def test_listener_hands_over_every_batch_once(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    listener = ProgressListener()
    spark.streams.addListener(listener)
    source = tmp_path / "in"
    source.mkdir()
    query = (
        spark.readStream.schema("n LONG")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .queryName("progress_events_test")
        .start()
    )
    try:
        for i in range(3):
            (source / f"{i}.json").write_text("\n".join(f'{{"n": {n}}}' for n in range(i + 1)))
            query.processAllAvailable()
        stats = QueryStats("q")
        deadline = time.monotonic() + 30
        while stats.input_rows < 6 and time.monotonic() < deadline:
            for entry in listener.take("progress_events_test"):
                stats.add(entry)
            time.sleep(0.2)
    finally:
        query.stop()
        spark.streams.removeListener(listener)
    assert stats.input_rows == 1 + 2 + 3, "every batch's rows, from the listener alone"
    assert stats.batches == 3


def test_a_query_end_wakes_the_waiting_loop(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The run's loop sleeps in :meth:`ProgressListener.wait` between looks; a query that
    ends must cut the sleep short (the end of a backfill waited up to a poll interval)."""
    listener = ProgressListener()
    spark.streams.addListener(listener)
    source = tmp_path / "in"
    source.mkdir()
    (source / "0.json").write_text('{"n": 1}\n{"n": 2}\n')
    try:
        listener.arm()
        assert listener.wait(0.05) is False  # nothing ended yet
        query = (
            spark.readStream.schema("n LONG")
            .json(str(source))
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "cp"))
            .queryName("progress_events_end")
            .trigger(availableNow=True)
            .start()
        )
        # woken by the query's end, not by the timeout (which would return False)
        assert listener.wait(120) is True
        query.awaitTermination(30)
        assert not query.isActive
        listener.arm()
        assert listener.wait(0.05) is False  # armed again: the old end is forgotten
    finally:
        spark.streams.removeListener(listener)
