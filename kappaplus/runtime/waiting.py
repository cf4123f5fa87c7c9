"""Wait for a run's queries: poll them until the run ends, keeping the progress table, the
audit counts and the run record current, and stop them.

The run ends when every query has terminated (``available-now`` / ``once``), when no
query has read a row for ``until_idle`` seconds, after ``timeout`` seconds (the micro-batch
under way is committed first, at most :data:`TIMEOUT_DRAIN_SECONDS` more), or on a stop
request (Ctrl-C / SIGTERM: the queries drain, :mod:`kappaplus.core.draining`; a second signal
stops them at once). A query that failed ends the run with one line naming it.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.live import Live

from kappaplus.core.draining import DrainSignal, drain_requested
from kappaplus.core.errors import KappaError
from kappaplus.runtime.failures import explain
from kappaplus.runtime.observe.observers import flush_audit
from kappaplus.runtime.observe.progress import ProgressTracker, format_seconds
from kappaplus.runtime.observe.progress_events import ProgressListener
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.state.records import FINISHED, STOPPED, RunRecord
from kappaplus.runtime.stopping import StopRequest

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)
RECORD_EVERY = 5.0
"""Seconds between two saves of the run record while the queries run."""
TIMEOUT_DRAIN_SECONDS = 60
"""How long ``--timeout`` waits for the micro-batch under way before stopping at once."""


def raise_if_failed(name: str, query: StreamingQuery, metastore: str | None) -> None:
    """Raise the one-line :class:`KappaError` of a query that ended with an exception."""
    failure = query.exception()
    if failure is not None:
        detail = str(failure)
        log.debug("query %s failed: %s", name, detail)
        raise KappaError(f"query {name} failed: {explain(detail, metastore_uri=metastore)}")


def progress_of(query: StreamingQuery) -> list[Any]:
    """The query's recent progress entries (none from a stopped query that has none)."""
    try:
        return list(query.recentProgress)
    except Exception:  # noqa: BLE001 - a stopped query may have no progress to give
        return []


def _busy(query: StreamingQuery) -> bool:
    """Whether a query is running a batch or its last trigger found data: a long batch is
    not idleness (``until_idle`` must not stop a run in the middle of its input)."""
    try:
        status = query.status
    except Exception:  # noqa: BLE001 - a stopped query is not busy
        return False
    return bool(status.get("isTriggerActive") or status.get("isDataAvailable"))


def _looked(query: StreamingQuery) -> bool:
    """Whether a query has asked its sources for data at least once (it is past its
    initialization): a query that found nothing to read is idle too, from the run's start
    (a finished bootstrap run again never runs a batch)."""
    try:
        status = query.status
    except Exception:  # noqa: BLE001 - a stopped query has looked for the last time
        return True
    return not str(status.get("message") or "").startswith("Initializing")


def _drained(queries: dict[str, StreamingQuery], drain: DrainSignal) -> bool:
    """Ask the sources to admit no new data (once); True when no query is inside a
    micro-batch any more, so stopping them interrupts nothing."""
    if not drain_requested(drain.path):
        drain.request()
        log.info("draining: waiting for the micro-batch under way to be committed")
        return False
    return not any(q.isActive and _busy(q) for q in queries.values())


def query_name(query: StreamingQuery) -> str:
    """The query's name ("" when it has none)."""
    try:
        return str(query.name)
    except Exception:  # noqa: BLE001 - a query that failed to start may have no name
        return ""


def stop_quietly(query: StreamingQuery) -> None:
    """Stop ``query`` and wait for its thread: also when it ended by itself (an available-now
    query after a drain), whose thread may still be stopping its sources."""
    try:
        query.stop()
    except Exception as exc:  # noqa: BLE001 - stopping must not hide the run's outcome
        log.warning("stopping query %s: %s", query.name, exc)


def _stop_now(
    queries: dict[str, StreamingQuery],
    record: RunRecord,
    run: RunOptions,
    request: StopRequest | None,
    drain: DrainSignal | None,
    started: float,
) -> bool:
    """Whether a stop request (a signal) or a passed ``--timeout`` ends the run now: at once
    without a drain signal or on a second signal, else once the queries have drained (the
    timeout after :data:`TIMEOUT_DRAIN_SECONDS` at the latest)."""
    if request is not None and request.stopped_by is not None:
        record.stopped_by = request.stopped_by
        return drain is None or request.urgent or _drained(queries, drain)
    if record.stopped_by == "timeout":
        over = time.monotonic() - started - (run.timeout or 0)
        return drain is None or over >= TIMEOUT_DRAIN_SECONDS or _drained(queries, drain)
    return False


