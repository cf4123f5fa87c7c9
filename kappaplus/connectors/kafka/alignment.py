"""Catch-up aligned across partitions: every micro-batch reads the same slice of record time.

Why. Spark keeps one watermark per source: the largest event time seen, less the delay. A
query behind on a multi-partition topic that reads ``maxOffsetsPerTrigger`` records split
evenly across partitions reads each partition at its own pace in *time*: a dense partition
advances minutes per batch, a sparse one days. The sparse partition's rows then set the
watermark and the dense partitions' rows, read later, arrive behind it and are dropped as
late (measured on real data: ``docs/benchmarks.md``).

What. While the query is behind (more records available than the batch limit), the batch
ends, on every partition, at the first record stamped at or after one common cut ``T``:
the batch holds the records of ``[previous cut, T)`` of every partition, as one arrival
order would. ``T`` is the latest cut whose batch holds at most ``maxOffsetsPerTrigger``
records in all. Once the whole backlog fits in a batch the query reads everything
available, as before.

How. The driver learns record timestamps by reading them (``RecordTimes``): the records
ahead of the batch start are fetched once, cached between batches, and read further only
on the partitions whose unknown timestamps bound the cut (a few times the fair share per
partition at first). Brokers answer ``offsets_for_times`` from their time index, but not
all (the embedded broker answers the earliest offset for any time), so the answer cannot
be trusted blindly; reading is right on every broker, at the cost of a second read of the
backlog's records by the driver (measured in ``docs/benchmarks.md``).

Limits, as the rule is stated:

- Timestamps are Kafka record timestamps (``LogAppendTime`` or the producer's
  ``CreateTime``), not decoded event times; where they differ the alignment is as good as
  the record timestamp is a proxy of event time.
- Timestamps out of order within a partition (producers' clocks, retries): a partition's
  batch ends at its first record stamped at or after the cut, so a record stamped later
  than its successors holds them back until the cut passes it (a prefix maximum); records
  that then arrive stamped before the previous cut are counted and logged as out of order:
  they are the rows at risk of being late.
- A spike, a record stamped more than ``alignmentMaxSkew`` after both its partition's
  previous records and its successor (a producer's clock far ahead for one record), does
  not hold its partition back: the prefix maximum skips it, it is delivered in order with
  its neighbours and counted as skewed. A step up that the following records keep (a
  partition quiet for a while) is no spike.
- A partition whose records carry no timestamp (``-1``) cannot be aligned: it is read at
  its fair share of the batch, said once in the log.

>>> import numpy as np
>>> times = StaticTimes({("t", 0): ([0, 1, 2, 3], [10, 20, 30, 40]),
...                      ("t", 1): ([0, 1, 2, 3], [10, 11, 12, 13])})
>>> plan = align({("t", 0): 0, ("t", 1): 0}, {("t", 0): 4, ("t", 1): 4}, 4, times)
>>> plan.ends, plan.cut_ms
({('t', 0): 1, ('t', 1): 3}, 13)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from kappaplus.connectors.kafka.offsets import (
    AUTO_OFFSET_RESET,
    OFFSET_OUT_OF_RANGE,
    Offsets,
    TopicPartitionKey,
    fair_split,
)
from kappaplus.core.errors import KafkaError

log = logging.getLogger(__name__)

DEFAULT_MAX_SKEW_MS = 24 * 3600 * 1000
"""A stamp this far after its partition's previous one does not hold the partition back."""

_MAX_ROUNDS = 12  # reads to widen the known timestamps before a cut is taken as it is


class TimesSource(Protocol):
    """Record offsets and timestamps of a partition from ``start`` (ascending offsets)."""

    def times(
        self, tp: TopicPartitionKey, start: int, at_least: int, until: int
    ) -> tuple[np.ndarray, np.ndarray, bool]:
        """At least ``at_least`` records of ``[start, until)`` (fewer only if the range has
        fewer): ``(offsets, stamps_ms, complete)``, ``complete`` when they reach ``until``."""
        ...


