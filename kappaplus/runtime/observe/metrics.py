"""Live Prometheus metrics of a run, from a ``StreamingQueryListener``.

``kappa run --metrics-port N`` (``RunOptions.metrics_port``) registers a
:class:`MetricsListener` on the session and serves ``http://<host>:N/metrics`` in the
Prometheus text format (``text/plain; version=0.0.4``) from a small ``http.server``
thread. Spark calls the listener after every micro-batch of every query of the session;
nothing polls. Families (label ``query`` = the query name, ``output`` = the job's name for
that query):

=========================================  =======  ==========================================
metric                                     type     meaning
=========================================  =======  ==========================================
``kappa_batches_total``                    counter  micro-batches run
``kappa_batch_duration_seconds``           gauge    duration of the last micro-batch
``kappa_input_rows_total``                 counter  rows read by the query's sources
``kappa_input_rows_per_second``            gauge    input rate of the last batch (Spark's)
``kappa_processed_rows_per_second``        gauge    processing rate of the last batch
``kappa_kafka_offsets_behind_latest``      gauge    per ``topic``/``partition``: latest offset
                                                    minus the offset the query has read to
                                                    (also a bootstrap's Kafka phase)
``kappa_catching_up``                      gauge    1 while the run runs its batches back to
                                                    back to catch up, 0 on its trigger
``kappa_catch_up_batches_total``           counter  batches the query ran while catching up
``kappa_watermark_timestamp_seconds``      gauge    the watermark (epoch seconds)
``kappa_event_time_max_timestamp_seconds`` gauge    newest event time of the last batch
``kappa_rows_dropped_late_total``          counter  Spark's ``numRowsDroppedByWatermark``
``kappa_dead_letters_total``               counter  per ``input``: Kafka records that failed
                                                    to decode
``kappa_state_rows``                       gauge    rows in the query's state stores (when counted)
``kappa_state_memory_bytes``               gauge    memory used by its state stores
``kappa_query_active``                     gauge    1 while the query runs, 0 once it ended
=========================================  =======  ==========================================
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kappaplus.runtime.observe.json_listener import JsonProgressListener
from kappaplus.runtime.observe.lag import offsets_behind

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
FAMILIES: dict[str, tuple[str, str]] = {
    "kappa_batches_total": ("counter", "Micro-batches run."),
    "kappa_batch_duration_seconds": ("gauge", "Duration of the last micro-batch."),
    "kappa_input_rows_total": ("counter", "Rows read by the query's sources."),
    "kappa_input_rows_per_second": ("gauge", "Input rate of the last micro-batch."),
    "kappa_processed_rows_per_second": ("gauge", "Processing rate of the last micro-batch."),
    "kappa_kafka_offsets_behind_latest": (
        "gauge",
        "Latest offset of a Kafka partition minus the offset the query has read to.",
    ),
    "kappa_catching_up": (
        "gauge",
        "1 while the run catches up (batches back to back), 0 once on its trigger.",
    ),
    "kappa_catch_up_batches_total": ("counter", "Micro-batches run while catching up."),
    "kappa_watermark_timestamp_seconds": ("gauge", "The query's watermark (epoch seconds)."),
    "kappa_event_time_max_timestamp_seconds": (
        "gauge",
        "Newest event time of the last micro-batch (epoch seconds).",
    ),
    "kappa_rows_dropped_late_total": (
        "counter",
        "Dropped by the watermark: Spark's numRowsDroppedByWatermark, counted after partial "
        "aggregation (groups per batch, not input rows; the late rows kept are exact).",
    ),
    "kappa_dead_letters_total": ("counter", "Kafka records that failed to decode."),
    "kappa_state_rows": ("gauge", "Rows in the query's state stores."),
    "kappa_state_memory_bytes": ("gauge", "Memory used by the query's state stores."),
    "kappa_query_active": ("gauge", "1 while the query runs, 0 once it has ended."),
}


def _seconds(iso: str | None) -> float | None:
    if not iso:
        return None
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def kafka_lag(source: Mapping[str, Any]) -> dict[tuple[str, str], int]:
    """``(topic, partition) -> latest - end`` of a Kafka source's progress (Spark's
    ``{"topic": {"0": offset}}`` offsets, or a bootstrap's Kafka phase); empty for other
    sources (:func:`kappaplus.runtime.observe.lag.offsets_behind`)."""
    return offsets_behind(source)


@dataclass
class QueryMetrics:
    """What the listener knows of one query."""

    batches: int = 0
    input_rows: int = 0
    dropped_late: int = 0
    dead_letters: dict[str, int] = field(default_factory=dict)
    last: dict[str, Any] = field(default_factory=dict)
    active: bool = True
    catch_up_batches: int = 0

    def add(self, progress: Mapping[str, Any], catching_up: bool = False) -> None:
        self.batches += 1
        if catching_up:
            self.catch_up_batches += 1
        self.input_rows += int(progress.get("numInputRows") or 0)
        operators = progress.get("stateOperators") or []
        self.dropped_late += sum(int(op.get("numRowsDroppedByWatermark") or 0) for op in operators)
        for name, row in (progress.get("observedMetrics") or {}).items():
            if name.startswith("kappa_decode_") and isinstance(row, Mapping):
                key = name.removeprefix("kappa_decode_")
                self.dead_letters[key] = self.dead_letters.get(key, 0) + int(row.get("dead") or 0)
        self.last = dict(progress)


class MetricsListener(JsonProgressListener):
    """Keeps per-query metrics from Spark's query events; :meth:`render` formats them."""

    def __init__(
        self, names: Mapping[str, str] | None = None, *, state_rows_counted: bool = True
    ) -> None:
        self.queries: dict[str, QueryMetrics] = {}
        self.state_rows_counted = state_rows_counted
        """False: the state stores do not count rows (``kappa_state_rows`` is left out)."""
        self.names = dict(names or {})  # query name -> output/input it serves
        self.lock = threading.Lock()
        self.catching_up: bool | None = None
        """True while the run catches up, False on its trigger, None if it never does."""

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's name
        with self.lock:
            # a query restarted on its checkpoint (after catching up) is active again
            self.queries.setdefault(str(event.name), QueryMetrics()).active = True

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        try:
            progress = json.loads(event.progress.json)
        except Exception as exc:  # noqa: BLE001 - a listener must never fail Spark
            log.debug("metrics: unreadable progress: %s", exc)
            return
        with self.lock:
            self.queries.setdefault(str(progress.get("name")), QueryMetrics()).add(
                progress, bool(self.catching_up)
            )

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        return

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        with self.lock:
            for name, metrics in self.queries.items():
                if metrics.last.get("id") == str(event.id):
                    self.queries[name].active = False

    def samples(self) -> list[tuple[str, dict[str, str], float]]:
        """Every sample as ``(family, labels, value)``."""
        out: list[tuple[str, dict[str, str], float]] = []
        with self.lock:
            items = [(name, metrics, dict(metrics.last)) for name, metrics in self.queries.items()]
            dead = {name: dict(m.dead_letters) for name, m in self.queries.items()}
            catching_up = self.catching_up
        if catching_up is not None:
            out.append(("kappa_catching_up", {}, 1 if catching_up else 0))
        for name, metrics, last in items:
            labels = {"query": name}
            if name in self.names:
                labels["output"] = self.names[name]
            out.append(("kappa_batches_total", labels, metrics.batches))
            out.append(("kappa_input_rows_total", labels, metrics.input_rows))
            out.append(("kappa_rows_dropped_late_total", labels, metrics.dropped_late))
            out.append(("kappa_query_active", labels, 1 if metrics.active else 0))
            if catching_up is not None:
                out.append(("kappa_catch_up_batches_total", labels, metrics.catch_up_batches))
            for input_name, count in dead[name].items():
                out.append(("kappa_dead_letters_total", {**labels, "input": input_name}, count))
            if not last:
                continue
            durations = last.get("durationMs") or {}
            if "triggerExecution" in durations:
                out.append(
                    ("kappa_batch_duration_seconds", labels, durations["triggerExecution"] / 1e3)
                )
            for key, family in (
                ("inputRowsPerSecond", "kappa_input_rows_per_second"),
                ("processedRowsPerSecond", "kappa_processed_rows_per_second"),
            ):
                value = last.get(key)
                if isinstance(value, (int, float)):
                    out.append((family, labels, float(value)))
            event_time = last.get("eventTime") or {}
            for key, family in (
                ("watermark", "kappa_watermark_timestamp_seconds"),
                ("max", "kappa_event_time_max_timestamp_seconds"),
            ):
                moment = _seconds(event_time.get(key))
                if moment is not None:
                    out.append((family, labels, moment))
            operators = last.get("stateOperators") or []
            if operators:
                rows = sum(int(op.get("numRowsTotal") or 0) for op in operators)
                memory = sum(int(op.get("memoryUsedBytes") or 0) for op in operators)
                if self.state_rows_counted:
                    out.append(("kappa_state_rows", labels, rows))
                out.append(("kappa_state_memory_bytes", labels, memory))
            for source in last.get("sources") or []:
                for (topic, partition), lag in kafka_lag(source).items():
                    out.append(
                        (
                            "kappa_kafka_offsets_behind_latest",
                            {**labels, "topic": topic, "partition": partition},
                            lag,
                        )
                    )
        return out

    def render(self) -> str:
        """The Prometheus text exposition of every sample."""
        by_family: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family, labels, value in self.samples():
            by_family.setdefault(family, []).append((labels, value))
        lines: list[str] = []
        for family, (kind, help_text) in FAMILIES.items():
            samples = by_family.get(family)
            if not samples:
                continue
            lines.append(f"# HELP {family} {help_text}")
            lines.append(f"# TYPE {family} {kind}")
            for labels, value in samples:
                text = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
                lines.append(
                    f"{family}{{{text}}} {_number(value)}" if text else f"{family} {_number(value)}"
                )
        return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class MetricsServer:
    """``GET /metrics`` of a :class:`MetricsListener`, served from a daemon thread."""

    def __init__(self, listener: MetricsListener, port: int, host: str = "0.0.0.0") -> None:
        render = listener.render

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.split("?", 1)[0] not in ("/metrics", "/"):
                    self.send_error(404, "only /metrics")
                    return
                body = render().encode()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                log.debug("metrics: " + format, *args)

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(
            target=self.server.serve_forever, name="kappa-metrics", daemon=True
        )

    def start(self) -> MetricsServer:
        self.thread.start()
        log.info("Prometheus metrics on http://127.0.0.1:%d/metrics", self.port)
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
