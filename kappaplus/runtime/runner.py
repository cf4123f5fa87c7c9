"""Run one job in one mode: bind inputs, call the job once, start one query per output.

>>> result = run_job(spark, load_job("kappaplus.examples.sessionization:JOB"),
...                  load_config("kappaplus/examples/sessionization.toml"),
...                  RunOptions(mode="backfill", start="2024-03-01", end="2024-03-02"))
...                                                                      # doctest: +SKIP
>>> result.status, result.rows_dropped_late                              # doctest: +SKIP
('finished', 0)

The same :class:`~kappaplus.jobs.Job` object -- the same transform -- runs in both modes;
only the bindings differ (see :mod:`kappaplus.runtime.inputs` and
:mod:`kappaplus.runtime.outputs`). In ``stream`` mode each Kafka input with a ``dlq``
gets one more query that decodes the same topic and writes the dead letters
(:func:`kappaplus.dlq.dead_letter_writer`); its dead count is reconciled with the dead
count the output queries observed.

The run ends when every query has terminated (``available-now`` / ``once``), when no
query has read a row for ``until_idle`` seconds, after ``timeout`` seconds, or on
Ctrl-C / SIGTERM: then the queries drain (the micro-batch under way is committed, no new
one starts: :mod:`kappaplus.draining`) and are stopped; a second signal stops them at
once (the interrupted batch is redone: the checkpoint and the exactly-once Hive sink make
the next run resume where this one stopped). A JSON run record under ``state_dir()/runs``
follows the run throughout.
"""

from __future__ import annotations

import functools
import getpass
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.live import Live

from kappaplus.config import JobConfig, resolve
from kappaplus.draining import DrainSignal, drain_requested
from kappaplus.errors import KappaError
from kappaplus.runtime.checkpoints import (
    LOCK_FILE,
    prepare_checkpoint,
)
from kappaplus.runtime.dead_letters import publish_run_dead_letters, start_dead_letter_query
from kappaplus.runtime.failures import explain, metastore_uri
from kappaplus.runtime.identity import (
    check_targets,
    run_identity,
)
from kappaplus.runtime.inputs import (
    BoundInput,
    bind_inputs,
    decode_metrics_name,
    dlq_metrics_name,
)
from kappaplus.runtime.late_rows import late_rows_plans
from kappaplus.runtime.locks import hold
from kappaplus.runtime.observers import audit_recorder, flush_audit, serve_metrics, stop_metrics
from kappaplus.runtime.options import RunOptions, slug
from kappaplus.runtime.outputs import (
    OutputPlan,
    check_sql,
    plan_output,
    start_output,
)
from kappaplus.runtime.progress import ProgressTracker, format_seconds
from kappaplus.runtime.progress_events import ProgressListener
from kappaplus.runtime.records import FAILED, FINISHED, RUNNING, STOPPED, RunRecord, new_run_id
from kappaplus.runtime.stopping import StopRequest, signals_stop
from kappaplus.settings import state_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from kappaplus.jobs import Job

log = logging.getLogger(__name__)
RECORD_EVERY = 5.0
TIMEOUT_DRAIN_SECONDS = 60
"""How long ``--timeout`` waits for the micro-batch under way before stopping at once."""


@dataclass
class RunResult:
    """What a run did. ``outputs[name]`` / ``dlq[input]`` hold per-query totals."""

    record: RunRecord
    job: Job
    status: str
    plans: dict[str, OutputPlan]
    tracker: ProgressTracker
    queries: dict[str, StreamingQuery] = field(default_factory=dict)

    @property
    def rows_dropped_late(self) -> int:
        """Rows the watermark dropped as late, over every output query of this run."""
        return sum(self.dropped_late(name) for name in self.plans)

    def dropped_late(self, output: str) -> int:
        """Rows the watermark dropped as late in the query of ``output``."""
        stats = self.tracker.stats.get(output)
        return 0 if stats is None else stats.rows_dropped_late

    def decode_counts(self, input_name: str) -> dict[str, int]:
        """``records``/``good``/``dead`` of a Kafka input as the first output query saw them."""
        first = next(iter(self.plans))
        return dict(self.tracker.stats[first].observed.get(decode_metrics_name(input_name), {}))


