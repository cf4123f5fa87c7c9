"""Catching up, without Spark: when a round ends the catch-up, the lag of a bootstrap's Kafka
phase, and the metrics of a query restarted after catching up."""

from __future__ import annotations

import json
from typing import Any

from kappaplus.runtime.catch_up import catches_up, caught_up, input_batches
from kappaplus.runtime.observe.lag import behind_per_topic
from kappaplus.runtime.observe.metrics import MetricsListener
from kappaplus.runtime.observe.progress import ProgressTracker
from kappaplus.runtime.options import RunOptions


def _entry(batch: int, rows: int, end: int, latest: int) -> dict[str, Any]:
    return {
        "batchId": batch,
        "numInputRows": rows,
        "durationMs": {"addBatch": 10, "triggerExecution": 20},
        "sources": [
            {
                "endOffset": json.dumps({"phase": "kafka", "kafka": {"t": {"0": end}}}),
                "latestOffset": json.dumps({"phase": "kafka", "kafka": {"t": {"0": latest}}}),
            }
        ],
    }


def test_which_runs_catch_up() -> None:
    assert catches_up(RunOptions("stream"), "10 seconds")
    assert catches_up(RunOptions("bootstrap", cutoff="2024-03-01"), "10 seconds")
    assert not catches_up(RunOptions("stream", catch_up=False), "10 seconds")
    assert not catches_up(RunOptions("stream"), "available-now")
    assert not catches_up(RunOptions("backfill"), "10 seconds")


def test_a_round_of_more_than_one_batch_with_input_asks_for_another() -> None:
    tracker = ProgressTracker(["a", "b"])
    tracker.set_phase("catching up", catching_up=True)
    tracker.catch_up_rounds = 1  # the runner counts the rounds
    before = input_batches(tracker)
    tracker.update("a", [_entry(0, 100, 100, 250), _entry(1, 100, 200, 250)])
    tracker.update("b", [_entry(0, 100, 100, 250)])
    assert not caught_up(before, tracker)  # "a" ran two batches: records kept arriving
    tracker.catch_up_rounds = 2
    before = input_batches(tracker)
    # one batch with input, then a batch without (the watermark's): within one trigger
    tracker.update("a", [_entry(2, 50, 250, 250), _entry(3, 0, 250, 250)])
    assert caught_up(before, tracker)
    tracker.set_phase("live", catching_up=False)
    assert tracker.stats["a"].catch_up_batches == 4 and tracker.stats["a"].behind == {"t": 0}
    assert tracker.stats["b"].behind == {"t": 150}  # a bootstrap's Kafka phase shows its lag
    assert tracker.behind == {"t": 150}
    assert tracker.caught_up_after is not None
    assert "live (caught up in 4 batches)" in tracker.line()


def test_lag_of_sources_without_kafka_offsets_is_empty() -> None:
    lake = {"endOffset": json.dumps({"phase": "lake", "lake": {"done": 0.5}}), "latestOffset": None}
    assert behind_per_topic([lake]) == {}


class _Progress:
    def __init__(self, progress: dict[str, Any]) -> None:
        self.progress = type("P", (), {"json": json.dumps(progress)})()


class _Query:
    def __init__(self, name: str, query_id: str) -> None:
        self.name, self.id = name, query_id


def test_a_query_restarted_after_catching_up_is_active_again() -> None:
    listener = MetricsListener({"q": "out"})
    listener.catching_up = True
    listener.onQueryStarted(_Query("q", "id-1"))
    listener.onQueryProgress(_Progress({**_entry(0, 10, 10, 30), "name": "q", "id": "id-1"}))
    listener.onQueryTerminated(_Query("q", "id-1"))
    assert 'kappa_query_active{output="out",query="q"} 0' in listener.render()
    listener.catching_up = False
    listener.onQueryStarted(_Query("q", "id-1"))  # the same checkpoint: the same query id
    text = listener.render()
    assert 'kappa_query_active{output="out",query="q"} 1' in text
    assert "kappa_catching_up 0" in text
    assert 'kappa_catch_up_batches_total{output="out",query="q"} 1' in text
    assert (
        'kappa_kafka_offsets_behind_latest{output="out",partition="0",query="q",topic="t"} 20'
        in text
    )
