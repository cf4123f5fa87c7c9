"""Run one job in one mode: bind inputs, call the job once, start one query per output.

>>> result = run_job(spark, load_job("kappaplus.examples.sessionization:JOB"),
...                  load_config("kappaplus/examples/sessionization.toml"),
...                  RunOptions(mode="backfill", start="2024-03-01", end="2024-03-02"))
...                                                                      # doctest: +SKIP
>>> result.status, result.rows_dropped_late                              # doctest: +SKIP
('finished', 0)

The same :class:`~kappaplus.jobs.Job` object -- the same transform -- runs in both modes;
only the bindings differ (see :mod:`kappaplus.runtime.binding.inputs` and
:mod:`kappaplus.runtime.binding.outputs`). There is one query per output and no other: in
``stream`` mode the dead letters of a Kafka input with a ``dlq`` are written by the first
output query that reads the input, in the micro-batch that reads them
(:mod:`kappaplus.runtime.side_outputs.dead_letter_tap`); their count is reconciled with the dead
records that query observed.

The run ends when every query has terminated (``available-now`` / ``once``), when no
query has read a row for ``until_idle`` seconds, after ``timeout`` seconds, or on
Ctrl-C / SIGTERM: then the queries drain (the micro-batch under way is committed, no new
one starts: :mod:`kappaplus.core.draining`) and are stopped; a second signal stops them at
once (the interrupted batch is redone: the checkpoint and the exactly-once Hive sink make
the next run resume where this one stopped); see :mod:`kappaplus.runtime.waiting`. A JSON
run record under ``state_dir()/runs`` follows the run throughout.
"""

from __future__ import annotations

