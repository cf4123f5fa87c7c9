"""Driver-side Kafka offset arithmetic: partition discovery, true end offsets, timestamp lookup.

Offsets are kept as ``{(topic, partition): offset}`` and serialized for Spark's checkpoint as
``{"topic": {"0": 123}}`` (:func:`to_json` / :func:`from_json`).

Why "true" end offsets: some Kafka-protocol brokers report a high watermark that is only a lower
bound (tansu 0.6 reports the base offset of the last record batch + 1, so 1,000 batched records
show a watermark of 1). :meth:`OffsetOracle.end_offsets` treats the reported watermark as a lower
bound and probes the real end by fetching from just before it until the client reports
end-of-partition; against Apache Kafka the probe returns the high watermark exactly (one small
fetch per partition), so the source is exact on both.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

from kappaplus.connectors.kafka.options import KafkaSourceOptions
from kappaplus.core.errors import KafkaError

log = logging.getLogger(__name__)

TopicPartitionKey = tuple[str, int]
Offsets = dict[TopicPartitionKey, int]

# librdkafka error codes (negative: local; positive: broker protocol errors).
PARTITION_EOF = -191
AUTO_OFFSET_RESET = -140
OFFSET_OUT_OF_RANGE = 1
TIMESTAMP_NOT_AVAILABLE = 0  # confluent_kafka.TIMESTAMP_NOT_AVAILABLE
QUIET_S = 0.25
"""A stream's end probe (``as_of_call``) takes a partition that has given records and then
none for this long as ended: what arrives later is the next batch's."""
STREAM_PROBE_S = 0.5
"""A stream's end probe (``as_of_call``) gives up after this long (a run's target probe after
``probe_timeout``): the embedded broker was seen to leave a partition's fetch unanswered for
2 s on a busy machine (cause not found), and the probe's answer is only a lower bound (what it
did not see is the next batch's)."""