@dataclass
class AlignedBatch:
    """The end offsets of one batch and what the alignment saw."""

    ends: Offsets
    cut_ms: int | None  # None: everything available (caught up) or nothing timed
    out_of_order: dict[TopicPartitionKey, int] = field(default_factory=dict)
    skewed: dict[TopicPartitionKey, int] = field(default_factory=dict)
    untimed: list[TopicPartitionKey] = field(default_factory=list)
    fallback: bool = False  # the smallest cut held more than the limit: fair split of it
    bound: list[TopicPartitionKey] = field(default_factory=list)
    """Partitions whose timestamps not yet read kept the cut from going further."""


def _held_back(stamps: np.ndarray, max_skew_ms: int) -> tuple[np.ndarray, int]:
    """The time each record waits for: the running maximum of the stamps, except that a
    spike (a stamp more than ``max_skew_ms`` after the running maximum *and* after the next
    record's stamp) does not raise it. A step up that the next records keep (a partition
    quiet for a while) raises it as usual. Returns the array and how many spikes there were.
    """
    values = stamps.tolist()
    out = np.empty_like(stamps)
    skipped = 0
    current = None
    for index, stamp in enumerate(values):
        if current is None:
            current = stamp
        elif stamp > current:
            following = values[index + 1] if index + 1 < len(values) else None
            spike = (
                stamp - current > max_skew_ms
                and following is not None
                and stamp - following > max_skew_ms
            )
            if spike:
                skipped += 1
            else:
                current = stamp
        out[index] = current
    return out, skipped


