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
Ctrl-C / SIGTERM: then every query is stopped (Spark finishes nothing half-way: the
checkpoint and the exactly-once Hive sink make the next run resume where this one
stopped). A JSON run record under ``state_dir()/runs`` follows the run throughout.
"""

from __future__ import annotations

import getpass
import logging
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.live import Live

from kappaplus.config import JobConfig, resolve
from kappaplus.errors import ConfigError, KappaError
from kappaplus.runtime.failures import check_checkpoint_files, explain
from kappaplus.runtime.identity import (
    RunIdentity,
    check_identity,
    check_targets,
    check_unclaimed,
    run_dir,
    run_identity,
)
from kappaplus.runtime.inputs import (
    BoundInput,
    bind_inputs,
    dead_letter_target,
    decode_metrics_name,
    decoder_spec,
    dlq_metrics_name,
    read_kafka_records,
)
from kappaplus.runtime.locks import check_free, hold
from kappaplus.runtime.options import RunOptions, slug, trigger_args
from kappaplus.runtime.outputs import OutputPlan, checkpoint_id, plan_output, start_output
from kappaplus.runtime.progress import ProgressTracker, format_seconds
from kappaplus.runtime.records import FAILED, FINISHED, RUNNING, STOPPED, RunRecord, new_run_id
from kappaplus.settings import state_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from kappaplus.jobs import Job

log = logging.getLogger(__name__)
RECORD_EVERY = 5.0
LOCK_FILE = "_kappa.lock"


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


def checkpoint_root(config: JobConfig, run: RunOptions) -> Path:
    """Where checkpoints of this run live (see :class:`RunOptions`)."""
    if run.checkpoint_root is not None:
        return Path(run.checkpoint_root)
    if config.checkpoint_dir is not None:
        return Path(config.checkpoint_dir)
    return state_dir() / "checkpoints"


def prepare_checkpoint(config: JobConfig, run: RunOptions, identity: RunIdentity) -> Path:
    """The run's checkpoint directory (derived from its identity), emptied by ``--fresh``;
    :class:`~kappaplus.runtime.identity.IdentityError` if it belongs to another run.

    Pure Python: ``kappa run`` calls it before Spark starts (and :func:`run_job` again)."""
    directory = run_dir(checkpoint_root(config, run), identity)
    check_free(directory / LOCK_FILE, f"the checkpoint {directory}")
    if run.fresh and directory.exists():
        log.warning("--fresh: deleting checkpoints %s", directory)
        shutil.rmtree(directory)
    if not run.fresh:
        check_unclaimed(directory)
    check_identity(directory, identity)
    check_checkpoint_files(directory)
    return directory


def check_before_spark(job: Job, config: JobConfig, run: RunOptions) -> Path:
    """Everything about a run that can be checked without Spark: bindings resolve and the
    checkpoint belongs to this run. Returns the run's checkpoint directory."""
    from kappaplus.runtime.inputs import check_event_time

    resolved = resolve(config, run.mode, job)
    for spec in job.inputs:
        hive = resolved.inputs[spec.name].hive
        if hive is not None:
            check_event_time(spec, hive)
    return prepare_checkpoint(config, run, run_identity(job, resolved, run))


def check_sql(spark: SparkSession, plans: dict[str, OutputPlan]) -> None:
    """Parse every SQL expression of the outputs' config (``partition_expr``) now, with
    Spark's own parser, so a bad one is one line naming its key, not a failure at the
    first batch."""
    jspark: Any = spark._jsparkSession  # type: ignore[attr-defined]
    parser = jspark.sessionState().sqlParser()
    for name, plan in plans.items():
        if plan.hive is None or not plan.hive.partition_expr:
            continue
        try:
            parser.parseExpression(plan.hive.partition_expr)
        except Exception as exc:  # noqa: BLE001 - Spark's ParseException, as one line
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(
                f"outputs.{name}.hive.partition_expr",
                plan.hive.partition_expr,
                f"not a SQL expression ({first[:200]})",
            ) from None


@dataclass
class StopRequest:
    """The first SIGTERM/SIGINT received while a run is under way (None: none yet)."""

    signum: int | None = None

    @property
    def stopped_by(self) -> str | None:
        if self.signum is None:
            return None
        return "ctrl-c" if self.signum == signal.SIGINT else "sigterm"