import contextlib
import functools
import getpass
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from kappaplus.config import AVAILABLE_NOW, JobConfig, resolve
from kappaplus.connectors.hive.catalog import resolution_scope
from kappaplus.core.draining import DrainSignal
from kappaplus.core.settings import state_dir
from kappaplus.runtime.binding.bounds import bounds_metrics_name
from kappaplus.runtime.binding.inputs import BoundInput, bind_inputs
from kappaplus.runtime.binding.kafka_inputs import check_kafka_inputs
from kappaplus.runtime.binding.modes import run_mode
from kappaplus.runtime.binding.outputs import (
    OutputPlan,
    check_sql,
    plan_output,
    start_output,
)
from kappaplus.runtime.binding.slice_size import with_state_slices
from kappaplus.runtime.catch_up import CATCHING_UP, LIVE, catches_up, caught_up, input_batches
from kappaplus.runtime.failures import metastore_uri
from kappaplus.runtime.held_logs import held_lines
from kappaplus.runtime.observe.observers import (
    audit_recorder,
    flush_audit,
    serve_metrics,
    stop_metrics,
)
from kappaplus.runtime.observe.progress import ProgressTracker
from kappaplus.runtime.observe.progress_events import ProgressListener
from kappaplus.runtime.options import ONCE, RunOptions, slug
from kappaplus.runtime.side_outputs.dead_letter_tap import (
    DeadLetterPublisher,
    dead_letter_publishers,
    decode_metrics_name,
)
from kappaplus.runtime.side_outputs.late_rows import late_rows_plans
from kappaplus.runtime.state.batch_counts import settle_interrupted
from kappaplus.runtime.state.checkpoints import (
    LOCK_FILE,
    check_shared_checkpoint,
    fresh_start_checked,
    prepare_checkpoint,
)
from kappaplus.runtime.state.identity import run_identity
from kappaplus.runtime.state.locks import hold
from kappaplus.runtime.state.range_replace import hold_for_replacement, replace_held
from kappaplus.runtime.state.records import (
    FAILED,
    FINISHED,
    RUNNING,
    STOPPED,
    RunRecord,
    new_run_id,
)
from kappaplus.runtime.state.target_claims import check_targets
from kappaplus.runtime.stopping import signals_stop
from kappaplus.runtime.waiting import (
    progress_of,
    query_name,
    stop_quietly,
    update_record,
    wait_for_queries,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from kappaplus.config import ResolvedConfig
    from kappaplus.jobs import Job, Params
    from kappaplus.runtime.binding.modes import RunMode
    from kappaplus.runtime.side_outputs.late_rows import LateRowsPlan
    from kappaplus.runtime.state.identity import RunIdentity

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    """What a run did: its record, status, output plans, per-query totals (``tracker``)
    and queries (one per output)."""

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


def _late_kept(
    tracker: ProgressTracker,
    output: str,
    auditor: Any,
    dataset: str | None,
    batch_id: int,
    counts: dict[int, int],
) -> None:
    """An output kept ``counts`` late rows (per audit bucket) of ``batch_id``: the run's late
    figure counts them as rows, and the audit as its ``late_kept`` stage."""
    tracker.stats[output].kept_late(batch_id, sum(counts.values()))
    if auditor is not None:
        auditor.add_late_kept(output, dataset, batch_id, counts)


@dataclass
class _PreparedRun:
    """A run bound and checked, before anything is started or locked: its inputs read by
    the job, one plan per output, the dead-letter publishers and the run record."""

    spark: SparkSession
    job: Job
    run: RunOptions
    resolved: ResolvedConfig
    strategy: RunMode
    mode_dir: Path
    drain: DrainSignal
    trigger: str
    frames: dict[str, DataFrame]
    plans: dict[str, OutputPlan]
    publishers: dict[str, DeadLetterPublisher]
    record: RunRecord
    tracker: ProgressTracker = field(init=False)
    queries: dict[str, StreamingQuery] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from kappaplus.state_store import state_rows_counted

        self.tracker = ProgressTracker(
            [*self.plans], state_rows_counted=state_rows_counted(self.spark)
        )


def _prepare(
    spark: SparkSession,
    job: Job,
    config: JobConfig,
    run: RunOptions,
    job_path: str | None,
    config_file: str | None,
) -> _PreparedRun:
    """Resolve the config for the mode, make the checkpoint, bind the inputs, call the job,
    plan the outputs and check their targets: every refusal comes before a query starts
    (and, with ``--fresh``, puts the old checkpoint back: :func:`fresh_start_checked`)."""
    resolved = resolve(config, run.mode, job)
    check_kafka_inputs(job, resolved)  # a missing topic: refused, not a stream reading nothing
    identity = run_identity(job, resolved, run)
    check_shared_checkpoint(config, run, spark.sparkContext.master or "")
    mode_dir = prepare_checkpoint(config, run, identity)
    with fresh_start_checked(mode_dir, run.fresh):
        params = job.make_params(dict(resolved.params))
        trigger = run.effective_trigger(resolved.trigger_interval)
        strategy = run_mode(run.mode)
        drain = DrainSignal.under(mode_dir / "_drain")
        late = {
            plan.output: plan
            for plan in late_rows_plans(
                job, params, {n: o.late for n, o in resolved.outputs.items()}, mode_dir
            )
        }
        dead = strategy.dead_letter_plans(job, resolved, mode_dir)
        bind = functools.partial(
            bind_inputs,
            spark,
            job,
            run=run,
            reader=strategy,
            mode_dir=mode_dir,
            drain_file=drain.path,
            late_plans=list(late.values()),
            dead_letters=dead,
        )
        resolved, inputs, frames = _bound_job(job, run, resolved, params, trigger, bind)
        plans = _checked_plans(spark, job, run, resolved, mode_dir, identity, late)
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
            watermark_delay=resolved.watermark_delay or job.watermark_delay,
            params={key: str(value) for key, value in params.items()},
            sources={name: bound.source for name, bound in inputs.items()},
            targets={name: plan.targets() for name, plan in plans.items()},
            checkpoints={name: str(plan.checkpoint) for name, plan in plans.items()},
        )
        return _PreparedRun(
            spark,
            job,
            run,
            resolved,
            strategy,
            mode_dir,
            drain,
            trigger,
            frames,
            plans,
            dead_letter_publishers(dead, frames, plans),
            record,
        )