def align(
    bases: Mapping[TopicPartitionKey, int],
    targets: Mapping[TopicPartitionKey, int],
    limit: int,
    times: TimesSource,
    *,
    previous_cut_ms: int | None = None,
    max_skew_ms: int = DEFAULT_MAX_SKEW_MS,
) -> AlignedBatch:
    """End offsets of a batch of at most ``limit`` records from ``bases`` towards ``targets``,
    cut at one record time on every partition (see the module docstring)."""
    available = {tp: max(0, targets[tp] - bases[tp]) for tp in targets}
    total = sum(available.values())
    if total <= limit:
        return AlignedBatch(ends=dict(targets), cut_ms=None)
    active = sorted(tp for tp, n in available.items() if n > 0)
    share = max(1, 2 * limit // max(1, len(active)))
    wanted = {tp: min(available[tp], share) for tp in active}
    known: dict[TopicPartitionKey, tuple[np.ndarray, np.ndarray, bool]] = {}
    untimed: list[TopicPartitionKey] = []
    batch = AlignedBatch(ends=dict(bases), cut_ms=None)
    for _ in range(_MAX_ROUNDS):
        for tp in active:
            if tp in untimed:
                continue
            have = known.get(tp)
            if have is None or (not have[2] and len(have[0]) < wanted[tp]):
                known[tp] = times.times(tp, bases[tp], wanted[tp], targets[tp])
                offsets, stamps, _ = known[tp]
                if len(stamps) and stamps[0] < 0:
                    untimed.append(tp)
        timed = [tp for tp in active if tp not in untimed]
        untimed_shares = fair_split({tp: available[tp] for tp in active}, limit) if untimed else {}
        budget = limit - sum(untimed_shares.get(tp, 0) for tp in untimed)
        batch = _cut(bases, targets, timed, known, budget, max_skew_ms)
        for tp in untimed:
            batch.ends[tp] = bases[tp] + untimed_shares[tp]
        batch.untimed = sorted(untimed)
        widen = [tp for tp in batch.bound if len(known[tp][0]) < limit]
        if not widen:
            break
        for tp in widen:
            wanted[tp] = min(available[tp], max(2 * len(known[tp][0]), 1))
    if previous_cut_ms is not None:
        for tp in batch.ends:
            if tp in known and tp not in untimed:
                offsets, stamps, _ = known[tp]
                taken = offsets < batch.ends[tp]
                late = int(np.count_nonzero(stamps[taken] < previous_cut_ms))
                if late:
                    batch.out_of_order[tp] = late
    return batch


def _cut(
    bases: Mapping[TopicPartitionKey, int],
    targets: Mapping[TopicPartitionKey, int],
    timed: list[TopicPartitionKey],
    known: Mapping[TopicPartitionKey, tuple[np.ndarray, np.ndarray, bool]],
    budget: int,
    max_skew_ms: int,
) -> AlignedBatch:
    """The latest cut over the timed partitions' known timestamps holding at most ``budget``
    records (``bound``: the partitions not read to the end that limited it)."""
    ends: Offsets = {tp: bases[tp] for tp in targets}
    waits: dict[TopicPartitionKey, np.ndarray] = {}
    skewed: dict[TopicPartitionKey, int] = {}
    for tp in timed:
        stamps = known[tp][1]
        waits[tp], skipped = _held_back(stamps, max_skew_ms)
        if skipped:
            skewed[tp] = skipped
    incomplete = [tp for tp in timed if not known[tp][2]]
    # a cut past an incomplete partition's last known wait could take records not yet seen
    ceiling = min((int(waits[tp][-1]) for tp in incomplete if len(waits[tp])), default=None)
    candidates = np.unique(np.concatenate([w for w in waits.values()] or [np.empty(0, "int64")]))
    if ceiling is not None:
        candidates = candidates[candidates <= ceiling]

    def taken(cut: int | None) -> dict[TopicPartitionKey, int]:
        if cut is None:
            return {tp: len(waits[tp]) for tp in timed}
        return {tp: int(np.searchsorted(waits[tp], cut, side="left")) for tp in timed}

    chosen: int | None = None
    counts: dict[TopicPartitionKey, int] = {tp: 0 for tp in timed}
    if ceiling is None:
        everything = taken(None)
        if sum(everything.values()) <= budget:
            for tp in timed:
                ends[tp] = targets[tp]
            return AlignedBatch(ends=ends, cut_ms=None, skewed=skewed)
    # binary search: the largest candidate whose batch fits the budget
    lo, hi = 0, len(candidates) - 1
    best = -1
    while lo <= hi:
        mid = (lo + hi) // 2
        if sum(taken(int(candidates[mid])).values()) <= budget:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    fallback = False
    if best >= 0:
        chosen = int(candidates[best])
        counts = taken(chosen)
    if sum(counts.values()) == 0:
        # even the earliest step holds more than the budget (many records share a stamp):
        # split that step fairly so the query still moves
        nxt = int(candidates[1]) if len(candidates) > 1 else None
        step = taken(nxt) if nxt is not None else taken(None)
        counts = fair_split(step, budget)
        chosen = nxt
        fallback = True
    for tp in timed:
        offsets = known[tp][0]
        n = counts[tp]
        if n < len(offsets):
            ends[tp] = int(offsets[n])
        elif known[tp][2]:
            ends[tp] = targets[tp]
        else:
            ends[tp] = int(offsets[-1]) + 1 if len(offsets) else bases[tp]
    bound = []
    if ceiling is not None and best == len(candidates) - 1 and not fallback:
        # the budget was not used up: widen the partitions whose unknown stamps stopped it
        bound = [tp for tp in incomplete if int(waits[tp][-1]) == ceiling]
    return AlignedBatch(ends=ends, cut_ms=chosen, skewed=skewed, fallback=fallback, bound=bound)


class StaticTimes:
    """Timestamps given up front (tests and examples)."""

    def __init__(self, data: Mapping[TopicPartitionKey, tuple[list[int], list[int]]]) -> None:
        self.data = {
            tp: (np.asarray(o, dtype="int64"), np.asarray(s, dtype="int64"))
            for tp, (o, s) in data.items()
        }

    def times(
        self, tp: TopicPartitionKey, start: int, at_least: int, until: int
    ) -> tuple[np.ndarray, np.ndarray, bool]:
        offsets, stamps = self.data[tp]
        keep = (offsets >= start) & (offsets < until)
        offsets, stamps = offsets[keep], stamps[keep]
        return offsets, stamps, True


class RecordTimes:
    """Kafka record timestamps read by the driver, cached per partition between batches.

    Reads with its own consumer (assigned, never a group member); what lies before a
    partition's batch start is forgotten on the next call.
    """

    def __init__(self, client: Mapping[str, Any], poll_timeout_ms: int, what: str) -> None:
        self.client = dict(client)
        self.poll_timeout_ms = poll_timeout_ms
        self.what = what
        self._consumer: Any = None
        self._cache: dict[TopicPartitionKey, tuple[np.ndarray, np.ndarray, int]] = {}
        self.records_read = 0
        self.seconds = 0.0

    def consumer(self) -> Any:
        if self._consumer is None:
            from confluent_kafka import Consumer

            conf: dict[str, Any] = dict(self.client)
            conf.setdefault("group.id", "kappa-kafka-alignment")
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
            self._consumer = Consumer(conf)
        return self._consumer

    def times(
        self, tp: TopicPartitionKey, start: int, at_least: int, until: int
    ) -> tuple[np.ndarray, np.ndarray, bool]:
        offsets, stamps, read_until = self._cache.get(
            tp, (np.empty(0, "int64"), np.empty(0, "int64"), start)
        )
        keep = offsets >= start
        offsets, stamps = offsets[keep], stamps[keep]
        if read_until < start or (len(offsets) == 0 and read_until != start):
            offsets, stamps, read_until = np.empty(0, "int64"), np.empty(0, "int64"), start
        if len(offsets) < at_least and read_until < until:
            more = at_least - len(offsets)
            new_offsets, new_stamps, read_until = self._read(tp, read_until, more, until)
            offsets = np.concatenate([offsets, new_offsets])
            stamps = np.concatenate([stamps, new_stamps])
        self._cache[tp] = (offsets, stamps, read_until)
        return offsets, stamps, read_until >= until

    def _read(
        self, tp: TopicPartitionKey, start: int, count: int, until: int
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """At least ``count`` records of ``[start, until)``; returns them and where the read
        stopped (the next offset to read)."""
        from confluent_kafka import TopicPartition

        started = time.monotonic()
        consumer = self.consumer()
        consumer.assign([TopicPartition(tp[0], tp[1], start)])
        offsets: list[int] = []
        stamps: list[int] = []
        position = start
        deadline = time.monotonic() + self.poll_timeout_ms / 1000
        try:
            while len(offsets) < count and position < until:
                messages = consumer.consume(min(10_000, max(500, count)), 0.1)
                if not messages and time.monotonic() > deadline:
                    raise KafkaError(
                        f"{self.what}: timed out reading record timestamps of {tp[0]}-{tp[1]} "
                        f"from offset {position} (wanted up to {until})"
                    )
                for message in messages:
                    error = message.error()
                    if error is not None:
                        # end of partition: a coarse high watermark (tansu) reports it before
                        # the true end the source was told; keep fetching up to ``until``
                        if error.code() in (AUTO_OFFSET_RESET, OFFSET_OUT_OF_RANGE):
                            raise KafkaError(
                                f"{self.what}: {tp[0]}-{tp[1]} has no records at offset "
                                f"{position} (below {until}): deleted while being read?"
                            )
                        continue
                    offset = message.offset()
                    if offset >= until:
                        position = until
                        break
                    offsets.append(offset)
                    stamps.append(message.timestamp()[1])
                    position = offset + 1
                    deadline = time.monotonic() + self.poll_timeout_ms / 1000
        finally:
            consumer.unassign()
        self.records_read += len(offsets)
        self.seconds += time.monotonic() - started
        return np.asarray(offsets, "int64"), np.asarray(stamps, "int64"), position

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        self._cache.clear()


__all__ = [
    "DEFAULT_MAX_SKEW_MS",
    "AlignedBatch",
    "RecordTimes",
    "StaticTimes",
    "TimesSource",
    "align",
]