@contextmanager
def signals_stop() -> Iterator[StopRequest]:
    """While inside, SIGTERM and SIGINT only record a stop request; the run's poll loop
    sees it and stops every query at a clean point. The handler raises nothing: raising in
    the middle of a py4j call would leave the gateway connection with an unread answer.
    Later signals are ignored. Restores the previous handlers on the way out."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def handler(signum: int, frame: Any) -> None:
        if request.signum is not None:
            log.warning("signal %d: already stopping", signum)
            return
        request.signum = signum
        log.warning("signal %d: stopping at the next clean point", signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield request
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


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
    inputs: dict[str, BoundInput] = bind_inputs(spark, job, resolved, run, staging)
    frames = job.run({name: bound.df for name, bound in inputs.items()}, params)
    plans = {
        spec.name: plan_output(
            job.name,
            run.mode,
            spec,
            resolved.outputs[spec.name],
            mode_dir,
            identity.as_json(),
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
    auditor = _auditor(spark, job, run, resolved, plans) if run.audit else None
    metrics = _serve_metrics(spark, run, plans)
    status = FAILED
    paths, names = _lock_paths(mode_dir, plans)
    locks = hold(paths, record.run_id, names)
    locks.__enter__()
    stopping = signals_stop()
    request = stopping.__enter__()
    try:
        if run.mode == "stream":
            for spec in job.inputs:
                started = _start_dlq(spark, job, spec.name, resolved, mode_dir, trigger)
                if started is not None:
                    key = f"dlq:{spec.name}"
                    queries[key] = started[0]
                    dlq_names[key] = spec.name
                    record.checkpoints[key] = started[1]
        for name, plan in plans.items():
            queries[name] = start_output(frames[name], plan, trigger)
        tracker = ProgressTracker([*queries])
        record.save()
        log.info(
            "run %s: %s mode, trigger %s, queries %s",
            record.run_id,
            run.mode,
            trigger,
            ", ".join(queries),
        )
        status = _wait(queries, tracker, record, run, console, request, auditor)
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
            tracker.update(name, _progress(query))
            if auditor is not None:
                auditor.collect(name, _progress(query))
        try:
            _flush_audit(auditor, final=True)
            _stop_metrics(spark, metrics)
            extra = _bootstrap_counts(job, run)
            if staging is not None:
                extra.update(_publish_dead_letters(spark, job, resolved, run, staging))
            _finish(record, tracker, plans, dlq_names, status, extra)
        finally:
            stopping.__exit__(None, None, None)
            locks.__exit__(None, None, None)
    return RunResult(record, job, status, plans, tracker, queries)


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


def _auditor(
    spark: SparkSession, job: Job, run: RunOptions, resolved: Any, plans: dict[str, OutputPlan]
) -> Any:
    """The recorder of this run's audit counts (:mod:`kappaplus.audit.table`)."""
    from kappaplus.audit.table import AuditRecorder

    datasets: dict[tuple[str, str], str] = {}
    for spec in job.inputs:
        binding = resolved.inputs[spec.name]
        if binding.kafka is not None:
            datasets[("kafka", spec.name)] = binding.kafka.topic
        if binding.hive is not None:
            datasets[("lake", spec.name)] = binding.hive.table
            datasets[("source", spec.name)] = binding.hive.table
    for name, plan in plans.items():
        targets = [t.split(" ", 1)[1] for t in plan.targets()]
        datasets[("output", name)] = ",".join(targets)
    return AuditRecorder(
        spark,
        job.name,
        run.mode,
        {name: plan.query_name for name, plan in plans.items()},
        input_stages_from=next(iter(plans), None),
        datasets=datasets,
    )


def _serve_metrics(
    spark: SparkSession, run: RunOptions, plans: dict[str, OutputPlan]
) -> tuple[Any, Any] | None:
    """Register the metrics listener and serve ``/metrics`` when ``run.metrics_port`` is
    set (:mod:`kappaplus.runtime.metrics`)."""
    if run.metrics_port is None:
        return None
    from kappaplus.runtime.metrics import MetricsListener, MetricsServer

    listener = MetricsListener({plan.query_name: name for name, plan in plans.items()})
    try:
        server = MetricsServer(listener, run.metrics_port)
    except OSError as exc:
        raise ConfigError(
            "--metrics-port", run.metrics_port, f"cannot listen there ({exc.strerror})"
        ) from exc
    spark.streams.addListener(listener)
    server.start()
    return listener, server


def _stop_metrics(spark: SparkSession, metrics: tuple[Any, Any] | None) -> None:
    if metrics is None:
        return
    listener, server = metrics
    server.stop()
    try:
        spark.streams.removeListener(listener)
    except Exception as exc:  # noqa: BLE001 - stopping must not hide the run's outcome
        log.warning("removing the metrics listener: %s", exc)


def _flush_audit(auditor: Any, *, final: bool = False) -> None:
    """Write the queued audit rows; a failure is logged (and retried), never fatal."""
    if auditor is None:
        return
    try:
        auditor.flush()
    except Exception as exc:  # noqa: BLE001 - the audit must not stop the job
        level = logging.ERROR if final else logging.WARNING
        log.log(level, "writing audit counts to %s: %s", auditor.table, exc)


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


