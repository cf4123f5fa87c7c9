"""What the embedded broker answers to ``offsets_for_times``, as the known limits
(``docs/limits.md``) and :mod:`kappaplus.connectors.kafka.alignment` say: the earliest
offset, whatever the time asked (a broker with a time index answers 0, 0, 3, 9 here).
That is why the bootstrap's Kafka phase and the alignment read record timestamps instead
of trusting the answer. When this test fails the broker has learnt its time index: say so
in ``docs/limits.md``."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition


def test_offsets_for_times_on_the_embedded_broker(kafka_bootstrap: str, new_topic) -> None:  # type: ignore[no-untyped-def]
    topic = new_topic(partitions=1, prefix="times")
    base = 1_700_000_000_000
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "log_level": 0})
    for i in range(10):
        producer.produce(topic, value=b"x", partition=0, timestamp=base + i * 10_000)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "probe", "log_level": 0})
    try:
        asked = [base - 1, base, base + 25_000, base + 90_000, base + 95_000]
        answers = [
            consumer.offsets_for_times([TopicPartition(topic, 0, t)], timeout=10)[0].offset
            for t in asked
        ]
    finally:
        consumer.close()
    assert answers == [0, 0, 0, 0, 0], answers
