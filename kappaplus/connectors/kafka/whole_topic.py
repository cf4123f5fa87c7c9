"""Reading a whole (small) topic on the driver, exactly to its end: the true end offsets of
every partition, also on brokers whose reported high watermark is only a lower bound
(tansu: ``docs/broker.md``), then every message up to them.

Used where a command reads a topic it owns from its beginning: the dead letters a replay
reads (:mod:`kappaplus.dead_letters.replay`) and the claims of Kafka targets
(:mod:`kappaplus.connectors.kafka.claims`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from kappaplus.core.errors import KafkaError, TopicNotFound


def true_ends(
    bootstrap: str, settings: Mapping[str, str], topic: str
) -> dict[int, tuple[int, int]]:
    """partition -> (earliest, end) of ``topic``: the true end, also on brokers whose
    reported high watermark is only a lower bound (tansu: docs/broker.md)."""
    from kappaplus.connectors.kafka.offsets import OffsetOracle
    from kappaplus.connectors.kafka.options import KafkaSourceOptions

    options = KafkaSourceOptions.parse(
        {
            "kafka.bootstrap.servers": bootstrap,
            "subscribe": topic,
            **{f"kafka.{k}": v for k, v in settings.items()},
        },
        streaming=False,
    )
    oracle = OffsetOracle(options)
    try:
        tps = oracle.topic_partitions()
        if not tps:
            raise TopicNotFound(
                f"topic {topic!r} has no partitions at {bootstrap} (does it exist? "
                "kappa topic create makes one)"
            )
        lows = oracle.earliest(tps)
        ends = oracle.end_offsets(tps)
        return {tp[1]: (lows[tp], ends[tp]) for tp in tps}
    finally:
        oracle.close()


def read_ranges(
    bootstrap: str,
    settings: Mapping[str, str],
    topic: str,
    ranges: Mapping[int, tuple[int, int]],
    *,
    group_prefix: str = "kappa-read",
) -> Iterator[Any]:
    """Every message of ``topic`` in ``ranges`` (partition -> [low, high)), in offset order
    per partition; KafkaError naming the partition and offset when one does not come. The
    consumer commits nothing (its group, ``<group_prefix>-<random>``, is never reused)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            **settings,
            "bootstrap.servers": bootstrap,
            "group.id": f"{group_prefix}-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": "false",
            "log_level": "0",
        }
    )
    try:
        for partition, (low, high) in sorted(ranges.items()):
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, partition, low)])
            position = low
            while position < high:
                message = consumer.poll(5.0)
                if message is None:
                    raise KafkaError(
                        f"topic {topic!r} partition {partition}: no message at offset "
                        f"{position} (end {high}) within 5 s"
                    )
                if message.error():
                    raise KafkaError(f"topic {topic!r}: {message.error()}")
                yield message
                position = int(message.offset() or 0) + 1
    finally:
        consumer.close()