def to_json(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    """``{(t, p): o}`` -> ``{"t": {"p": o}}`` with sorted keys (stable checkpoint text)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json(data: Mapping[str, Any] | None) -> Offsets:
    """``{"t": {"p": o}}`` -> ``{(t, p): o}``."""
    result: Offsets = {}
    for topic, parts in (data or {}).items():
        for partition, offset in parts.items():
            result[(str(topic), int(partition))] = int(offset)
    return result


def fair_split(available: Mapping[TopicPartitionKey, int], budget: int) -> Offsets:
    """Share ``budget`` rows across partitions max-min fairly (water filling).

    Each partition gets an equal share capped at what it has; what a small partition cannot use
    goes to the others. Deterministic (ties broken by topic-partition order) and the shares sum
    to ``min(budget, sum(available))`` exactly.

    >>> fair_split({("a", 0): 100, ("a", 1): 3}, 10)
    {('a', 1): 3, ('a', 0): 7}
    """
    shares: Offsets = {}
    pending = sorted((n, tp) for tp, n in available.items() if n > 0)
    remaining = max(0, budget)
    for tp, n in available.items():
        if n <= 0:
            shares[tp] = 0
    while pending and remaining > 0:
        equal = remaining // len(pending)
        smallest, tp = pending[0]
        if smallest <= equal:
            shares[tp] = smallest
            remaining -= smallest
            pending.pop(0)
            continue
        # Everyone left can take the equal share; spread the remainder in stable order.
        extra = remaining - equal * len(pending)
        for index, (_, key) in enumerate(sorted(pending, key=lambda item: item[1])):
            shares[key] = equal + (1 if index < extra else 0)
        remaining = 0
        pending = []
    for _, tp in pending:
        shares[tp] = 0
    return shares


class OffsetOracle:
    """Answers offset questions for one source on the driver; keeps one consumer open.

    Not thread-safe; Spark calls the stream reader's driver methods one at a time.
    """

    def __init__(self, options: KafkaSourceOptions, *, probe_timeout: float = 2.0) -> None:
        self.options = options
        self.probe_timeout = probe_timeout
        self._consumer: Any = None

    # -- client ------------------------------------------------------------------------------
    def consumer(self) -> Any:
        if self._consumer is None:
            from confluent_kafka import Consumer

            conf: dict[str, Any] = dict(self.options.client)
            conf.setdefault("group.id", "kappa-kafka-source")
            conf.setdefault("log_level", 3)
            conf.update(
                {
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "enable.partition.eof": True,
                    "auto.offset.reset": "error",
                    "fetch.wait.max.ms": 10,
                }
            )
            try:
                self._consumer = Consumer(conf)
            except Exception as exc:
                raise KafkaError(
                    f"cannot create a Kafka client for {self.options.describe()}: {exc}"
                ) from exc
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            finally:
                self._consumer = None

    # -- discovery ---------------------------------------------------------------------------
    def topic_partitions(self) -> list[TopicPartitionKey]:
        """The partitions the subscription covers right now (sorted)."""
        opts = self.options
        try:
            metadata = self.consumer().list_topics(timeout=30)
        except Exception as exc:
            raise KafkaError(f"cannot read metadata from {opts.describe()}: {exc}") from exc
        existing = {
            name: sorted(topic.partitions)
            for name, topic in metadata.topics.items()
            if topic.partitions
        }
        found: list[TopicPartitionKey] = []
        if opts.assign:
            found = [tp for tp in opts.assign if tp[1] in existing.get(tp[0], [])]
        elif opts.subscribe:
            found = [(t, p) for t in opts.subscribe for p in existing.get(t, [])]
        else:
            pattern = re.compile(opts.subscribe_pattern or "")
            found = [
                (t, p)
                for t, parts in existing.items()
                if not t.startswith("__") and pattern.fullmatch(t)
                for p in parts
            ]
        return sorted(found)

    # -- offsets -----------------------------------------------------------------------------
    def watermarks(
        self, tps: Iterable[TopicPartitionKey]
    ) -> dict[TopicPartitionKey, tuple[int, int]]:
        """``(low, reported high)`` per partition, as the broker answers ListOffsets."""
        from confluent_kafka import TopicPartition

        result = {}
        for topic, partition in tps:
            try:
                low, high = self.consumer().get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=30
                )
            except Exception as exc:
                raise KafkaError(
                    f"cannot read offsets of {topic}-{partition} from "
                    f"{self.options.bootstrap}: {exc}"
                ) from exc
            result[(topic, partition)] = (int(low), int(high))
        return result

    def earliest(self, tps: Iterable[TopicPartitionKey]) -> Offsets:
        return {tp: low for tp, (low, _) in self.watermarks(tps).items()}

    def end_offsets(
        self,
        tps: Iterable[TopicPartitionKey],
        known: Mapping[TopicPartitionKey, int] | None = None,
        *,
        as_of_call: bool = False,
    ) -> Offsets:
        """The offset after the last record of each partition (exact, see the module doc).

        ``known`` are offsets already known to exist (e.g. the start of this batch); the probe
        starts from the larger of those and the reported watermark, minus one.

        ``as_of_call``: the end as of this call, for a stream's next micro-batch. Without it
        the probe reads on until the end of each partition, which under steady production
        keeps moving: it chased the producer for its whole time bound (2 s of each 5-s
        trigger at 11,000 records/s, reading every new record on the driver). With it, a
        partition's probe stops at its first record stamped after the call began (that one
        and the rest are the next batch's); so a record stamped ahead by its producer's clock
        waits one trigger more, which is why a run's fixed target (``availableNow``) does
        not use it.
        """
        since_ms = int(time.time() * 1000) if as_of_call else None
        tps = list(tps)
        marks = self.watermarks(tps)
        known = known or {}
        probe: Offsets = {}
        ends: Offsets = {}
        for tp in tps:
            low, high = marks[tp]
            ends[tp] = high
            position = max(high, known.get(tp, 0)) - 1
            if position >= low and position >= 0:
                probe[tp] = position
        if probe:
            seen = self._probe(probe, since_ms)
            # A position past the real end (the partition lost data, or was recreated) returns
            # nothing: probe those again from the reported watermark.
            retry = {
                tp: marks[tp][1] - 1
                for tp, position in probe.items()
                if tp not in seen and position > marks[tp][1] - 1 >= marks[tp][0]
            }
            if retry:
                seen.update(self._probe(retry, since_ms))
            for tp, end in seen.items():
                ends[tp] = max(ends[tp], end)
        return ends

    def _probe(self, positions: Offsets, since_ms: int | None = None) -> Offsets:
        """Fetch from each position until end-of-partition; the next offset after what exists.

        With ``since_ms``, a partition is also done at its first record stamped after
        ``since_ms`` (epoch ms): the offset of that record; and once it has given a record
        and then nothing for :data:`QUIET_S`; and at :data:`STREAM_PROBE_S` at the latest."""
        from confluent_kafka import TopicPartition

        consumer = self.consumer()
        consumer.assign([TopicPartition(t, p, o) for (t, p), o in positions.items()])
        ends: Offsets = {}
        done: set[TopicPartitionKey] = set()
        last_seen: dict[TopicPartitionKey, float] = {}
        bound = self.probe_timeout if since_ms is None else min(self.probe_timeout, STREAM_PROBE_S)
        deadline = time.monotonic() + bound
        try:
            while len(done) < len(positions) and time.monotonic() < deadline:
                for message in consumer.consume(10_000, 0.05):
                    tp = (message.topic(), message.partition())
                    if tp not in positions or tp in done:
                        continue
                    error = message.error()
                    if error is None:
                        last_seen[tp] = time.monotonic()
                        kind, stamp = message.timestamp()
                        if (
                            since_ms is not None
                            and kind != TIMESTAMP_NOT_AVAILABLE
                            and stamp > since_ms
                        ):
                            ends[tp] = max(ends.get(tp, 0), message.offset())
                            done.add(tp)
                        else:
                            ends[tp] = max(ends.get(tp, 0), message.offset() + 1)
                    elif error.code() == PARTITION_EOF:
                        ends[tp] = max(ends.get(tp, 0), message.offset())
                        done.add(tp)
                    elif error.code() in (AUTO_OFFSET_RESET, OFFSET_OUT_OF_RANGE):
                        done.add(tp)  # nothing at that position: the reported watermark stands
                if since_ms is not None:
                    quiet = time.monotonic() - QUIET_S
                    done.update(tp for tp, at in last_seen.items() if at < quiet)
        finally:
            consumer.unassign()
        return ends

    def offsets_for_timestamp(
        self,
        tps: Iterable[TopicPartitionKey],
        timestamp_ms: int,
        ends: Mapping[TopicPartitionKey, int],
    ) -> Offsets:
        """Per partition, the first offset whose record timestamp is >= ``timestamp_ms``.

        The broker's answer (ListOffsets by time) is taken as a lower bound and refined by
        scanning forward; a partition with no such record gets its end offset (like Spark's
        ``latest`` for a timestamp after the last record).
        """
        from confluent_kafka import TopicPartition

        tps = list(tps)
        if not tps:
            return {}
        try:
            answers = self.consumer().offsets_for_times(
                [TopicPartition(t, p, timestamp_ms) for t, p in tps], timeout=30
            )
        except Exception as exc:
            raise KafkaError(
                f"cannot look up offsets for timestamp {timestamp_ms} on "
                f"{self.options.describe()}: {exc}"
            ) from exc
        result: Offsets = {}
        scan: Offsets = {}
        lows = self.earliest(tps)
        for answer in answers:
            tp = (answer.topic, answer.partition)
            if answer.offset < 0 or answer.offset >= ends[tp]:
                result[tp] = ends[tp]
            else:
                scan[tp] = max(answer.offset, lows[tp])
        if scan:
            result.update(self._scan_for_timestamp(scan, timestamp_ms, ends))
        return result

    def _scan_for_timestamp(
        self, positions: Offsets, timestamp_ms: int, ends: Mapping[TopicPartitionKey, int]
    ) -> Offsets:
        from confluent_kafka import TopicPartition

        consumer = self.consumer()
        consumer.assign([TopicPartition(t, p, o) for (t, p), o in positions.items()])
        found: Offsets = {}
        deadline = time.monotonic() + self.options.poll_timeout_ms / 1000
        try:
            while len(found) < len(positions):
                if time.monotonic() > deadline:
                    missing = sorted(set(positions) - set(found))
                    raise KafkaError(
                        f"timed out scanning {missing} for startingTimestamp {timestamp_ms}"
                    )
                for message in consumer.consume(10_000, 0.1):
                    tp = (message.topic(), message.partition())
                    if tp not in positions or tp in found:
                        continue
                    error = message.error()
                    if error is None:
                        if message.timestamp()[1] >= timestamp_ms:
                            found[tp] = message.offset()
                        elif message.offset() + 1 >= ends[tp]:
                            found[tp] = ends[tp]
                    elif error.code() in (PARTITION_EOF, AUTO_OFFSET_RESET, OFFSET_OUT_OF_RANGE):
                        found[tp] = ends[tp]
                if len(found) < len(positions):
                    still = [TopicPartition(t, p) for t, p in positions if (t, p) in found]
                    if still:
                        consumer.pause(still)
        finally:
            consumer.unassign()
        return found
