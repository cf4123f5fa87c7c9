"""``kappa run`` and ``kappa status``.

``kappa run JOB --mode stream|backfill`` runs a job; JOB is a dotted path
(``kappaplus.examples.sessionization:JOB``) or the name of a reference job
(``kappa run --list``). The configuration defaults to the TOML file next to the job's
module (``<module>.toml``). ``kappa status`` lists the runs recorded under the state
directory and where each stands, from its run record and its checkpoints.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kappaplus.cli.errors import error_exit
from kappaplus.cli.session_options import MASTER, METASTORE_URI, command_session
from kappaplus.core.errors import ConfigError, KappaError
from kappaplus.runtime.observe.progress import format_seconds
from kappaplus.state_store import ROCKSDB_PROVIDER

_console = Console()
log = logging.getLogger(__name__)

REFERENCE_JOBS: dict[str, str] = {
    "sessionization": "kappaplus.examples.sessionization:JOB",
    "supply_demand": "kappaplus.examples.supply_demand:JOB",
    "enrichment": "kappaplus.examples.enrichment:JOB",
    "rider_trips": "kappaplus.examples.rider_trips:JOB",
}
"""Reference jobs runnable by name."""

_CONFIG = typer.Option(
    None, "--config", "-c", help="Job config TOML (default: <module>.toml next to the job)."
)
_CHECKPOINT = typer.Option(
    None, "--checkpoint", help="Checkpoint root (default: state_dir()/checkpoints)."
)
ROCKSDB = ROCKSDB_PROVIDER


def import_from_cwd() -> None:
    """Put the working directory on ``sys.path`` (see :func:`kappaplus.jobs.import_from_cwd`)."""
    from kappaplus.jobs import import_from_cwd as _import_from_cwd

    _import_from_cwd()


def job_path(job: str) -> str:
    """A reference job name (also with '-' for '_') or a dotted path, as a dotted path."""
    key = job.replace("-", "_")
    if key in REFERENCE_JOBS:
        return REFERENCE_JOBS[key]
    if ":" not in job:
        raise ConfigError(
            "JOB",
            job,
            f"expected a dotted path 'package.module:ATTR' or one of {', '.join(REFERENCE_JOBS)}",
        )
    return job


def default_config(path: str) -> Path | None:
    """``<module>.toml`` next to the job's module, if there is one."""
    module_name = path.split(":", 1)[0]
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    file = getattr(module, "__file__", None)
    if not file:
        return None
    candidate = Path(file).with_suffix(".toml")
    return candidate if candidate.is_file() else None


def _stop_quietly(spark: Any) -> None:
    """Stop Spark, then wait until its JVM and Python workers have exited, so the next
    command of a script finds the metastore and the ports free."""
    from kappaplus.core.jvm import shutdown_jvm
    from kappaplus.session import stop_session

    try:
        stop_session(spark)
    except Exception as exc:  # noqa: BLE001 - the run's outcome is already decided
        log.debug("stopping Spark: %s", exc, exc_info=True)
    shutdown_jvm()


