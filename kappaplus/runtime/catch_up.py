"""Catching up as fast as the engine allows, then the production trigger on the same checkpoint.

Spark's processing-time trigger starts a micro-batch at most once per interval, however
little the previous one took: a stream (or a bootstrap, lake phase and Kafka phase alike)
restarted behind its input with ``maxOffsetsPerTrigger = 200`` and a 10 s trigger reads
1,200 records a minute, whatever the machine could do. No source can shorten that wait (the
trigger sleeps until the next interval after every batch), so a run that would use a
processing-time trigger first *catches up* (:func:`catches_up`):

1. every output query starts with ``availableNow``: its sources fix their target (the head
   of each Kafka partition, the lake's extent) and the query runs micro-batches back to
   back up to it, each within the same per-trigger budget as in production
   (``maxOffsetsPerTrigger``, the lake's slice and row budgets; Kafka partitions aligned by
   record time as usual), then stops by itself once that batch is committed;
2. a round whose queries each ran at most one batch with input rows started within one
   trigger's worth of the head (:func:`caught_up`): the queries are started again on the
   same checkpoints with the production trigger. A round that ran more (records arrived
   while it ran) is followed by another round from the new head.

The queries stop only between committed batches and restart from their checkpoints, so the
switch neither loses nor repeats a record (the outputs' sinks are exactly once anyway); the
watermark and the state are in the checkpoint. A stop request, ``--timeout`` or
``--until-idle`` during the catch-up ends the run as it would in production. How far behind
each input is shows in the progress (``behind``: the records between the head when the last
batch was planned and where it read to) and in the metrics
(``kappa_kafka_offsets_behind_latest``, ``kappa_catching_up``).
"""

from __future__ import annotations

from collections.abc import Mapping

from kappaplus.config import AVAILABLE_NOW
from kappaplus.runtime.observe.progress import ProgressTracker
from kappaplus.runtime.options import ONCE, RunOptions

CATCHING_UP = "catching up"
LIVE = "live"


def catches_up(run: RunOptions, trigger: str) -> bool:
    """Whether this run catches up before its trigger: a stream or a bootstrap (they have
    no end) with a processing-time trigger, unless ``catch_up`` is off."""
    return run.catch_up and not run.mode.has_end and trigger not in (AVAILABLE_NOW, ONCE)


def input_batches(tracker: ProgressTracker) -> dict[str, int]:
    """Per query, the batches with input rows folded so far (the start of a round)."""
    return {name: stats.input_batches for name, stats in tracker.stats.items()}


def caught_up(before: Mapping[str, int], tracker: ProgressTracker) -> bool:
    """Whether the round that started at ``before`` (:func:`input_batches`) ran at most
    one batch with input rows per query: its sources' head was then within one trigger's
    worth of where the query stood, so the production trigger takes over."""
    return all(
        stats.input_batches - before.get(name, 0) <= 1 for name, stats in tracker.stats.items()
    )