def _bound_job(
    job: Job,
    run: RunOptions,
    resolved: ResolvedConfig,
    params: Params,
    trigger: str,
    bind: Callable[[ResolvedConfig], dict[str, BoundInput]],
) -> tuple[ResolvedConfig, dict[str, BoundInput], dict[str, DataFrame]]:
    """Bind the inputs and call the job: the config as bound, the bound inputs, the job's
    output frames. A backfill of a job that keeps rows in state is bound a second time with
    the slice size such jobs read (:func:`with_state_slices`: the size is a source option,
    and whether the job keeps state is known only from the frames it returned)."""
    with resolution_scope():  # each Hive table asked of the catalog once
        # the connectors' lines of a binding done again would say what the run does not do
        with held_lines("kappaplus.connectors") as first_binding:
            inputs = bind(resolved)
            frames = job.run({name: bound.df for name, bound in inputs.items()}, params)
            larger = (
                with_state_slices(resolved, frames, paced=trigger not in (AVAILABLE_NOW, ONCE))
                if run.mode.reads_lake
                else None
            )
            if larger is not None:
                first_binding.drop()
        if larger is None:
            return resolved, inputs, frames
        inputs = bind(larger)
        return larger, inputs, job.run({name: bound.df for name, bound in inputs.items()}, params)


def _checked_plans(
    spark: SparkSession,
    job: Job,
    run: RunOptions,
    resolved: ResolvedConfig,
    mode_dir: Path,
    identity: RunIdentity,
    late: dict[str, LateRowsPlan],
) -> dict[str, OutputPlan]:
    """One plan per output, its SQL checked and its targets claimed for this run (a table
    another run or range holds is refused here); held back when the run replaces a range."""
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
    claims = check_targets(
        spark, plans, identity, append=run.append, replace_range=run.replace_range
    )
    return hold_for_replacement(plans, mode_dir, claims, run)


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
    """Run ``job`` in ``run.mode`` until the run ends (see the module docstring).

    Prepared first (:func:`_prepare`: nothing started, nothing locked), then run holding
    the run's locks, with its stop signals and progress listener, all released in reverse
    order whatever happens; the run record is final when it returns or raises."""
    prepared = _prepare(spark, job, config, run, job_path, config_file)
    record, plans, tracker = prepared.record, prepared.plans, prepared.tracker
    auditor = audit_recorder(spark, job, run, prepared.resolved, plans) if run.audit else None
    metrics = serve_metrics(spark, run, plans)
    status = FAILED
    with contextlib.ExitStack() as held:
        paths, names = _lock_paths(prepared.mode_dir, plans)
        held.enter_context(hold(paths, record.run_id, names))
        # the interrupted runs this one resumes: their records say what they committed
        settle_interrupted(record.run_id, record.checkpoints.values())
        request = held.enter_context(signals_stop())
        held.callback(prepared.drain.clear)
        events = ProgressListener()
        spark.streams.addListener(events)
        held.callback(_remove_listener, spark, events)
        try:
            status = _execute(prepared, request, events, auditor, metrics, console)
        except KeyboardInterrupt:
            status, record.stopped_by = STOPPED, "ctrl-c"
        except Exception as exc:
            record.error = f"{type(exc).__name__}: {exc}"
            status = FAILED
            raise
        finally:
            _stop_queries(prepared, events, auditor)
            flush_audit(auditor, final=True)
            stop_metrics(spark, metrics)
            extra = prepared.strategy.publish_set_aside(
                spark, job, prepared.resolved, run, prepared.mode_dir
            )
            _finish(record, tracker, plans, prepared.publishers, status, extra)
    return RunResult(record, job, status, plans, tracker, prepared.queries)