_JOB = typer.Argument(
    None, help="Dotted path 'package.module:JOB' or a reference job name (see --list)."
)
_MODE = typer.Option(
    None,
    "--mode",
    "-m",
    help="stream (Kafka), backfill (the lake over [start, end)) or bootstrap (the lake "
    "up to --cutoff, then Kafka). Required but with --list.",
    show_default=False,
)
_START = typer.Option(None, "--start", help="Backfill/bootstrap start (ISO-8601, inclusive).")
_END = typer.Option(
    None,
    "--end",
    help="Backfill end (ISO-8601, exclusive; default the binding's `end`, else none: "
    "available-now reads to the lake's last event time, an interval follows new data).",
)
_CUTOFF = typer.Option(
    None,
    "--cutoff",
    help="Bootstrap: the lake owns event times before this (ISO-8601), Kafka the rest.",
)
_LATENESS = typer.Option(
    None,
    "--lateness",
    help="Bootstrap: read Kafka from cutoff minus this (e.g. '1 hour'; default the Hive "
    "binding's max_lateness, else 1 hour).",
)
_TRIGGER = typer.Option(
    None,
    "--trigger",
    help="available-now, once, or an interval like '10 seconds' "
    "(default: available-now for backfill, the config's trigger_interval for stream).",
)
_UNTIL_IDLE = typer.Option(
    None, "--until-idle", help="Stop once no query has read a row for this many seconds."
)
_CATCH_UP = typer.Option(
    True,
    "--catch-up/--no-catch-up",
    help="Stream/bootstrap with an interval trigger: while more than one trigger behind "
    "the head, run micro-batches back to back (available-now rounds), then the trigger.",
)
_TIMEOUT = typer.Option(
    None,
    "--timeout",
    help="Stop after this many seconds (the micro-batch under way is committed first, "
    "waiting at most 60 s more).",
)
_FRESH = typer.Option(
    False,
    "--fresh",
    help="Start over: this run's checkpoint is set aside and deleted once the run's "
    "checks pass (a refused run leaves it in place).",
)
_APPEND = typer.Option(
    False,
    "--append",
    help="Write even where an output table or topic holds another run's rows over this "
    "run's event times (deliberately: both stay). Without it such a run is refused "
    "(exit 2).",
)
_REPLACE_RANGE = typer.Option(
    False,
    "--replace-range",
    help="Backfill: replace the rows other runs wrote to the output Hive tables over "
    "this run's [start, end) with this run's, in one step for readers when it finishes "
    "(not for topics: records cannot be taken out of one).",
)
_PROGRESS = typer.Option(True, "--progress/--no-progress", help="Live progress table.")
_METRICS_PORT = typer.Option(
    None, "--metrics-port", help="Serve Prometheus metrics on this port (/metrics)."
)
_AUDIT = typer.Option(
    True, "--audit/--no-audit", help="Write per-bucket stage counts to the audit table."
)
_LIST_JOBS = typer.Option(False, "--list", help="List the reference jobs and exit.")


def run_command(
    job: str = _JOB,
    mode: str = _MODE,
    start: str = _START,
    end: str = _END,
    cutoff: str = _CUTOFF,
    lateness: str = _LATENESS,
    config: Path = _CONFIG,
    trigger: str = _TRIGGER,
    until_idle: float = _UNTIL_IDLE,
    catch_up: bool = _CATCH_UP,
    timeout: float = _TIMEOUT,
    checkpoint: Path = _CHECKPOINT,
    fresh: bool = _FRESH,
    append: bool = _APPEND,
    replace_range: bool = _REPLACE_RANGE,
    master: str = MASTER,
    metastore_uri: str = METASTORE_URI,
    progress: bool = _PROGRESS,
    metrics_port: int = _METRICS_PORT,
    audit: bool = _AUDIT,
    list_jobs: bool = _LIST_JOBS,
) -> None:
    """Run JOB in one mode: `stream` reads Kafka, `backfill` reads the lake (Hive, Iceberg or
    Delta tables) over [start, end), `bootstrap` reads the lake up to --cutoff and then
    continues from Kafka (one source).

    The same job code runs in every mode; a backfill writes to the backfill targets
    (`<table>_backfill` by default) and resumes from its checkpoint when run again; a
    bootstrap writes the production targets and keeps running on Kafka (run it again
    with the same --start/--cutoff to resume).

    Ctrl-C or SIGTERM stops cleanly: the micro-batch under way is committed, no new one
    starts; a second one stops at once (the interrupted batch is redone by the next run).
    Progress: event time done, rows/s, ETA, state rows, late rows.

    Exit status: 0 done (or a stream stopped by --timeout), 1 failed, 2 bad command line or
    config, 124 a backfill (or a bootstrap's lake phase) --timeout stopped part way, 130/143
    stopped by Ctrl-C/SIGTERM (also when sent to the whole process group).
    """
    if list_jobs:
        for name, path in REFERENCE_JOBS.items():
            _console.print(f"{name:16} {path}")
        return
    run = _prepare_run(dict(locals()))
    code = _run_prepared(run, master=master, metastore_uri=metastore_uri)
    if code:
        raise typer.Exit(code)