def _all_ended(
    queries: dict[str, StreamingQuery], tracker: ProgressTracker, metastore_uri: str | None
) -> bool:
    """Whether every query has ended: then their last progress is taken and a failed one
    raises (it may have failed since the last look, e.g. while the audit was written: a
    failed run must not be reported as finished)."""
    if any(q.isActive for q in queries.values()):
        return False
    for name, query in queries.items():
        raise_if_failed(name, query, metastore_uri)
        # a stopped query's own progress is complete, while the listener's last event may
        # still be on its way: the final frame must show every batch
        tracker.update(name, progress_of(query))
    return True


def _timed_out(run: RunOptions, elapsed: float) -> bool:
    """Whether ``--timeout`` has passed ``elapsed`` seconds into the run."""
    return run.timeout is not None and elapsed >= run.timeout


def _idle(queries: dict[str, StreamingQuery], tracker: ProgressTracker, run: RunOptions) -> bool:
    """Whether ``until_idle`` ends the run: no query has read a row for that long, each has
    looked for input at least once, and none is inside a micro-batch."""
    return (
        run.until_idle is not None
        and tracker.idle_for() >= run.until_idle
        and all(
            tracker.stats[name].batches > 0 or _looked(query)
            for name, query in queries.items()
            if name in tracker.stats
        )
        and not any(_busy(q) for q in queries.values())
    )


def wait_for_queries(
    queries: dict[str, StreamingQuery],
    tracker: ProgressTracker,
    record: RunRecord,
    run: RunOptions,
    console: Console | None,
    request: StopRequest | None = None,
    auditor: Any = None,
    drain: DrainSignal | None = None,
    events: ProgressListener | None = None,
    metastore_uri: str | None = None,
    started: float | None = None,
    idle_stops: bool = True,
) -> str:
    """Poll the queries until the run ends (or ``request`` says a signal came: then drain
    them, see :mod:`kappaplus.core.draining`); keep progress, the audit counts and the run record
    current. ``started``: when the run began (``time.monotonic()``; default now), the
    origin of ``--timeout`` also when the queries were restarted (after catching up).
    ``idle_stops``: whether ``until_idle`` applies (not while catching up: those queries
    end by themselves, and a restart between two rounds is no idleness)."""
    started = time.monotonic() if started is None else started
    names = {name: str(query.name) for name, query in queries.items()}
    last_saved = 0.0
    last_logged = 0.0
    live = (
        Live(tracker.table(record.run_id), console=console, refresh_per_second=2, transient=False)
        if run.progress
        else None
    )
    if live is not None:
        live.start()
    try:
        while True:
            if events is not None:
                events.arm()  # a query ending from here on cuts the sleep below short
            if _stop_now(queries, record, run, request, drain, started):
                return STOPPED
            for name, query in queries.items():
                progress = events.take(names[name]) if events is not None else progress_of(query)
                tracker.update(name, progress)
                if auditor is not None:
                    auditor.collect(name, progress)
                if not query.isActive:
                    raise_if_failed(name, query, metastore_uri)
            now = time.monotonic()
            if live is not None:
                live.update(tracker.table(record.run_id))
            elif now - last_logged >= 10:
                log.info("%s", tracker.line())
                last_logged = now
            if now - last_saved >= RECORD_EVERY:
                flush_audit(auditor)
                update_record(record, tracker)
                record.save()
                last_saved = now
            if _all_ended(queries, tracker, metastore_uri):
                return STOPPED if record.stopped_by is not None else FINISHED
            if idle_stops and _idle(queries, tracker, run):
                log.info("no input for %.0f s: stopping", tracker.idle_for())
                return FINISHED
            if _timed_out(run, now - started) and record.stopped_by is None:
                log.warning(
                    "timeout after %s: stopping once the micro-batch under way is committed "
                    "(at most %d s more)",
                    format_seconds(now - started),
                    TIMEOUT_DRAIN_SECONDS,
                )
                record.stopped_by = "timeout"
            if events is not None:
                events.wait(run.poll_seconds)
            else:
                time.sleep(run.poll_seconds)
    finally:
        if live is not None:
            live.update(tracker.table(record.run_id))
            live.stop()
            if not live.console.is_terminal:
                live.console.line()  # a log or pipe gets no newline after the last frame


def update_record(record: RunRecord, tracker: ProgressTracker, plans: Any = None) -> None:
    """The run record's per-output totals, rows dropped late and fraction done, so far."""
    names = set(plans) if plans is not None else set(tracker.stats)
    record.outputs = {
        name: stats.as_json() for name, stats in tracker.stats.items() if name in names
    }
    record.rows_dropped_late = sum(
        tracker.stats[n].rows_dropped_late for n in names if n in tracker.stats
    )
    record.done = tracker.done