def _execute(
    prepared: _PreparedRun,
    request: Any,
    events: ProgressListener,
    auditor: Any,
    metrics: tuple[Any, Any] | None,
    console: Console | None,
) -> str:
    """Start the queries (catching up first where the run is behind), wait for the run's
    end, swap a range replacement in; how the run ended."""
    run, record, tracker, queries = (
        prepared.run,
        prepared.record,
        prepared.tracker,
        prepared.queries,
    )
    began = time.monotonic()

    def start_queries(chosen: str) -> None:
        """Start every output's query with the trigger ``chosen`` (on its checkpoint)."""
        for name, plan in prepared.plans.items():
            kept = None
            if plan.late is not None:
                kept = functools.partial(
                    _late_kept, tracker, name, auditor, plan.late.dataset if auditor else None
                )
                tracker.stats[name].keep_late_rows()
            mine = [p for p in prepared.publishers.values() if p.output == name]
            queries[name] = start_output(
                prepared.frames[name], plan, chosen, kept, mine, record.run_id
            )
        tracker.restarted()
        record.save()
        log.info(
            "run %s: %s mode, trigger %s, queries %s",
            record.run_id,
            run.mode,
            chosen,
            ", ".join(queries),
        )

    def wait() -> str:
        return wait_for_queries(
            queries,
            tracker,
            record,
            run,
            console,
            request,
            auditor,
            prepared.drain,
            events,
            metastore_uri(prepared.spark),
            started=began,
            idle_stops=tracker.phase != CATCHING_UP,
        )

    for publisher in prepared.publishers.values():
        publisher.claim()
    status = FINISHED
    catching_up = catches_up(run, prepared.trigger)
    if catching_up:
        status = _catch_up(start_queries, wait, queries, tracker, events, auditor, metrics)
    if status == FINISHED and not any(q.isActive for q in queries.values()):
        if catching_up:
            _phase(tracker, metrics, LIVE)
        start_queries(prepared.trigger)
        status = wait()
    if status == FINISHED:
        # --replace-range: swap the held batches in
        replace_held(prepared.spark, prepared.plans, prepared.mode_dir)
    return status


def _stop_queries(prepared: _PreparedRun, events: ProgressListener, auditor: Any) -> None:
    """Stop every query and fold in its last progress: the events still on Spark's
    listener bus and the query's own recent progress (folding is idempotent per batch id,
    so a batch seen twice counts once)."""
    for query in prepared.queries.values():
        stop_quietly(query)
    for name, query in prepared.queries.items():
        entries = [*events.take(query_name(query)), *progress_of(query)]
        prepared.tracker.update(name, entries)
        if auditor is not None:
            auditor.collect(name, entries)


def _phase(tracker: ProgressTracker, metrics: tuple[Any, Any] | None, phase: str) -> None:
    """The run enters ``phase`` (:mod:`kappaplus.runtime.catch_up`): progress and metrics."""
    tracker.set_phase(phase, catching_up=phase == CATCHING_UP)
    if metrics is not None:
        metrics[0].catching_up = phase == CATCHING_UP


def _catch_up(
    start_queries: Callable[[str], None],
    wait: Callable[[], str],
    queries: dict[str, StreamingQuery],
    tracker: ProgressTracker,
    events: ProgressListener,
    auditor: Any,
    metrics: tuple[Any, Any] | None,
) -> str:
    """Run ``availableNow`` rounds until one ran at most one batch with input per query
    (:func:`~kappaplus.runtime.catch_up.caught_up`); the queries are stopped between
    rounds, each after its last committed batch. Returns how the last round ended:
    ``finished`` (caught up, the queries stopped: the trigger takes over), or the run's end
    (a stop request, ``--timeout``: ``stopped``; ``--until-idle``: ``finished`` with the
    queries still active)."""
    _phase(tracker, metrics, CATCHING_UP)
    while True:
        tracker.catch_up_rounds += 1
        before = input_batches(tracker)
        start_queries(AVAILABLE_NOW)
        status = wait()
        if status != FINISHED or any(q.isActive for q in queries.values()):
            return status
        for name, query in queries.items():
            stop_quietly(query)
            entries = [*events.take(query_name(query)), *progress_of(query)]
            tracker.update(name, entries)
            if auditor is not None:
                auditor.collect(name, entries)
        if caught_up(before, tracker):
            log.info(
                "caught up: %d round(s), %s batches back to back; records behind: %s",
                tracker.catch_up_rounds,
                max((s.catch_up_batches for s in tracker.stats.values()), default=0),
                tracker.behind or "-",
            )
            return FINISHED


