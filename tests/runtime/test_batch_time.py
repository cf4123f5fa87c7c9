"""The micro-batch's timestamp as a task reads it from the query's offset log is Spark's own
(``current_timestamp()`` of the batch), in every batch; a task of no known query is told
so, naming the directory (:mod:`kappaplus.runtime.binding.batch_time`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from kappaplus.core.errors import StateError
from kappaplus.runtime.binding.batch_time import MicroBatchTime


def stamp_each(root: str):  # type: ignore[no-untyped-def]
    """A ``mapInArrow`` function (a closure: pickled by value): each row with the batch
    time its task reads."""
    time = MicroBatchTime(root)

    def stamp(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        micros = time.micros(TaskContext.get())
        for batch in batches:
            read = pa.array([micros] * batch.num_rows, pa.int64())
            yield pa.RecordBatch.from_arrays([batch.column("n"), read], names=["n", "read"])

    return stamp


def test_a_task_reads_its_batchs_own_timestamp(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    incoming, root = tmp_path / "in", tmp_path / "run"
    incoming.mkdir()
    for i in range(3):  # one file per micro-batch
        (incoming / f"{i}.json").write_text(json.dumps({"n": i}) + "\n")
    stream = (
        spark.readStream.schema("n LONG")
        .option("maxFilesPerTrigger", 1)
        .json(str(incoming))
        .mapInArrow(stamp_each(str(root)), "n LONG, read LONG")
        .withColumn("spark", F.unix_micros(F.current_timestamp()))
    )
    seen: list[tuple[int, int, int, int]] = []

    def keep(df, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        seen.extend((batch_id, r["n"], r["read"], r["spark"]) for r in df.collect())

    query = (
        stream.writeStream.foreachBatch(keep)
        .option("checkpointLocation", str(root / "out"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert sorted(n for _, n, _, _ in seen) == [0, 1, 2]
    assert len({b for b, _, _, _ in seen}) == 3, seen  # three batches, three timestamps
    assert len({s for _, _, _, s in seen}) == 3, seen
    for batch_id, n, read, own in seen:
        assert read == own, (batch_id, n, read, own)


def test_a_task_of_no_known_query_is_told_where_it_looked(tmp_path: Path) -> None:
    class Context:
        def getLocalProperty(self, key: str) -> str:  # noqa: N802 - Spark's name
            return {"sql.streaming.queryId": "q-1", "streaming.sql.batchId": "4"}[key]

    with pytest.raises(StateError, match=f"{tmp_path}: no output checkpoint of query q-1"):
        MicroBatchTime(str(tmp_path)).micros(Context())
    with pytest.raises(StateError, match="runs no streaming query's batch"):
        MicroBatchTime(str(tmp_path)).micros(None)
