"""Progress of a run: totals accumulated from Spark's per-batch progress, and its display.

Spark reports one progress entry per micro-batch (a listener event,
:mod:`kappaplus.runtime.observe.progress_events`, and ``query.recentProgress``). The tracker folds
them into per-query totals: batches, input rows, rows per second, state rows, rows the
watermark dropped as late (``stateOperators[].numRowsDroppedByWatermark``, summed over every
stateful operator and batch), the observed decode counts of Kafka inputs, and the event-time
fraction done from the Hive source offset's ``done`` field. An entry counts once (by batch
id) and only if it ran a batch: the idle heartbeats Spark posts while waiting for data
repeat the last batch id and are skipped.

Rows are counted once, the same way in the live table, the log line, the end summary and
the run record (:attr:`QueryStats.rows`): the rows the job received, i.e. the ``rows`` of
the observed ``kappa_audit.job.*`` metrics, which exclude the end-of-input marker rows (Spark's
``numInputRows`` includes them). Batches whose source offset is in the ``end`` phase are the
marker batches; they are counted apart from the slices (data batches), and the run's own
throughput is its rows over the time of its data batches: the rows/s of the live table and
of the end summary (a marker batch's own rate, a few rows a second, is not shown).

The ETA comes from event-time progress only after a warm-up (the first
:data:`WARMUP_BATCHES` data batches of a query, which pay for planning, code generation and
the first file listings): the event time done since the warm-up over the time it took,
extrapolated to the rest. Before that there is no ETA rather than a wild one.

A stream or a bootstrap catches up before its trigger (:mod:`kappaplus.runtime.catch_up`):
the tracker's :attr:`ProgressTracker.phase` says which, the batches run while catching up
are counted apart (``catch_up_batches``), and ``behind`` is each Kafka topic's backlog after
the query's last batch (:mod:`kappaplus.runtime.observe.lag`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rich.table import Table

from kappaplus.runtime.observe.lag import behind_per_topic

log = logging.getLogger(__name__)

WARMUP_BATCHES = 2
"""Data batches of a query before its rate counts for the ETA."""
_END_PHASE = "end"
INPUT_METRIC_PREFIX = "kappa_audit.job."
"""Observed metrics carrying the ``rows`` each input delivered to the job."""


def _get(entry: Any, key: str, default: Any = None) -> Any:
    try:
        value = entry[key]
    except (KeyError, TypeError, IndexError):
        return default
    return default if value is None else value


def _offset(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _done_of(offset: Any) -> float | None:
    """The event-time fraction done in a source offset: the Hive source's ``done``; for the
    hybrid source its lake part's, and 1.0 once it reads Kafka (the history is done)."""
    if not isinstance(offset, Mapping):
        return None
    if "done" in offset:
        return float(offset["done"])
    if offset.get("phase") == "lake" and isinstance(offset.get("lake"), Mapping):
        return _done_of(offset["lake"])
    if offset.get("phase") == "kafka":
        return 1.0
    return None


def _is_marker_batch(sources: list[Any]) -> bool:
    """Whether a batch only delivered end-of-input markers: its Hive source offset (or
    the hybrid's lake part) is in the ``end`` phase."""
    phases = []
    for src in sources:
        end = _offset(_get(src, "endOffset"))
        if isinstance(end, Mapping):
            if isinstance(end.get("lake"), Mapping) and end.get("phase") == "lake":
                end = end["lake"]
            phases.append(end.get("phase"))
    return bool(phases) and all(phase == _END_PHASE for phase in phases)


def _as_dict(value: Any) -> dict[str, Any]:
    if hasattr(value, "asDict"):
        return dict(value.asDict())
    if isinstance(value, Mapping):
        return dict(value)
    return {}


@dataclass(frozen=True)
class BatchInfo:
    """One executed micro-batch: its rows, the watermark it ran under (ISO, as Spark
    reports it), the rows it dropped as late and each source's offsets."""

    batch_id: int
    input_rows: int
    watermark: str | None
    rows_dropped_late: int
    start_offsets: list[Any]
    end_offsets: list[Any]
    state_rows_updated: int = 0
    """Rows the batch's stateful operators wrote to their state stores."""