def run_job(
    spark: SparkSession,
    job: Job,
    config: JobConfig,
    run: RunOptions,
    *,
    job_path: str | None = None,
    config_file: str | None = None,
    console: Console | None = None,
) -> RunResult:
    """Run ``job`` in ``run.mode`` until the run ends (see the module docstring)."""
    resolved = resolve(config, run.mode, job)
    params = job.make_params(dict(resolved.params))
    delay = resolved.watermark_delay or job.watermark_delay
    trigger = run.effective_trigger(resolved.trigger_interval)
    identity = run_identity(job, resolved, run)
    mode_dir = prepare_checkpoint(config, run, identity)

    staging = mode_dir if run.mode == "backfill" else None
    drain = DrainSignal.under(mode_dir / "_drain")
    late = {
        plan.output: plan
        for plan in late_rows_plans(
            job, params, {n: o.late for n, o in resolved.outputs.items()}, mode_dir
        )
    }
    inputs: dict[str, BoundInput] = bind_inputs(
        spark, job, resolved, run, mode_dir, drain.path, list(late.values())
    )
    frames = job.run({name: bound.df for name, bound in inputs.items()}, params)
    plans = {
        spec.name: plan_output(
            job.name,
            run.mode,
            spec,
            resolved.outputs[spec.name],
            mode_dir,
            identity.as_json(),
            late.get(spec.name),
        )
        for spec in job.outputs
    }
    check_sql(spark, plans)
    check_targets(spark, plans, identity)
    dlq_names: dict[str, str] = {}
    record = RunRecord(
        run_id=run.run_id or new_run_id(slug(job.name), run.mode),
        job=job.name,
        identity=identity.as_json(),
        job_path=job_path,
        mode=run.mode,
        status=RUNNING,
        trigger=trigger,
        started_at=time.time(),
        updated_at=time.time(),
        pid=_pid(),
        host_user=_user(),
        config_file=config_file,
        start=run.start,
        end=run.end,
        cutoff=run.cutoff,
        watermark_delay=delay,
        params={key: str(value) for key, value in params.items()},
        sources={name: bound.source for name, bound in inputs.items()},
        targets={name: plan.targets() for name, plan in plans.items()},
        checkpoints={name: str(plan.checkpoint) for name, plan in plans.items()},
    )
    queries: dict[str, StreamingQuery] = {}
    tracker = ProgressTracker([*plans])
    auditor = audit_recorder(spark, job, run, resolved, plans) if run.audit else None
    metrics = serve_metrics(spark, run, plans)
    status = FAILED
    paths, names = _lock_paths(mode_dir, plans)
    locks = hold(paths, record.run_id, names)
    locks.__enter__()
    stopping = signals_stop()
    request = stopping.__enter__()
    events = ProgressListener()
    spark.streams.addListener(events)
    try:
        if run.mode == "stream":
            for spec in job.inputs:
                started = start_dead_letter_query(
                    spark, job, spec.name, resolved, mode_dir, trigger, drain.path
                )
                if started is not None:
                    key = f"dlq:{spec.name}"
                    queries[key] = started[0]
                    dlq_names[key] = spec.name
                    record.checkpoints[key] = started[1]
        for name, plan in plans.items():
            kept = None
            if auditor is not None and plan.late is not None:
                kept = functools.partial(auditor.add_late_kept, name, plan.late.dataset)
            queries[name] = start_output(frames[name], plan, trigger, kept)
        tracker = ProgressTracker([*queries])
        record.save()
        log.info(
            "run %s: %s mode, trigger %s, queries %s",
            record.run_id,
            run.mode,
            trigger,
            ", ".join(queries),
        )
        status = _wait(
            queries,
            tracker,
            record,
            run,
            console,
            request,
            auditor,
            drain,
            events,
            metastore_uri(spark),
        )
    except KeyboardInterrupt:
        status, record.stopped_by = STOPPED, "ctrl-c"
    except Exception as exc:
        record.error = f"{type(exc).__name__}: {exc}"
        status = FAILED
        raise
    finally:
        for query in queries.values():
            _stop_quietly(query)
        for name, query in queries.items():
            # events still on Spark's listener bus, and the query's own recent progress:
            # folding is idempotent per batch id, so a batch seen twice counts once
            entries = [*events.take(_name(query)), *_progress(query)]
            tracker.update(name, entries)
            if auditor is not None:
                auditor.collect(name, entries)
        try:
            flush_audit(auditor, final=True)
            stop_metrics(spark, metrics)
            extra = _bootstrap_counts(job, run)
            if staging is not None:
                extra.update(publish_run_dead_letters(spark, job, resolved, run, staging))
            _finish(record, tracker, plans, dlq_names, status, extra)
        finally:
            _remove_listener(spark, events)
            drain.clear()
            stopping.__exit__(None, None, None)
            locks.__exit__(None, None, None)
    return RunResult(record, job, status, plans, tracker, queries)