_RUN_OPTION_KEYS = (
    "mode",
    "start",
    "end",
    "cutoff",
    "lateness",
    "trigger",
    "until_idle",
    "catch_up",
    "timeout",
    "fresh",
    "append",
    "replace_range",
    "progress",
    "metrics_port",
    "audit",
)
"""The options of ``kappa run`` that are :class:`~kappaplus.runtime.options.RunOptions`
fields of the same name."""


@dataclass(frozen=True)
class _PreparedRun:
    """A ``kappa run`` checked before Spark starts: the job, its config, its options."""

    path: str
    job: Any
    config_file: Path
    config: Any
    options: Any


def _prepare_run(given: dict[str, Any]) -> _PreparedRun:
    """The job, config and run options of the command line, checked before Spark starts;
    a user error exits 2 naming the option."""
    from kappaplus.config import load_config
    from kappaplus.jobs import load_job
    from kappaplus.runtime.options import RunOptions
    from kappaplus.runtime.state.checkpoints import check_before_spark, check_shared_checkpoint

    if given["job"] is None:
        raise error_exit(_console, ConfigError("JOB", None, "name the job to run (or --list)"))
    if given["mode"] is None:
        raise error_exit(
            _console, ConfigError("--mode", None, "choose stream, backfill or bootstrap")
        )
    import_from_cwd()
    try:
        path = job_path(given["job"])
        loaded = load_job(path)
        config_file = given["config"] or default_config(path)
        if config_file is None:
            raise ConfigError("--config", None, f"no config given and no TOML next to {path}")
        job_config = load_config(config_file)
        options = RunOptions(
            **{key: given[key] for key in _RUN_OPTION_KEYS},
            checkpoint_root=given["checkpoint"],
        )
        named_master = given["master"] or os.environ.get("KAPPA_SPARK_MASTER")
        if named_master:  # spark-submit's master is known once the session is up
            check_shared_checkpoint(job_config, options, named_master)
        check_before_spark(loaded, job_config, options)
    except KappaError as exc:
        raise error_exit(_console, exc) from exc
    return _PreparedRun(path, loaded, Path(config_file), job_config, options)


def _run_prepared(run: _PreparedRun, *, master: str | None, metastore_uri: str | None) -> int:
    """Open the session, run the job, print the summary; the run's exit status."""
    from kappaplus.core.jvm import shutdown_jvm
    from kappaplus.runtime.failures import explain
    from kappaplus.runtime.failures import metastore_uri as metastore_of
    from kappaplus.runtime.runner import run_job
    from kappaplus.runtime.state.records import exit_code
    from kappaplus.state_store import STATE_STORE_SETTINGS

    try:
        spark = command_session(
            f"kappa-{run.job.name}-{run.options.mode}",
            master=master,
            metastore_uri=metastore_uri,
            defaults=STATE_STORE_SETTINGS,
        )
    except KappaError as exc:
        raise error_exit(_console, exc) from exc
    except KeyboardInterrupt:
        shutdown_jvm()
        raise typer.Exit(130) from None
    try:
        result = run_job(
            spark,
            run.job,
            run.config,
            run.options,
            job_path=run.path,
            config_file=str(run.config_file.resolve()),
            console=_console,
        )
    except KappaError as exc:
        raise error_exit(_console, exc) from exc
    except Exception as exc:  # a Spark or py4j failure: one line here, the rest in the log
        log.debug("run failed", exc_info=True)
        detail = f"{type(exc).__name__}: {exc}"
        raise error_exit(
            _console, KappaError(explain(detail, metastore_uri=metastore_of(spark)))
        ) from exc
    finally:
        _stop_quietly(spark)
    print_summary(result.record)
    return exit_code(result.record)