@dataclass
class QueryStats:
    """Totals of one streaming query over this run."""

    name: str
    batches: int = 0
    input_rows: int = 0
    rows_dropped_late: int = 0
    """Rows the watermark dropped: the late rows kept, where the output keeps them (exact);
    else Spark's ``numRowsDroppedByWatermark`` (see :attr:`late_counted`)."""
    spark_dropped_late: int = 0
    """Spark's ``numRowsDroppedByWatermark`` summed: rows reaching the stateful operator after
    partial aggregation, so one per group and batch, not one per input row."""
    late_kept: dict[int, int] | None = None
    """Late rows kept per batch id (None: the output does not keep them)."""
    state_rows: int | None = 0
    """Rows in the query's state stores after the last batch; None where the stores do not
    count them (RocksDB without ``trackTotalNumberOfRows``)."""
    rows_per_second: float = 0.0
    done: float | None = None
    done_at_start: float | None = None
    watermark: str | None = None
    last_input_at: float | None = None
    observed: dict[str, dict[str, int]] = field(default_factory=dict)
    data_batches: int = 0
    input_batches: int = 0
    """Batches that read input rows (not marker batches): a catch-up round's measure."""
    catch_up_batches: int = 0
    """Batches run while the run was catching up (back to back, before the trigger)."""
    catching_up: bool = False
    behind: dict[str, int] = field(default_factory=dict)
    """Records behind the head per Kafka topic after the last batch (its sources' latest
    offset when the batch was planned, less the offset it read to)."""
    marker_batches: int = 0
    marker_rows: int = 0
    data_seconds: float = 0.0
    marker_seconds: float = 0.0
    history: list[BatchInfo] = field(default_factory=list, repr=False)
    seen: set[int] = field(default_factory=set, repr=False)
    samples: list[tuple[float, float]] = field(default_factory=list, repr=False)
    """(monotonic time, event-time fraction done) after each data batch."""

    @property
    def rows(self) -> int:
        """Rows the job received: the observed ``rows`` of each input (markers excluded),
        else Spark's input rows less the marker rows."""
        received = [
            counts.get("rows", 0)
            for metric, counts in self.observed.items()
            if metric.startswith(INPUT_METRIC_PREFIX)
        ]
        return sum(received) if received else self.input_rows - self.marker_rows

    @property
    def throughput(self) -> float | None:
        """This run's rows per second over its data batches (marker batches apart)."""
        return self.rows / self.data_seconds if self.data_seconds > 0 else None

    def eta_seconds(self, now: float | None = None) -> float | None:
        """Seconds left from the event-time rate after the warm-up, or None before it."""
        if len(self.samples) <= WARMUP_BATCHES or self.done is None:
            return None
        t0, d0 = self.samples[WARMUP_BATCHES - 1]
        t1, d1 = self.samples[-1]
        if d1 <= d0 or t1 <= t0:
            return None
        left = (t1 - t0) * (1.0 - d1) / (d1 - d0)
        elapsed = (time.monotonic() if now is None else now) - t1
        return max(left - elapsed, 0.0)

    def add(self, entry: Any, now: float | None = None) -> bool:
        """Fold one progress entry in; False if it was a heartbeat or already counted."""
        batch_id = _get(entry, "batchId")
        durations = _get(entry, "durationMs", {}) or {}
        if batch_id is None or batch_id in self.seen or "addBatch" not in durations:
            return False
        self.seen.add(int(batch_id))
        self.batches += 1
        rows = int(_get(entry, "numInputRows", 0))
        log.debug(
            "batch %s: %d rows, %s",
            batch_id,
            rows,
            ", ".join(f"{k} {int(v)} ms" for k, v in sorted(dict(durations).items())),
        )
        self.input_rows += rows
        seconds = float(_get(durations, "triggerExecution", 0) or 0) / 1000.0
        if _is_marker_batch(_get(entry, "sources", []) or []):
            self.marker_batches += 1
            self.marker_rows += rows
            self.marker_seconds += seconds
        else:
            self.data_batches += 1
            self.data_seconds += seconds
            if rows:
                self.input_batches += 1
        if self.catching_up:
            self.catch_up_batches += 1
        if rows:
            self.last_input_at = now if now is not None else time.monotonic()
        self.rows_per_second = float(_get(entry, "processedRowsPerSecond", 0.0) or 0.0)
        operators = _get(entry, "stateOperators", []) or []
        if self.state_rows is not None:
            self.state_rows = sum(int(_get(op, "numRowsTotal", 0)) for op in operators)
        dropped = sum(int(_get(op, "numRowsDroppedByWatermark", 0)) for op in operators)
        self.spark_dropped_late += dropped
        if self.late_kept is None:
            self.rows_dropped_late += dropped
        event_time = _get(entry, "eventTime", {}) or {}
        self.watermark = _get(event_time, "watermark", self.watermark)
        sources = _get(entry, "sources", []) or []
        behind = behind_per_topic(list(sources))
        if behind:
            self.behind = behind
        self.history.append(
            BatchInfo(
                batch_id=int(batch_id),
                input_rows=rows,
                watermark=_get(event_time, "watermark"),
                rows_dropped_late=dropped,
                start_offsets=[_offset(_get(src, "startOffset")) for src in sources],
                end_offsets=[_offset(_get(src, "endOffset")) for src in sources],
                state_rows_updated=sum(int(_get(op, "numRowsUpdated", 0)) for op in operators),
            )
        )
        sources = _get(entry, "sources", []) or []
        fractions = [
            done
            for done in (_done_of(_offset(_get(src, "endOffset"))) for src in sources)
            if done is not None
        ]
        if fractions:
            self.done = min(fractions)
            if not _is_marker_batch(sources):
                self.samples.append((now if now is not None else time.monotonic(), self.done))
            if self.done_at_start is None:
                start = [
                    done
                    for done in (_done_of(_offset(_get(src, "startOffset"))) for src in sources)
                    if done is not None
                ]
                self.done_at_start = min(start) if start else 0.0
        for name, row in (_get(entry, "observedMetrics", {}) or {}).items():
            totals = self.observed.setdefault(name, {})
            for key, value in _as_dict(row).items():
                if isinstance(value, int):
                    totals[key] = totals.get(key, 0) + value
        return True

    @property
    def late_counted(self) -> str:
        """``rows`` where the figure counts late rows, ``spark groups`` where it is Spark's."""
        return "rows" if self.late_kept is not None else "spark groups"

    def keep_late_rows(self) -> None:
        """From now on the late figure is the late rows kept (:meth:`kept_late`)."""
        if self.late_kept is None:
            self.late_kept = {}
            self.rows_dropped_late = 0

    def kept_late(self, batch_id: int, rows: int) -> None:
        """``rows`` late rows of ``batch_id`` were kept (a replayed batch replaces its count)."""
        self.keep_late_rows()
        assert self.late_kept is not None
        self.late_kept[int(batch_id)] = int(rows)
        self.rows_dropped_late = sum(self.late_kept.values())

    def as_json(self) -> dict[str, Any]:
        return {
            "batches": self.batches,
            "data_batches": self.data_batches,
            "marker_batches": self.marker_batches,
            "rows": self.rows,
            "input_rows": self.input_rows,
            "data_seconds": round(self.data_seconds, 3),
            "marker_seconds": round(self.marker_seconds, 3),
            "throughput": None if self.throughput is None else round(self.throughput, 1),
            "rows_dropped_late": self.rows_dropped_late,
            "late_counted": self.late_counted,
            "spark_dropped_late": self.spark_dropped_late,
            "state_rows": self.state_rows,
            "rows_per_second": round(self.rows_per_second, 1),
            "catch_up_batches": self.catch_up_batches,
            "behind": dict(self.behind),
            "done": self.done,
            "done_at_start": self.done_at_start,
            "watermark": self.watermark,
            "observed": self.observed,
        }


