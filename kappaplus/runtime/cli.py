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
import sys
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from kappaplus.errors import ConfigError, KappaError
from kappaplus.runtime.progress import format_seconds

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
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def import_from_cwd() -> None:
    """Let job modules import from the working directory, as ``python -m`` does.

    The ``kappa`` console script puts its own directory on ``sys.path``, not the working
    directory, so ``kappa run myjobs.rides:JOB`` run from the folder holding ``myjobs/``
    would not find the module otherwise.
    """
    cwd = os.getcwd()
    if not any(entry in ("", cwd) or os.path.abspath(entry) == cwd for entry in sys.path):
        sys.path.insert(0, cwd)


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
    from kappaplus.jvm import shutdown_jvm
    from kappaplus.session import stop_session

    try:
        stop_session(spark)
    except Exception as exc:  # noqa: BLE001 - the run's outcome is already decided
        log.debug("stopping Spark: %s", exc, exc_info=True)
    shutdown_jvm()


def _fail(exc: Exception) -> typer.Exit:
    from rich.markup import escape

    from kappaplus.masking import mask_credentials

    _console.print(f"[red]error:[/red] {escape(mask_credentials(str(exc)))}")
    return typer.Exit(2 if isinstance(exc, ConfigError) else 1)


def run_command(
    job: str = typer.Argument(
        None, help="Dotted path 'package.module:JOB' or a reference job name (see --list)."
    ),
    mode: str = typer.Option(
        ...,
        "--mode",
        "-m",
        help="stream (Kafka), backfill (Hive over [start, end)) or bootstrap (Hive up to "
        "--cutoff, then Kafka).",
    ),
    start: str = typer.Option(
        None, "--start", help="Backfill/bootstrap start (ISO-8601, inclusive)."
    ),
    end: str = typer.Option(None, "--end", help="Backfill end (ISO-8601, exclusive)."),
    cutoff: str = typer.Option(
        None,
        "--cutoff",
        help="Bootstrap: the lake owns event times before this (ISO-8601), Kafka the rest.",
    ),
    lateness: str = typer.Option(
        None,
        "--lateness",
        help="Bootstrap: read Kafka from cutoff minus this (e.g. '1 hour'; default the Hive "
        "binding's max_lateness, else 1 hour).",
    ),
    config: Path = _CONFIG,
    trigger: str = typer.Option(
        None,
        "--trigger",
        help="available-now, once, or an interval like '10 seconds' "
        "(default: available-now for backfill, the config's trigger_interval for stream).",
    ),
    until_idle: float = typer.Option(
        None, "--until-idle", help="Stop once no query has read a row for this many seconds."
    ),
    timeout: float = typer.Option(None, "--timeout", help="Stop after this many seconds."),
    checkpoint: Path = _CHECKPOINT,
    fresh: bool = typer.Option(
        False, "--fresh", help="Delete this mode's checkpoints first and start over."
    ),
    master: str = typer.Option(None, "--master", help="Spark master URL (default local[2])."),
    metastore_uri: str = typer.Option(
        None, "--metastore-uri", help="Hive metastore thrift URI (default: embedded)."
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Live progress table."),
    metrics_port: int = typer.Option(
        None, "--metrics-port", help="Serve Prometheus metrics on this port (/metrics)."
    ),
    audit: bool = typer.Option(
        True, "--audit/--no-audit", help="Write per-bucket stage counts to the audit table."
    ),
    list_jobs: bool = typer.Option(False, "--list", help="List the reference jobs and exit."),
) -> None:
    """Run JOB in one mode: `stream` reads Kafka, `backfill` reads Hive over [start, end),
    `bootstrap` reads Hive up to --cutoff and then continues from Kafka (one source).

    The same job code runs in every mode; a backfill writes to the backfill targets
    (`<table>_backfill` by default) and resumes from its checkpoint when run again; a
    bootstrap writes the production targets and keeps running on Kafka (run it again
    with the same --start/--cutoff to resume).

    Ctrl-C stops cleanly. Progress: event time done, rows/s, ETA, state rows, late rows.

    Exit status: 0 done (or a stream stopped by --timeout), 1 failed, 2 bad command line or
    config, 124 a backfill (or a bootstrap's lake phase) --timeout stopped part way, 130/143
    stopped by Ctrl-C/SIGTERM (also when sent to the whole process group).
    """
    from kappaplus.config import load_config
    from kappaplus.jobs import load_job
    from kappaplus.jvm import shutdown_jvm
    from kappaplus.local.metastore import LOCAL_DISCOVERY
    from kappaplus.runtime.failures import explain
    from kappaplus.runtime.options import RunOptions
    from kappaplus.runtime.records import exit_code
    from kappaplus.runtime.runner import check_before_spark, run_job
    from kappaplus.session import create_session

    if list_jobs:
        for name, path in REFERENCE_JOBS.items():
            _console.print(f"{name:16} {path}")
        return
    if job is None:
        raise _fail(ConfigError("JOB", None, "name the job to run (or --list)"))
    import_from_cwd()
    try:
        path = job_path(job)
        loaded = load_job(path)
        config_file = config or default_config(path)
        if config_file is None:
            raise ConfigError("--config", None, f"no config given and no TOML next to {path}")
        job_config = load_config(config_file)
        options = RunOptions(
            mode=mode,  # type: ignore[arg-type]
            start=start,
            end=end,
            cutoff=cutoff,
            lateness=lateness,
            trigger=trigger,
            until_idle=until_idle,
            timeout=timeout,
            checkpoint_root=checkpoint,
            fresh=fresh,
            progress=progress,
            metrics_port=metrics_port,
            audit=audit,
        )
        check_before_spark(loaded, job_config, options)
    except KappaError as exc:
        raise _fail(exc) from exc
    try:
        spark = create_session(
            f"kappa-{loaded.name}-{mode}",
            master=master,
            metastore_uri=metastore_uri,
            metastore_discovery=LOCAL_DISCOVERY,
            conf={"spark.sql.streaming.stateStore.providerClass": ROCKSDB},
        )
    except KappaError as exc:
        raise _fail(exc) from exc
    except KeyboardInterrupt:
        shutdown_jvm()
        raise typer.Exit(130) from None
    try:
        result = run_job(
            spark,
            loaded,
            job_config,
            options,
            job_path=path,
            config_file=str(Path(config_file).resolve()),
            console=_console,
        )
    except KappaError as exc:
        raise _fail(exc) from exc
    except Exception as exc:  # a Spark or py4j failure: one line here, the rest in the log
        log.debug("run failed", exc_info=True)
        raise _fail(KappaError(explain(f"{type(exc).__name__}: {exc}"))) from exc
    finally:
        _stop_quietly(spark)
    print_summary(result.record)
    code = exit_code(result.record)
    if code:
        raise typer.Exit(code)


def print_summary(record: Any) -> None:
    """The final summary of a run."""
    elapsed = (record.ended_at or time.time()) - record.started_at
    _console.print()
    why = f" ({record.stopped_by})" if record.stopped_by else ""
    _console.print(
        f"[bold]{record.run_id}[/bold]: {record.status}{why} after {format_seconds(elapsed)}"
        f" ({record.mode}, trigger {record.trigger})"
    )
    table = Table("output", "targets", "batches", "rows in", "late dropped", "state rows", "done")
    for name, stats in record.outputs.items():
        done = stats.get("done")
        received = [
            counts.get("rows", 0)
            for metric, counts in stats.get("observed", {}).items()
            if metric.startswith("kappa_input_")
        ]
        table.add_row(
            name,
            ", ".join(record.targets.get(name, [])),
            str(stats.get("batches", 0)),
            str(sum(received) if received else stats.get("input_rows", 0)),
            str(stats.get("rows_dropped_late", 0)),
            str(stats.get("state_rows", 0)),
            "-" if done is None else f"{done:.1%}",
        )
    _console.print(table)
    for name, counts in record.inputs.items():
        _console.print(f"input {name}: {json.dumps(counts, sort_keys=True)}")
    _console.print(f"rows dropped as late (watermark): {record.rows_dropped_late}")
    if record.status == "stopped":
        _console.print("the checkpoints are intact: the same command resumes this run")


def status_command(
    job: str = typer.Option(None, "--job", "-j", help="Only runs of this job (name)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    limit: int = typer.Option(20, "--limit", "-n", help="Show the latest N runs."),
) -> None:
    """List recorded runs and where they stand (run records + checkpoint offset logs)."""
    from kappaplus.runtime.records import list_runs, read_checkpoint

    records = [r for r in list_runs() if job is None or r.job == job][-limit:]
    rows: list[dict[str, Any]] = []
    for record in records:
        checkpoints = {name: read_checkpoint(path) for name, path in record.checkpoints.items()}
        done = [d for d in (c.done() for c in checkpoints.values()) if d is not None]
        rows.append(
            {
                "run_id": record.run_id,
                "job": record.job,
                "mode": record.mode,
                "status": record.effective_status(),
                "stopped_by": record.stopped_by,
                "range": f"[{record.start or '-'}, {record.end or '-'})",
                "done": min(done) if done else record.done,
                "rows_dropped_late": record.rows_dropped_late,
                "checkpoints": {
                    name: {
                        "path": state.path,
                        "last_batch": state.last_offset_batch,
                        "committed": state.last_commit_batch,
                        "pending": state.pending,
                        "position": state.position(),
                    }
                    for name, state in checkpoints.items()
                },
                "error": record.error,
            }
        )
    if as_json:
        print(json.dumps(rows, indent=2, default=str))
        return
    if not rows:
        _console.print("no runs recorded")
        return
    table = Table()
    for column in ("run", "job", "mode", "status", "range", "done", "late", "checkpoints"):
        table.add_column(column, overflow="fold")
    for row in rows:
        parts = []
        for name, state in row["checkpoints"].items():
            where = state["position"] or "-"
            pending = " (batch pending)" if state["pending"] else ""
            parts.append(f"{name}: batch {state['committed']}{pending} {where}")
        table.add_row(
            row["run_id"],
            row["job"],
            row["mode"],
            row["status"] + (f" ({row['stopped_by']})" if row["stopped_by"] else ""),
            row["range"],
            "-" if row["done"] is None else f"{row['done']:.1%}",
            str(row["rows_dropped_late"]),
            "\n".join(parts),
        )
    _console.print(table)


def register(app: typer.Typer) -> None:
    """Add ``run`` and ``status`` to the ``kappa`` command line."""
    app.command("run")(run_command)
    app.command("status")(status_command)
