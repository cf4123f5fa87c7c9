"""Live Prometheus metrics: the exposition from a listener's progress events, and the
endpoint of a real run answering while its queries run."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from kappaplus.runtime.observe.metrics import MetricsListener, kafka_lag


class _Event:
    def __init__(self, progress: dict[str, Any]) -> None:
        self.progress = type("P", (), {"json": json.dumps(progress)})()


PROGRESS = {
    "id": "q1",
    "name": "job-stream-out-1",
    "batchId": 3,
    "numInputRows": 120,
    "inputRowsPerSecond": 40.0,
    "processedRowsPerSecond": 60.5,
    "durationMs": {"triggerExecution": 1500, "addBatch": 900},
    "eventTime": {"watermark": "2024-03-01T00:10:00.000Z", "max": "2024-03-01T00:12:00.000Z"},
    "stateOperators": [
        {"numRowsTotal": 7, "memoryUsedBytes": 4096, "numRowsDroppedByWatermark": 2}
    ],
    "sources": [
        {
            "description": "kafka",
            "endOffset": {"rides": {"0": 100, "1": 50}},
            "latestOffset": {"rides": {"0": 130, "1": 50}},
        }
    ],
    "observedMetrics": {"kappa_decode_rides": {"records": 121, "good": 120, "dead": 1}},
}


def _value(text: str, family: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(family + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_exposition_of_progress_events() -> None:
    listener = MetricsListener({"job-stream-out-1": "out"})
    listener.onQueryProgress(_Event(PROGRESS))
    listener.onQueryProgress(_Event({**PROGRESS, "batchId": 4}))
    text = listener.render()
    assert _value(text, "kappa_batches_total", query="job-stream-out-1", output="out") == 2
    assert _value(text, "kappa_input_rows_total") == 240
    assert _value(text, "kappa_rows_dropped_late_total") == 4
    assert _value(text, "kappa_dead_letters_total", input="rides") == 2
    assert _value(text, "kappa_batch_duration_seconds") == 1.5
    assert _value(text, "kappa_kafka_offsets_behind_latest", partition="0") == 30
    assert _value(text, "kappa_kafka_offsets_behind_latest", partition="1") == 0
    assert _value(text, "kappa_watermark_timestamp_seconds") == 1709251800
    assert _value(text, "kappa_state_rows") == 7
    assert _value(text, "kappa_state_memory_bytes") == 4096
    assert "# TYPE kappa_input_rows_total counter" in text
    assert kafka_lag({"endOffset": "{}", "latestOffset": None}) == {}


def test_metrics_endpoint_answers_while_a_query_runs(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    from kappaplus.archive import ArchiveOptions, archive_job
    from kappaplus.examples.generate import RIDER_EVENT_DDL, arrival_order, produce, rider_events
    from kappaplus.local.processes import free_port
    from kappaplus.runtime.options import RunOptions
    from kappaplus.runtime.runner import run_job

    events = rider_events(riders=5, start="2024-03-01T00:00:00", hours=2, seed=1)
    topic = new_topic(prefix="metrics")
    produce(kafka_bootstrap, topic, arrival_order(events), extra=[b"{bad"])
    job, config = archive_job(
        ArchiveOptions(
            topic=topic,
            bootstrap_servers=kafka_bootstrap,
            table=f"lake_{uuid.uuid4().hex[:8]}",
            event_time_column="event_time",
            schema=RIDER_EVENT_DDL,
            max_offsets_per_trigger=20,
            trigger_interval="1 second",
            checkpoint_dir=scratch / "checkpoints",
        )
    )
    port = free_port()
    results: list[Any] = []

    def run() -> None:
        try:
            results.append(
                run_job(
                    spark,
                    job,
                    config,
                    RunOptions("stream", timeout=240, until_idle=10, metrics_port=port),
                )
            )
        except Exception as exc:  # noqa: BLE001 - re-raised in the test's thread
            results.append(exc)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    scraped = ""
    deadline = time.monotonic() + 200
    while time.monotonic() < deadline and runner.is_alive():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
                assert reply.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                scraped = reply.read().decode()
        except OSError:
            scraped = ""
        rows = _value(scraped, "kappa_input_rows_total", output="archive") or 0
        dead = _value(scraped, "kappa_dead_letters_total", output="archive", input="records")
        # every good record counted as input, the bad one as a dead letter, query still up
        if (
            rows >= len(events)
            and dead == 1
            and _value(scraped, "kappa_query_active", output="archive")
        ):
            break
        time.sleep(1)
    assert runner.is_alive(), "the run ended before the scrape saw every record"
    runner.join(120)  # the run stops itself, idle for 10 s
    assert not runner.is_alive(), "the run did not stop when idle"
    if results and isinstance(results[0], Exception):
        raise results[0]
    (scratch / "scrape.txt").write_text(scraped)
    families = {line.split()[2] for line in scraped.splitlines() if line.startswith("# TYPE")}
    assert {
        "kappa_batches_total",
        "kappa_batch_duration_seconds",
        "kappa_input_rows_total",
        "kappa_input_rows_per_second",
        "kappa_processed_rows_per_second",
        "kappa_kafka_offsets_behind_latest",
        "kappa_watermark_timestamp_seconds",
        "kappa_event_time_max_timestamp_seconds",
        "kappa_rows_dropped_late_total",
        "kappa_dead_letters_total",
        "kappa_query_active",
    } <= families, scraped
    assert _value(scraped, "kappa_dead_letters_total", output="archive", input="records") == 1
    assert _value(scraped, "kappa_kafka_offsets_behind_latest", output="archive") == 0