def summary_lines(record: Any) -> list[str]:
    """The end summary of a run as lines of at most 80 columns (but for long names).

    Rows are the rows the job received (end-of-input markers excluded), the same number the
    live table showed; batches are counted as slices (data) + marker batches; rows/s is the
    run's own throughput over its data batches.
    """
    elapsed = (record.ended_at or time.time()) - record.started_at
    why = f" ({record.stopped_by})" if record.stopped_by else ""
    lines = [
        f"{record.run_id}: {record.status}{why} after {format_seconds(elapsed)}",
        f"  {record.mode}, trigger {record.trigger}",
        f"  {'output':<16} {'batches':>9} {'rows':>11} {'rows/s':>9} {'late':>7} "
        f"{'state':>8} {'done':>6}",
    ]
    for name, stats in record.outputs.items():
        done = stats.get("done")
        data = stats.get("data_batches", stats.get("batches", 0))
        markers = stats.get("marker_batches", 0)
        batches = f"{data}+{markers}" if markers else str(data)
        rows = stats.get("rows", stats.get("input_rows", 0))
        rate = stats.get("throughput")
        lines.append(
            f"  {name[:16]:<16} {batches:>9} {rows:>11,} "
            f"{'-' if rate is None else f'{rate:,.0f}':>9} "
            f"{stats.get('rows_dropped_late', 0):>7,} {_thousands(stats.get('state_rows', 0)):>8} "
            f"{'-' if done is None else f'{done:.1%}':>6}"
        )
    caught = max((s.get("catch_up_batches") or 0 for s in record.outputs.values()), default=0)
    if caught:
        lines.append(f"  caught up: {caught:,} batches back to back before the trigger")
    if any(stats.get("marker_batches") for stats in record.outputs.values()):
        lines.append("  batches: slices+end-of-input marker batches; rows/s over the slices")
    for name, targets in record.targets.items():
        lines.append(f"  {name} -> {', '.join(targets)}")
    for name, counts in record.inputs.items():
        if "dead_letters" in counts:
            lines.append(
                f"  input {name}: {counts['dead_letters']:,} rows no slice could place, in "
                f"{counts.get('dead_letter_table')}"
            )
            continue
        if "dead_letter_error" in counts:
            lines.append(
                f"  input {name}: dead letters NOT published: {counts['dead_letter_error']}"
            )
            continue
        lines.append(f"  input {name}: {json.dumps(counts, sort_keys=True)}")
    counted = {
        stats.get("late_counted", "spark groups")
        for stats in record.outputs.values()
        if stats.get("rows_dropped_late")
    }
    if counted <= {"rows"}:
        lines.append(f"  late rows (dropped by the watermark, kept): {record.rows_dropped_late:,}")
    else:
        lines.append(
            f"  dropped as late by the watermark: {record.rows_dropped_late:,} (Spark's count, "
            "after partial aggregation: groups, not rows, where late rows are not kept)"
        )
    if record.status == "stopped":
        lines.append("  the checkpoints are intact: the same command resumes this run")
    return lines


def print_summary(record: Any) -> None:
    """The final summary of a run (:func:`summary_lines`)."""
    _console.print()
    for line in summary_lines(record):
        _console.print(line, markup=False, highlight=False, soft_wrap=True)


def _short_time(epoch: float | None) -> str:
    return "-" if not epoch else time.strftime("%m-%d %H:%M", time.localtime(epoch))


def _count(value: int | None) -> str:
    """``12``, ``12.3k``, ``4.5M``: counts in at most 6 characters."""
    if value is None:
        return "-"
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.1f}{suffix}"
    return str(value)