class ProgressTracker:
    """Per-query totals of a run, fed with Spark's progress events
    (:mod:`kappaplus.runtime.observe.progress_events`); a batch folded twice counts once."""

    def __init__(self, names: Iterable[str], *, state_rows_counted: bool = True) -> None:
        self.stats = {
            name: QueryStats(name, state_rows=0 if state_rows_counted else None) for name in names
        }
        self.started = time.monotonic()
        self.started_queries: float | None = None
        """When the queries were last (re)started: idleness counts from then at least."""
        self.phase: str | None = None
        """``catching up`` or ``live`` in a run that catches up (None otherwise)."""
        self.catch_up_rounds = 0
        self.caught_up_after: float | None = None
        """Seconds from the start of the tracker until the run was caught up."""

    def set_phase(self, phase: str, *, catching_up: bool) -> None:
        """The run enters ``phase``; the batches folded from now on are catch-up batches
        when ``catching_up``."""
        self.phase = phase
        if not catching_up and self.catch_up_rounds:
            self.caught_up_after = time.monotonic() - self.started
        for stats in self.stats.values():
            stats.catching_up = catching_up

    @property
    def behind(self) -> dict[str, int]:
        """Records behind the head per Kafka topic: the largest backlog any query left."""
        out: dict[str, int] = {}
        for stats in self.stats.values():
            for topic, lag in stats.behind.items():
                out[topic] = max(out.get(topic, 0), lag)
        return out

    def update(self, name: str, entries: Iterable[Any]) -> bool:
        stats = self.stats.setdefault(name, QueryStats(name))
        now = time.monotonic()
        changed = False
        for entry in entries:
            changed = stats.add(entry, now) or changed
        return changed

    @property
    def done(self) -> float | None:
        fractions = [s.done for s in self.stats.values() if s.done is not None]
        return min(fractions) if fractions else None

    @property
    def rows_dropped_late(self) -> int:
        return sum(s.rows_dropped_late for s in self.stats.values())

    def eta_seconds(self, now: float | None = None) -> float | None:
        """Seconds left: the slowest query's, from its event-time rate after the warm-up
        (:meth:`QueryStats.eta_seconds`); None until every query with event-time progress
        has warmed up."""
        etas = []
        for stats in self.stats.values():
            if stats.done is None:
                continue
            if stats.done >= 1.0:
                continue
            eta = stats.eta_seconds(now)
            if eta is None:
                return None
            etas.append(eta)
        return max(etas) if etas else None

    def restarted(self) -> None:
        """The queries were (re)started (after catching up): not idle before that."""
        self.started_queries = time.monotonic()

    def idle_for(self) -> float:
        """Seconds since any query last read a row (since the start, or the queries' last
        restart, if later)."""
        moments = [s.last_input_at for s in self.stats.values() if s.last_input_at]
        moments.append(self.started_queries or self.started)
        return time.monotonic() - max(*moments, self.started)

    def table(self, title: str) -> Table:
        """A ``rich`` table of the queries' progress."""
        eta = self.eta_seconds()
        caption = f"elapsed {format_seconds(time.monotonic() - self.started)}"
        if self.done is not None:
            caption += f" | event time done {self.done:.1%}"
        if eta is not None:
            caption += f" | ETA {format_seconds(eta)}"
        if self.phase is not None:
            caption += f" | {self._phase_text()}"
        table = Table(title=title, caption=caption)
        for column in (
            "query",
            "batches",
            "rows",
            "rows/s",
            "done",
            "state rows",
            "late dropped",
            "behind",
            "watermark",
        ):
            table.add_column(column, justify="left" if column == "query" else "right")
        for stats in self.stats.values():
            table.add_row(
                stats.name,
                str(stats.batches),
                str(stats.rows),
                "-" if stats.throughput is None else f"{stats.throughput:.0f}",
                "-" if stats.done is None else f"{stats.done:.1%}",
                "-" if stats.state_rows is None else str(stats.state_rows),
                str(stats.rows_dropped_late),
                _behind_text(stats.behind),
                _watermark_text(stats.watermark),
            )
        return table

    def line(self) -> str:
        """One log line summarizing the run's progress."""
        parts = []
        for stats in self.stats.values():
            done = "" if stats.done is None else f" done={stats.done:.1%}"
            behind = f" behind={_behind_text(stats.behind)}" if stats.behind else ""
            state = "" if stats.state_rows is None else f" state={stats.state_rows}"
            parts.append(
                f"{stats.name}: batches={stats.batches} rows={stats.rows}"
                f"{done}{state} late={stats.rows_dropped_late}{behind}"
            )
        eta = self.eta_seconds()
        if eta is not None:
            parts.append(f"ETA {format_seconds(eta)}")
        if self.phase is not None:
            parts.append(self._phase_text())
        return " | ".join(parts)

    def _phase_text(self) -> str:
        batches = max((s.catch_up_batches for s in self.stats.values()), default=0)
        if self.phase == "live":
            return f"live (caught up in {batches} batches)"
        return f"{self.phase} (round {self.catch_up_rounds}, {batches} batches back to back)"


def format_seconds(seconds: float) -> str:
    """``1h02m03s`` style.

    >>> format_seconds(3723.4), format_seconds(42)
    ('1h02m03s', '42s')
    """
    total = int(round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _behind_text(behind: Mapping[str, int]) -> str:
    """Records behind the head, summed over the query's Kafka topics ('-' without any)."""
    return f"{sum(behind.values()):,}" if behind else "-"


def _watermark_text(watermark: str | None) -> str:
    """The watermark for the progress table; '-' when the query has none (Spark reports
    the epoch for a query without event-time operators)."""
    if not watermark or watermark.startswith("1970-01-01T00:00:00"):
        return "-"
    return watermark.replace("T", " ").removesuffix(".000Z")
