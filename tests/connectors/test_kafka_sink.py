"""The kappa_kafka sink: writes exactly what was sent, fails on failed deliveries, throttles."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kappaplus.connectors.kafka import read_kafka_stream
from kappaplus.connectors.kafka.sink import KafkaSinkOptions, TokenBucket
from kappaplus.core.errors import ConfigError, DataError
from kappaplus.local.broker import list_topics


def consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 30.0) -> list:  # type: ignore[type-arg]
    """Every record of ``topic`` with a plain consumer (all partitions, from offset 0)."""
    partitions = list_topics(bootstrap)[topic]
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    records = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            batch = [m for m in consumer.consume(1000, 0.5) if m.error() is None]
            records.extend(batch)
            if len(records) >= expected and not batch:
                break
    finally:
        consumer.close()
    return records


def test_batch_write_exact_records_keys_headers_and_topics(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic
) -> None:
    topic_a, topic_b = new_topic(partitions=2), new_topic()
    rows = [
        (
            f"k{i}",
            f"v{i}".encode(),
            [(f"h{i % 3}", str(i).encode())],
            topic_a if i % 4 else topic_b,
        )
        for i in range(2000)
    ]
    df = spark.createDataFrame(
        rows,
        "key string, value binary, headers array<struct<key:string,value:binary>>, topic string",
    ).repartition(3)
    (
        df.write.format("kappa_kafka")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .mode("append")
        .save()
    )
    got_a = consume_all(kafka_bootstrap, topic_a, 1500)
    got_b = consume_all(kafka_bootstrap, topic_b, 500)

    def as_tuple(m, topic):  # type: ignore[no-untyped-def]
        return (m.key().decode(), m.value(), [(k, v) for k, v in m.headers() or []], topic)

    sent = sorted((k, v, h, t) for k, v, h, t in rows)
    received = sorted([as_tuple(m, topic_a) for m in got_a] + [as_tuple(m, topic_b) for m in got_b])
    assert received == sent


def test_stream_write_roundtrip_with_topic_option(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    source, target = new_topic(partitions=2), new_topic()
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 50})
    for i in range(3000):
        producer.produce(source, value=f"e{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    df = read_kafka_stream(
        spark, bootstrap=kafka_bootstrap, subscribe=source, startingOffsets="earliest"
    )
    # A deterministic key (source partition and offset): a replay writes the same keys again,
    # so consumers can drop duplicates.
    out = df.selectExpr(
        "concat(topic, '/', CAST(partition AS STRING), '/', CAST(offset AS STRING)) AS key",
        "upper(CAST(value AS STRING)) AS value",
    )
    query = (
        out.writeStream.format("kappa_kafka")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("topic", target)
        .option("checkpointLocation", str(scratch / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None
    got = consume_all(kafka_bootstrap, target, 3000)
    assert sorted(m.value().decode() for m in got) == sorted(f"E{i}" for i in range(3000))
    keys = [m.key().decode() for m in got]
    assert len(set(keys)) == 3000 and all(k.startswith(f"{source}/") for k in keys)


def test_delivery_failure_fails_the_write(spark, new_topic) -> None:  # type: ignore[no-untyped-def]
    df = spark.createDataFrame([("x",)], "value string")
    with pytest.raises(Exception, match="not delivered|unacknowledged"):
        (
            df.write.format("kappa_kafka")
            .option("kafka.bootstrap.servers", "127.0.0.1:1")  # nothing listens there
            .option("kafka.message.timeout.ms", "1500")
            .option("topic", "nowhere")
            .mode("append")
            .save()
        )


def test_bad_input_is_named(spark, kafka_bootstrap: str) -> None:  # type: ignore[no-untyped-def]
    no_value = spark.createDataFrame([("k",)], "key string")
    with pytest.raises(Exception, match="'value'"):
        (
            no_value.write.format("kappa_kafka")
            .option("kafka.bootstrap.servers", kafka_bootstrap)
            .option("topic", "t")
            .mode("append")
            .save()
        )
    with pytest.raises(ConfigError, match="'topic'"):
        from kappaplus.connectors.kafka.sink import _check_schema

        schema = spark.createDataFrame([("v",)], "value string").schema
        _check_schema(schema, KafkaSinkOptions.parse({"kafka.bootstrap.servers": kafka_bootstrap}))
    with pytest.raises(DataError, match="'key'"):
        from kappaplus.connectors.kafka.sink import _check_schema

        schema = spark.createDataFrame([(1, "v")], "key int, value string").schema
        _check_schema(
            schema, KafkaSinkOptions.parse({"kafka.bootstrap.servers": "h:1", "topic": "t"})
        )
    with pytest.raises(ConfigError, match="maxRecordsPerSecond"):
        KafkaSinkOptions.parse(
            {"kafka.bootstrap.servers": "h:1", "topic": "t", "maxRecordsPerSecond": "fast"}
        )
    with pytest.raises(ConfigError, match="kafka.enable.idempotence"):
        KafkaSinkOptions.parse(
            {"kafka.bootstrap.servers": "h:1", "topic": "t", "kafka.enable.idempotence": "false"}
        )


def test_token_bucket_rate() -> None:
    bucket = TokenBucket(rate=500.0)
    started = time.monotonic()
    for _ in range(300):
        bucket.acquire()
    elapsed = time.monotonic() - started
    # 300 records at 500/s with a burst of 50: at least (300 - 50) / 500 = 0.5 s.
    assert elapsed >= 0.45


def test_throttle_limits_the_write_rate(spark, kafka_bootstrap: str, new_topic) -> None:  # type: ignore[no-untyped-def]
    topic = new_topic()
    limit, n = 200, 400
    df = spark.range(n).selectExpr("CAST(id AS STRING) AS value").coalesce(1)
    started = time.monotonic()
    (
        df.write.format("kappa_kafka")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("topic", topic)
        .option("maxRecordsPerSecond", str(limit))
        .mode("append")
        .save()
    )
    elapsed = time.monotonic() - started
    got = consume_all(kafka_bootstrap, topic, n)
    assert sorted(int(m.value()) for m in got) == list(range(n))
    stamps = sorted(m.timestamp()[1] for m in got)  # producer create time, ms
    span_s = (stamps[-1] - stamps[0]) / 1000
    burst = limit * 0.1
    # The records' own timestamps: n records cannot span less than (n - burst) / limit seconds.
    assert span_s >= (n - burst) / limit * 0.9, span_s
    assert (n - 1) / span_s <= limit * 1.25
    assert elapsed >= (n - burst) / limit * 0.9