def compact_status_lines(rows: list[dict[str, Any]], width: int = 80) -> list[str]:
    """``kappa status`` without ``--wide``: one line per run, at most ``width`` columns
    (an error or the position of a running backfill on a second, indented line)."""
    fixed = 9 + 12 + 12 + 7 + 7 + 6 + 6 + 7  # mode, status, started, done, rows, late, dlq
    job_width = max(8, width - fixed)
    header = (
        f"{'JOB':<{job_width}}{'MODE':<9}{'STATUS':<12}{'STARTED':<12}"
        f"{'DONE':>7}{'ROWS':>7}{'LATE':>6}{'DLQ':>6}"
    )
    lines = [header[:width]]
    for row in rows:
        job = row["job"] if len(row["job"]) < job_width else row["job"][: job_width - 2] + "~"
        status = row["status"] + ("*" if row["stopped_by"] else "")
        done = "-" if row["done"] is None else f"{row['done']:.0%}"
        line = (
            f"{job:<{job_width}}{row['mode'][:8]:<9}{status[:11]:<12}"
            f"{_short_time(row['started_at']):<12}{done:>7}{_count(row['rows']):>7}"
            f"{_count(row['rows_dropped_late']):>6}{_count(row['dead_letters']):>6}"
        )
        lines.append(line[:width])
        if row["error"]:
            lines.append(("  " + " ".join(str(row["error"]).split()))[: width - 1])
    lines.append(
        "* stopped (ctrl-c, sigterm or timeout: the same command resumes)."[:width]
        if any(row["stopped_by"] for row in rows)
        else ""
    )
    lines.append("--wide: run ids, ranges, checkpoints; --json for scripts"[:width])
    return [line for line in lines if line]


_STATUS_COMMAND_JOB = typer.Option(None, "--job", "-j", help="Only runs of this job (name).")
_AS_JSON = typer.Option(False, "--json", help="Print JSON (every field) for scripts.")
_WIDE = typer.Option(
    False, "--wide", "-w", help="A wide table: run ids, ranges and checkpoint positions."
)
_LIMIT = typer.Option(20, "--limit", "-n", help="Show the latest N runs.")


def status_command(
    job: str = _STATUS_COMMAND_JOB,
    as_json: bool = _AS_JSON,
    wide: bool = _WIDE,
    limit: int = _LIMIT,
) -> None:
    """List recorded runs and where they stand (run records + checkpoint offset logs),
    then the local services running (kappa up: broker, metastore server, s3 store).

    The default fits 80 columns: job, mode, status, start, event time done, rows, rows
    dropped as late and dead letters. --wide adds run ids, ranges and where each
    checkpoint stands; --json prints the runs only, with every field.
    """
    from kappaplus.runtime.state.run_status import status_rows

    rows = status_rows(job, limit)
    if as_json:
        print(json.dumps(rows, indent=2, default=str))
        return
    _show_runs(rows, wide)
    from kappaplus.cli.stack import running_services

    services = running_services()
    _console.print(
        "local services: " + ", ".join(services) if services else "no local services running",
        style="dim",
        markup=False,
    )


def _show_runs(rows: list[dict[str, Any]], wide: bool) -> None:
    """The runs of ``kappa status`` as 80-column lines, or as a wide table."""
    if not rows:
        _console.print("no runs recorded")
        return
    if not wide:
        for line in compact_status_lines(rows, max(60, _console.width)):
            print(line)
        return
    table = Table()
    for column in ("run", "job", "mode", "status", "range", "done", "late", "dlq", "checkpoints"):
        table.add_column(column, overflow="fold")
    for row in rows:
        parts = []
        for name, state in row["checkpoints"].items():
            where = state["position"] or "-"
            pending = " (batch pending)" if state["pending"] else ""
            parts.append(f"{name}: batch {state['committed']}{pending} {where}")
        cells = (
            row["run_id"],
            row["job"],
            row["mode"],
            row["status"] + (f" ({row['stopped_by']})" if row["stopped_by"] else ""),
            row["range"],
            "-" if row["done"] is None else f"{row['done']:.1%}",
            str(row["rows_dropped_late"]),
            str(row["dead_letters"]),
            "\n".join(parts),
        )
        table.add_row(*(escape(cell) for cell in cells))  # as written: "[...]" is no style
    _console.print(table)


def register(app: typer.Typer) -> None:
    """Add ``run`` and ``status`` to the ``kappa`` command line."""
    app.command("run")(run_command)
    app.command("status")(status_command)


def _thousands(value: int | None) -> str:
    """A count with thousands separators; ``-`` where it was not counted."""
    return "-" if value is None else f"{value:,}"