def _lock_paths(mode_dir: Path, plans: dict[str, OutputPlan]) -> tuple[list[Path], list[str]]:
    """The lock files of a run (:mod:`kappaplus.runtime.state.locks`): its checkpoint, then
    each output target, in a stable order."""
    paths, names = [mode_dir / LOCK_FILE], [f"the checkpoint {mode_dir}"]
    targets = sorted({t for plan in plans.values() for t in plan.targets()})
    for target in targets:
        kind, _, name = target.partition(" ")
        paths.append(state_dir() / "locks" / f"{kind}-{slug(name.lower())}.lock")
        names.append(f"the output {kind} {name}")
    return paths, names


def _pid() -> int:
    import os

    return os.getpid()


def _user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None


def _remove_listener(spark: SparkSession, listener: ProgressListener) -> None:
    try:
        spark.streams.removeListener(listener)
    except Exception as exc:  # noqa: BLE001 - stopping must not hide the run's outcome
        log.warning("removing the progress listener: %s", exc)


def _finish(
    record: RunRecord,
    tracker: ProgressTracker,
    plans: dict[str, OutputPlan],
    publishers: dict[str, DeadLetterPublisher],
    status: str,
    bootstrap: dict[str, dict[str, Any]] | None = None,
) -> None:
    """Final statistics, decode counts and dead letters per input, the final run record.

    An input's decode counts are those of the first output query that observed them (the
    one that publishes its dead letters, if it has a ``dlq``)."""
    update_record(record, tracker, plans)
    inputs: dict[str, dict[str, Any]] = {}
    for output in plans:
        stats = tracker.stats.get(output)
        for metric, counts in ({} if stats is None else stats.observed).items():
            if metric.startswith("kappa_decode_"):
                name = metric.removeprefix("kappa_decode_")
                if "records" not in inputs.get(name, {}):
                    inputs.setdefault(name, {}).update(counts)
            elif metric.startswith("kappa_bounds_"):
                name = metric.removeprefix("kappa_bounds_")
                inputs.setdefault(name, {}).setdefault(
                    "out_of_bounds", int(counts.get("out_of_bounds", 0))
                )
    for input_name, publisher in publishers.items():
        # dead letters: records that failed to decode, and decoded ones out of bounds
        stats = tracker.stats.get(publisher.output)
        observed = {} if stats is None else stats.observed
        dead = observed.get(decode_metrics_name(input_name), {}).get("dead", 0)
        dead += observed.get(bounds_metrics_name(input_name), {}).get("out_of_bounds", 0)
        seen = set() if stats is None else stats.seen
        inputs.setdefault(input_name, {}).update(publisher.counts(seen, int(dead)))
    for name, entry in inputs.items():
        dead = int(entry.get("dead") or 0)
        if dead and name not in publishers:
            log.warning(
                "input %s: %d record(s) failed decoding and were discarded, as its "
                "dlq = { discard = true } says (without it they go to <topic>.dlq)",
                name,
                dead,
            )
        if entry.get("out_of_bounds"):
            log.warning(
                "input %s: %d row(s) with an event time outside the sanity bounds %s",
                name,
                entry["out_of_bounds"],
                "went to the dead letters" if name in publishers else "were discarded",
            )
    for input_name, counts in (bootstrap or {}).items():
        inputs.setdefault(input_name, {}).update(counts)
    record.inputs = inputs
    record.status = status
    record.ended_at = time.time()
    record.save()
