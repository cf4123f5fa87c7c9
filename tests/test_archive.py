"""The archiver: a Kafka topic into a Hive table exactly once, Kafka coordinates kept, bad
records dead-lettered with reasons; the archive is what a backfill reads."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from kappaplus.archive import ArchiveOptions, archive_job
from kappaplus.core.errors import ConfigError
from kappaplus.examples.generate import RIDER_EVENT_DDL, arrival_order, produce, rider_events
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job

START = "2024-03-01T00:00:00"


def _archive(spark: Any, options: ArchiveOptions) -> Any:
    job, config = archive_job(options)
    result = run_job(spark, job, config, RunOptions("stream", trigger="available-now"))
    assert result.status == "finished"
    return result


def test_archive_event_partitions_exactly_once(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, tmp_path: Path
) -> None:
    import uuid

    events = rider_events(riders=12, start=START, hours=5, seed=3, late_fraction=0.3)
    first, second = arrival_order(events)[:300], arrival_order(events)[300:]
    topic = new_topic(prefix="archive")
    table = f"lake_{uuid.uuid4().hex[:8]}"
    garbage = [b"{broken", b'{"event_id": "g", "rider_id": "r", "event_time": "yesterday"}']
    produce(kafka_bootstrap, topic, first, extra=garbage)
    options = ArchiveOptions(
        topic=topic,
        bootstrap_servers=kafka_bootstrap,
        table=table,
        event_time_column="event_time",
        schema=RIDER_EVENT_DDL,
        max_offsets_per_trigger=120,
        checkpoint_dir=tmp_path / "checkpoints",
    )
    _archive(spark, options)
    # second run resumes from the checkpoint: only the new records are added
    produce(kafka_bootstrap, topic, second)
    result = _archive(spark, options)
    assert result.job.name == f"archive-{topic}"

    spark.catalog.refreshTable(table)
    archived = spark.table(table)
    rows = archived.collect()
    assert len(rows) == len(events), "every good record once"
    assert {r.event_id for r in rows} == {e["event_id"] for e in events}
    offsets = sorted(r.kafka_offset for r in rows)
    assert len(offsets) == len(set(offsets)), "no duplicate offsets"
    dead = spark.table(f"{table}_dead_letters").collect()
    dead_offsets = {r.offset for r in dead}
    assert len(dead) == len(garbage) and all(r.reason for r in dead)
    assert {r.value for r in dead} == set(garbage)
    # every offset of the topic is either archived or dead-lettered, none both
    assert set(offsets) | dead_offsets == set(range(len(events) + len(garbage)))
    assert not set(offsets) & dead_offsets
    assert {r.kafka_topic for r in rows} == {topic} and {r.kafka_partition for r in rows} == {0}
    assert all(r.kafka_timestamp is not None for r in rows)
    # partitions are the event time's date and hour
    mismatched = archived.where(
        (F.col("dt") != F.date_format("event_time", "yyyy-MM-dd"))
        | (F.col("hr").cast("int") != F.hour("event_time"))
    ).count()
    assert mismatched == 0
    partitions = {r[0] for r in spark.sql(f"SHOW PARTITIONS {table}").collect()}
    hours = {(e["event_time"].strftime("%Y-%m-%d"), e["event_time"].hour) for e in events}
    assert partitions == {f"dt={d}/hr={h}" for d, h in hours}

    # the archive is a backfill input: the Hive source reads it back in event-time slices
    from kappaplus.connectors.hive import read_hive_stream

    got: list[Any] = []
    query = (
        read_hive_stream(
            spark,
            table,
            event_time_column="event_time",
            max_event_time_per_trigger="2 hours",
        )
        .writeStream.foreachBatch(lambda df, _: got.extend(df.select("event_id").collect()))
        .trigger(availableNow=True)
        .option("checkpointLocation", str(tmp_path / "read"))
        .start()
    )
    query.awaitTermination(300)
    assert sorted(r.event_id for r in got) == sorted(e["event_id"] for e in events)


def test_archive_arrival_partitions(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, tmp_path: Path
) -> None:
    import uuid

    events = rider_events(riders=4, start=START, hours=2, seed=4)
    topic, table = new_topic(prefix="arrival"), f"lake_arrival_{uuid.uuid4().hex[:8]}"
    produce(kafka_bootstrap, topic, arrival_order(events))
    _archive(
        spark,
        ArchiveOptions(
            topic=topic,
            bootstrap_servers=kafka_bootstrap,
            table=table,
            event_time_column="event_time",
            schema=RIDER_EVENT_DDL,
            partition_by="arrival",
            checkpoint_dir=tmp_path / "checkpoints",
        ),
    )
    archived = spark.table(table)
    assert archived.count() == len(events)
    # partitioned by the Kafka timestamp (produce time), not by the 2024 event times
    mismatched = archived.where(
        (F.col("dt") != F.date_format("kafka_timestamp", "yyyy-MM-dd"))
        | (F.col("hr").cast("int") != F.hour("kafka_timestamp"))
    ).count()
    assert mismatched == 0
    assert archived.where(F.col("dt") == "2024-03-01").count() == 0
    assert min(e["event_time"] for e in events) < max(e["event_time"] for e in events) - timedelta(
        minutes=30
    )


def test_archive_options_are_checked(tmp_path: Path) -> None:
    base: dict[str, Any] = {
        "topic": "t",
        "bootstrap_servers": "127.0.0.1:9092",
        "table": "lake.t",
        "event_time_column": "event_time",
        "schema": RIDER_EVENT_DDL,
    }
    with pytest.raises(ConfigError, match="partition_by"):
        ArchiveOptions(**{**base, "partition_by": "ingest"})
    with pytest.raises(ConfigError, match="schema"):
        ArchiveOptions(**{**base, "schema": None})
    with pytest.raises(ConfigError, match="schema_file"):
        ArchiveOptions(**{**base, "format": "avro", "schema_file": tmp_path / "missing.avsc"})
    with pytest.raises(ConfigError, match="event_time_column"):
        archive_job(ArchiveOptions(**{**base, "event_time_column": "ts"}))
    with pytest.raises(ConfigError, match="topic"):
        archive_job(ArchiveOptions(**{**base, "topic": "bad topic!"}))