def _raise_if_failed(name: str, query: StreamingQuery, metastore: str | None) -> None:
    """Raise the one-line :class:`KappaError` of a query that ended with an exception."""
    failure = query.exception()
    if failure is not None:
        detail = str(failure)
        log.debug("query %s failed: %s", name, detail)
        raise KappaError(f"query {name} failed: {explain(detail, metastore_uri=metastore)}")


def _lock_paths(mode_dir: Path, plans: dict[str, OutputPlan]) -> tuple[list[Path], list[str]]:
    """The lock files of a run (:mod:`kappaplus.runtime.locks`): its checkpoint, then
    each output target, in a stable order."""
    paths, names = [mode_dir / LOCK_FILE], [f"the checkpoint {mode_dir}"]
    targets = sorted({t for plan in plans.values() for t in plan.targets()})
    for target in targets:
        kind, _, name = target.partition(" ")
        paths.append(state_dir() / "locks" / f"{kind}-{slug(name.lower())}.lock")
        names.append(f"the output {kind} {name}")
    return paths, names


def _bootstrap_counts(job: Job, run: RunOptions) -> dict[str, dict[str, Any]]:
    """What the Kafka phase of a bootstrap did per input: records read, delivered,
    skipped (owned by the lake), dead letters, and where the dead letters are."""
    if run.mode != "bootstrap":
        return {}
    from kappaplus.connectors.hybrid.source import hybrid_counts
    from kappaplus.runtime.inputs import bootstrap_dead_letter_path

    out: dict[str, dict[str, Any]] = {}
    for spec in job.inputs:
        path = bootstrap_dead_letter_path(job.name, spec.name)
        try:
            counts: dict[str, Any] = hybrid_counts(path, job.name).as_dict()
        except Exception as exc:  # noqa: BLE001 - counts must not hide the run's outcome
            log.warning("reading the bootstrap counts of %s: %s", spec.name, exc)
            continue
        counts["dead_letter_path"] = path
        out[spec.name] = counts
    return out


def _pid() -> int:
    import os

    return os.getpid()


def _user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None


def _progress(query: StreamingQuery) -> list[Any]:
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


def _drained(queries: dict[str, StreamingQuery], drain: DrainSignal) -> bool:
    """Ask the sources to admit no new data (once); True when no query is inside a
    micro-batch any more, so stopping them interrupts nothing."""
    if not drain_requested(drain.path):
        drain.request()
        log.info("draining: waiting for the micro-batch under way to be committed")
        return False
    return not any(q.isActive and _busy(q) for q in queries.values())


def _name(query: StreamingQuery) -> str:
    try:
        return str(query.name)
    except Exception:  # noqa: BLE001 - a query that failed to start may have no name
        return ""


def _remove_listener(spark: SparkSession, listener: ProgressListener) -> None:
    try:
        spark.streams.removeListener(listener)
    except Exception as exc:  # noqa: BLE001 - stopping must not hide the run's outcome
        log.warning("removing the progress listener: %s", exc)


def _stop_quietly(query: StreamingQuery) -> None:
    """Stop ``query`` and wait for its thread: also when it ended by itself (an available-now
    query after a drain), whose thread may still be stopping its sources."""
    try:
        query.stop()
    except Exception as exc:  # noqa: BLE001 - stopping must not hide the run's outcome
        log.warning("stopping query %s: %s", query.name, exc)


