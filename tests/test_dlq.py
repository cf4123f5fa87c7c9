"""Dead letters to a Kafka topic and a Hive table; end-to-end decode of a Kafka stream."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from kappaplus.codecs import DecoderSpec, decode_kafka
from kappaplus.core.errors import ConfigError, DataError
from kappaplus.dead_letters.targets import (
    DeadLetterTarget,
    dead_letter_batch,
    decoded_batch_writer,
    dlq_key,
    parse_dlq_message,
    write_dead_letters,
)

EVENT_DDL = "rider_id STRING NOT NULL, fare DOUBLE, ts TIMESTAMP"
BASE = datetime(2024, 6, 1, tzinfo=UTC)


def consume_all(bootstrap: str, topic: str, partitions: int = 1, idle: float = 2.0) -> list[Any]:
    """Every message of ``topic``: read until nothing arrives for ``idle`` seconds (the
    embedded broker's high watermark is not exact, so it is not trusted)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[Any] = []
    last = time.monotonic()
    deadline = last + 60
    try:
        while time.monotonic() - last < idle and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                continue
            out.append(msg)
            last = time.monotonic()
    finally:
        consumer.close()
    return out


# ---------------------------------------------------------------------------------------
# target validation
# ---------------------------------------------------------------------------------------


def test_target_validation_and_secret_free_repr() -> None:
    with pytest.raises(ConfigError, match="a dead letter target needs a kafka_topic"):
        DeadLetterTarget()
    with pytest.raises(ConfigError, match=r"option 'kafka_bootstrap' = None"):
        DeadLetterTarget(kafka_topic="trips.dlq")
    with pytest.raises(ConfigError, match=r"option 'kafka_topic' = 'bad topic!'"):
        DeadLetterTarget(kafka_topic="bad topic!", kafka_bootstrap="b:9092")
    with pytest.raises(ConfigError, match=r"option 'hive_table' = 'a.b.c.d'"):
        DeadLetterTarget(hive_table="a.b.c.d")
    target = DeadLetterTarget(
        kafka_topic="trips.dlq",
        kafka_bootstrap="b:9092",
        kafka_settings={"sasl.password": "hunter2", "security.protocol": "SASL_SSL"},
    )
    assert "hunter2" not in repr(target) and "sasl.password" in repr(target)
    assert target.producer_config()["sasl.password"] == "hunter2"
    assert dlq_key("trips", 3, 42) == b"trips/3/42"


# ---------------------------------------------------------------------------------------
# the plain Arrow function
# ---------------------------------------------------------------------------------------


def test_write_arrow_dead_letters_to_kafka_and_hive(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(prefix="dlq")
    table = f"dlq_arrow_{uuid.uuid4().hex[:8]}"
    target = DeadLetterTarget(kafka_topic=topic, kafka_bootstrap=kafka_bootstrap, hive_table=table)
    now = datetime(2024, 6, 1, 23, 59, tzinfo=UTC)
    batch = dead_letter_batch(
        values=[b'{"a": 1}', b"\x00\x01", None],
        reasons=["event time 'ts' is null"] * 2 + ["value is null (tombstone record)"],
        job="backfill",
        topic="warehouse.trips",
        offsets=[10, 11, 12],
        dead_letter_time=now,
    )
    first = write_dead_letters(batch, target, spark=spark, batch_key="hive-src-7")
    assert (first.kafka, first.hive) == (3, 3)
    # replaying the same batch key replaces the Hive rows; Kafka gets re-deliveries that
    # share their keys
    again = write_dead_letters(batch, target, spark=spark, batch_key="hive-src-7")
    assert (again.kafka, again.hive) == (3, 3)
    rows = spark.sql(f"SELECT offset, value, reason, job, dlq_batch FROM {table}").collect()
    assert sorted(r.offset for r in rows) == [10, 11, 12]
    assert {r.dlq_batch for r in rows} == {"hive-src-7"}
    assert {r.offset: (r.value and bytes(r.value)) for r in rows} == {
        10: b'{"a": 1}',
        11: b"\x00\x01",
        12: None,
    }
    messages = consume_all(kafka_bootstrap, topic)
    keys = Counter(m.key() for m in messages)
    assert keys == {b"warehouse.trips//10": 2, b"warehouse.trips//11": 2, b"warehouse.trips//12": 2}
    parsed = parse_dlq_message(messages[1].value())
    assert parsed["value"] == b"\x00\x01" and parsed["dead_letter_time"] == now
    assert parsed["reason"] == "event time 'ts' is null" and parsed["job"] == "backfill"

    with pytest.raises(DataError, match=r"lack columns \['reason'"):
        write_dead_letters(batch.drop_columns(["reason"]), target)
    with pytest.raises(ConfigError, match=r"option 'spark' = None"):
        write_dead_letters(batch, DeadLetterTarget(hive_table=table))


# ---------------------------------------------------------------------------------------
# end to end: Kafka topic -> Kafka source -> decode -> good events + DLQ (Kafka + Hive)
# ---------------------------------------------------------------------------------------


def make_records(n: int) -> list[tuple[bytes, dict[str, Any] | None, str | None]]:
    """(value, expected event or None, expected reason or None) for n records."""
    out: list[tuple[bytes, dict[str, Any] | None, str | None]] = []
    for i in range(n):
        ts = BASE + timedelta(seconds=i)
        kind = i % 6
        if kind == 1:
            out.append((b'{"rider_id": "r%d", "fare": ' % i, None, "invalid JSON at char "))
        elif kind == 3:
            body = {"rider_id": f"r{i}", "ts": "yesterday"}
            out.append(
                (json.dumps(body).encode(), None, "field 'ts': expected timestamp, got 'yesterday'")
            )
        elif kind == 5:
            body = {"fare": 1.0, "ts": ts.isoformat()}
            out.append((json.dumps(body).encode(), None, "missing required field 'rider_id'"))
        else:
            event = {"rider_id": f"r{i}", "fare": i / 4, "ts": ts}
            raw = {
                "rider_id": f"r{i}",
                "fare": i / 4,
                "ts": ts.isoformat() if i % 2 else int(ts.timestamp() * 1000),
            }
            out.append((json.dumps(raw).encode(), event, None))
    return out


def produce_records(
    bootstrap: str, topic: str, records: list[tuple[bytes, Any, Any]], partitions: int
) -> dict[tuple[int, int], int]:
    """Produce; return {(partition, offset): record index} from the delivery reports."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    placed: dict[tuple[int, int], int] = {}

    def report(index: int) -> Callable[[Any, Any], None]:
        def on_delivery(err: Any, msg: Any) -> None:
            assert err is None, err
            placed[(msg.partition(), msg.offset())] = index

        return on_delivery

    for i, (value, _, _) in enumerate(records):
        producer.produce(
            topic,
            key=f"k{i}".encode(),
            value=value,
            partition=i % partitions,
            on_delivery=report(i),
        )
    assert producer.flush(30) == 0
    assert len(placed) == len(records)
    return placed


def replay_last_batch(checkpoint: Path) -> int:
    """Forget that the last batch was committed, so a restart runs it again."""
    commits = checkpoint / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    crc = commits / f".{last}.crc"
    if crc.exists():
        crc.unlink()
    return last


def test_kafka_stream_decode_to_good_sink_and_dlq_with_replay(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic: Callable[..., str], scratch: Path
) -> None:
    kafka = pytest.importorskip("kappaplus.connectors.kafka")
    partitions = 2
    source_topic = new_topic(partitions=partitions, prefix="trips")
    dlq_topic = new_topic(prefix="trips-dlq")
    table = f"dlq_e2e_{uuid.uuid4().hex[:8]}"
    records = make_records(36)
    placed = produce_records(kafka_bootstrap, source_topic, records, partitions)

    spec = DecoderSpec(format="json", schema=EVENT_DDL, event_time="ts", event_time_unit="ms")
    target = DeadLetterTarget(
        kafka_topic=dlq_topic, kafka_bootstrap=kafka_bootstrap, hive_table=table
    )
    good_dir = scratch / "good"
    checkpoint = scratch / "ckpt"

    def write_good(events, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        events.write.mode("overwrite").parquet(str(good_dir / f"batch={batch_id}"))

    def run() -> list[dict[str, int]]:
        stream = kafka.read_kafka_stream(
            spark,
            bootstrap=kafka_bootstrap,
            subscribe=source_topic,
            startingOffsets="earliest",
            maxOffsetsPerTrigger=20,
        )
        decoded = decode_kafka(stream, spec, metrics="trips_decode")
        handler = decoded_batch_writer(
            target, job_name="trips-job", sink_id="trips-e2e", write_good=write_good
        )
        query = (
            decoded.writeStream.foreachBatch(handler)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        try:
            assert query.awaitTermination(300), "the query did not finish"
            assert query.exception() is None
            return [
                {"batch": p["batchId"], **p["observedMetrics"]["trips_decode"].asDict()}
                for p in query.recentProgress
                if p["numInputRows"] > 0
            ]
        finally:
            query.stop()

    first = run()
    expected_good = [event for _, event, _ in records if event is not None]
    expected_dead = {pos: idx for pos, idx in placed.items() if records[idx][1] is None}
    # observed counts per batch add up to the ground truth
    assert len(first) >= 2  # maxOffsetsPerTrigger=20 over 36 records
    assert sum(m["records"] for m in first) == len(records)
    assert sum(m["good"] for m in first) == len(expected_good)
    assert sum(m["dead"] for m in first) == len(expected_dead)
    assert all(m["records"] == m["good"] + m["dead"] for m in first)

    # replay the last batch: the Hive table and the good sink must not change
    replayed = replay_last_batch(checkpoint)
    second = run()
    assert [m["batch"] for m in second] == [replayed]
    assert second[0] == next(m for m in first if m["batch"] == replayed)

    good = spark.read.parquet(str(good_dir)).select("rider_id", "fare", "ts")
    got_good = sorted(good.toArrow().to_pylist(), key=lambda r: r["rider_id"])
    assert got_good == sorted(expected_good, key=lambda r: r["rider_id"])

    hive = spark.sql(f"SELECT topic, partition, offset, value, reason, job FROM {table}")
    rows = hive.collect()
    assert len(rows) == len(expected_dead)  # no duplicates after the replay
    by_position = {(r.partition, r.offset): r for r in rows}
    assert set(by_position) == set(expected_dead)
    for pos, idx in expected_dead.items():
        value, _, reason = records[idx]
        row = by_position[pos]
        assert bytes(row.value) == value and row.topic == source_topic
        assert row.reason.startswith(reason) and row.job == "trips-job"

    # Kafka DLQ: every dead letter, keyed by source position; only the replayed batch's
    # dead letters are delivered twice, with the same key
    messages = consume_all(kafka_bootstrap, dlq_topic)
    keys = Counter(m.key() for m in messages)
    expected_keys = {dlq_key(source_topic, p, o) for p, o in expected_dead}
    assert set(keys) == expected_keys
    replay_dead = next(m for m in first if m["batch"] == replayed)["dead"]
    assert len(messages) == len(expected_dead) + replay_dead
    assert sum(1 for c in keys.values() if c == 2) == replay_dead
    for msg in messages:
        parsed = parse_dlq_message(msg.value())
        idx = expected_dead[(parsed["partition"], parsed["offset"])]
        assert parsed["value"] == records[idx][0]
        assert parsed["key"] == f"k{idx}".encode()
        assert parsed["reason"].startswith(str(records[idx][2]))