def _publish_dead_letters(
    spark: SparkSession, job: Job, resolved: Any, run: RunOptions, mode_dir: Path
) -> dict[str, dict[str, Any]]:
    """Move the rows a backfill's sources could not place into each input's dead-letter
    table (``unplaceable = "dead_letter"``); their counts per input for the run record."""
    from kappaplus.runtime.dead_letters import publish_staged
    from kappaplus.runtime.inputs import dead_letter_staging

    out: dict[str, dict[str, Any]] = {}
    for spec in job.inputs:
        hive = resolved.inputs[spec.name].hive
        table = None if hive is None else hive.dead_letter_table
        if table is None:
            continue
        try:
            count = publish_staged(
                spark,
                job=job.name,
                input_name=spec.name,
                staging=dead_letter_staging(mode_dir, spec.name),
                table=table,
                start=run.start if run.start is not None else hive.start,
                end=run.end if run.end is not None else hive.end,
            )
        except Exception as exc:  # noqa: BLE001 - must not hide the run's outcome
            log.error("publishing the dead letters of input %s to %s: %s", spec.name, table, exc)
            out[spec.name] = {"dead_letter_table": table, "dead_letter_error": str(exc)}
            continue
        out[spec.name] = {"dead_letters": count, "dead_letter_table": table}
    return out


def _pid() -> int:
    import os

    return os.getpid()


def _user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None


def _start_dlq(
    spark: SparkSession,
    job: Job,
    input_name: str,
    resolved: Any,
    mode_dir: Path,
    trigger: str,
) -> tuple[StreamingQuery, str] | None:
    """The DLQ query of a Kafka input: decode the topic again, write its dead letters."""
    from kappaplus.codecs import dead_letters, decode_kafka
    from kappaplus.dlq import dead_letter_writer
    from kappaplus.runtime.bounds import bounds_metrics_name, mark_out_of_bounds

    kafka = resolved.inputs[input_name].kafka
    if kafka is None:
        return None
    target = dead_letter_target(input_name, kafka)
    if target is None:
        return None
    checkpoint = mode_dir / f"_dlq_{input_name}"
    ident = checkpoint_id(checkpoint)
    spec = job.input(input_name)
    decoded = mark_out_of_bounds(
        decode_kafka(
            read_kafka_records(spark, kafka),
            decoder_spec(spec, kafka),
            metrics=dlq_metrics_name(input_name),
        ),
        spec.event_time_column,
        resolved.inputs[input_name].bounds,
        bounds_metrics_name(input_name, "kappa_dlq_bounds"),
    )
    sink_id = f"{slug(job.name)}-{input_name}-{ident}"[:100]
    writer = dead_letter_writer(target, sink_id=sink_id)
    query = (
        dead_letters(decoded, job.name)
        .writeStream.queryName(f"{slug(job.name)}-stream-dlq-{input_name}-{ident}")
        .option("checkpointLocation", str(checkpoint))
        .foreachBatch(_discard_result(writer))
        .trigger(**trigger_args(trigger))
        .start()
    )
    return query, str(checkpoint)


def _discard_result(write: Any) -> Any:
    def call(df: Any, batch_id: int) -> None:
        write(df, batch_id)

    return call


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


def _stop_quietly(query: StreamingQuery) -> None:
    try:
        if query.isActive:
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
) -> str:
    """Poll the queries until the run ends (or ``request`` says a signal came); keep
    progress, the audit counts and the run record current."""
    started = time.monotonic()
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
                return STOPPED
            for name, query in queries.items():
                progress = _progress(query)
                tracker.update(name, progress)
                if auditor is not None:
                    auditor.collect(name, progress)
                if not query.isActive and query.exception() is not None:
                    detail = str(query.exception())
                    log.debug("query %s failed: %s", name, detail)
                    raise KappaError(f"query {name} failed: {explain(detail)}")
            now = time.monotonic()
            if live is not None:
                live.update(tracker.table(record.run_id))
            elif now - last_logged >= 10:
                log.info("%s", tracker.line())
                last_logged = now
            if now - last_saved >= RECORD_EVERY:
                _flush_audit(auditor)
                _update_record(record, tracker)
                record.save()
                last_saved = now
            if all(not q.isActive for q in queries.values()):
                return FINISHED
            if (
                run.until_idle is not None
                and tracker.idle_for() >= run.until_idle
                and (all(s.batches > 0 for s in tracker.stats.values()))
                and not any(_busy(q) for q in queries.values())
            ):
                log.info("no input for %.0f s: stopping", tracker.idle_for())
                return FINISHED
            if run.timeout is not None and now - started >= run.timeout:
                log.warning("timeout after %s: stopping", format_seconds(now - started))
                record.stopped_by = "timeout"
                return STOPPED
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