def _wait(
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
) -> str:
    """Poll the queries until the run ends (or ``request`` says a signal came: then drain
    them, see :mod:`kappaplus.draining`); keep progress, the audit counts and the run record
    current."""
    started = time.monotonic()
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
            if request is not None and request.stopped_by is not None:
                record.stopped_by = request.stopped_by
                if drain is None or request.urgent or _drained(queries, drain):
                    return STOPPED
            elif record.stopped_by == "timeout":
                over = time.monotonic() - started - (run.timeout or 0)
                if drain is None or over >= TIMEOUT_DRAIN_SECONDS or _drained(queries, drain):
                    return STOPPED
            for name, query in queries.items():
                progress = events.take(names[name]) if events is not None else _progress(query)
                tracker.update(name, progress)
                if auditor is not None:
                    auditor.collect(name, progress)
                if not query.isActive:
                    _raise_if_failed(name, query, metastore_uri)
            now = time.monotonic()
            if live is not None:
                live.update(tracker.table(record.run_id))
            elif now - last_logged >= 10:
                log.info("%s", tracker.line())
                last_logged = now
            if now - last_saved >= RECORD_EVERY:
                flush_audit(auditor)
                _update_record(record, tracker)
                record.save()
                last_saved = now
            if all(not q.isActive for q in queries.values()):
                # a query may have failed since the check above (e.g. while the audit was
                # written): a failed run must not be reported as finished
                for name, query in queries.items():
                    _raise_if_failed(name, query, metastore_uri)
                return STOPPED if record.stopped_by is not None else FINISHED
            if (
                run.until_idle is not None
                and tracker.idle_for() >= run.until_idle
                and (all(s.batches > 0 for s in tracker.stats.values()))
                and not any(_busy(q) for q in queries.values())
            ):
                log.info("no input for %.0f s: stopping", tracker.idle_for())
                return FINISHED
            if (
                run.timeout is not None
                and now - started >= run.timeout
                and record.stopped_by is None
            ):
                log.warning(
                    "timeout after %s: stopping once the micro-batch under way is committed "
                    "(at most %d s more)",
                    format_seconds(now - started),
                    TIMEOUT_DRAIN_SECONDS,
                )
                record.stopped_by = "timeout"
            time.sleep(run.poll_seconds)
    finally:
        if live is not None:
            live.update(tracker.table(record.run_id))
            live.stop()
            if not live.console.is_terminal:
                live.console.line()  # a log or pipe gets no newline after the last frame


def _update_record(record: RunRecord, tracker: ProgressTracker, plans: Any = None) -> None:
    names = set(plans) if plans is not None else {n for n in tracker.stats if ":" not in n}
    record.outputs = {
        name: stats.as_json() for name, stats in tracker.stats.items() if name in names
    }
    record.rows_dropped_late = sum(
        tracker.stats[n].rows_dropped_late for n in names if n in tracker.stats
    )
    record.done = tracker.done


def _finish(
    record: RunRecord,
    tracker: ProgressTracker,
    plans: dict[str, OutputPlan],
    dlq_names: dict[str, str],
    status: str,
    bootstrap: dict[str, dict[str, Any]] | None = None,
) -> None:
    """Final statistics, decode/DLQ reconciliation and the final run record."""
    _update_record(record, tracker, plans)
    inputs: dict[str, dict[str, Any]] = {}
    first = next(iter(plans), None)
    if first is not None:
        for metric, counts in tracker.stats[first].observed.items():
            if metric.startswith("kappa_decode_"):
                inputs.setdefault(metric.removeprefix("kappa_decode_"), {}).update(counts)
            elif metric.startswith("kappa_bounds_"):
                name = metric.removeprefix("kappa_bounds_")
                out = int(counts.get("out_of_bounds", 0))
                inputs.setdefault(name, {})["out_of_bounds"] = out
                if out:
                    log.warning(
                        "input %s: %d row(s) with an event time outside the sanity bounds %s",
                        name,
                        out,
                        "went to the dead letters" if dlq_names else "were left out",
                    )
    for key, input_name in dlq_names.items():
        stats = tracker.stats.get(key)
        if stats is None:
            continue
        dlq = stats.observed.get(dlq_metrics_name(input_name), {})
        entry = inputs.setdefault(input_name, {})
        entry["dead_letters_written"] = dlq.get("dead", 0)
        entry["dlq_records"] = dlq.get("records", 0)
        entry["reconciled"] = entry.get("records") == dlq.get("records") and entry.get(
            "dead"
        ) == dlq.get("dead")
    for input_name, counts in (bootstrap or {}).items():
        inputs.setdefault(input_name, {}).update(counts)
    record.inputs = inputs
    record.status = status
    record.ended_at = time.time()
    record.save()
