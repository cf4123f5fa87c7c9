"""``kappa dlq replay`` and ``kappa dlq trail``: dead letters back through the fixed job."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from kappaplus.cli.errors import error_exit
from kappaplus.cli.session_options import METASTORE_URI, command_session
from kappaplus.core.errors import ConfigError, KappaError

app = typer.Typer(
    help="Dead letters of a Kafka input: replay them through the fixed decoder and job.",
    no_args_is_help=True,
)
_console = Console()
_CONFIG = typer.Option(None, "--config", "-c", help="Job config TOML (default: next to JOB).")
_INPUT = typer.Option(None, "--input", "-i", help="The input (if the job has several).")
_CHECKPOINT = typer.Option(
    None, "--checkpoint", help="Checkpoint root (default: the config's checkpoint_dir)."
)


def _when(value: str | None, option: str) -> datetime | None:
    from kappaplus.core.timeutil import from_micros, parse_timestamp

    return None if value is None else from_micros(parse_timestamp(value, option))


def _plan(job: str, config: Path | None, input_name: str | None, checkpoint: Path | None) -> Any:
    """(job, input name, a function building the replay plan, dead-letter target, ledger)
    of JOB, checked without Spark."""
    from kappaplus.cli.run import default_config, job_path
    from kappaplus.config import load_config, resolve
    from kappaplus.core.modes import Mode
    from kappaplus.core.timeutil import parse_timestamp
    from kappaplus.dead_letters.replay import ReplayLedger, ReplayPlan, ledger_path
    from kappaplus.dead_letters.targets import DeadLetterTarget
    from kappaplus.jobs import load_job
    from kappaplus.runtime.binding.kafka_inputs import decoder_spec
    from kappaplus.runtime.options import RunOptions
    from kappaplus.runtime.state.checkpoints import checkpoint_root

    path = job_path(job)
    loaded = load_job(path)
    config_file = config or default_config(path)
    if config_file is None:
        raise ConfigError("--config", None, f"no config given and no TOML next to {path}")
    job_config = load_config(config_file)
    resolved = resolve(job_config, "stream", loaded)
    input_name = loaded.chosen_input(input_name)
    spec = next(s for s in loaded.inputs if s.name == input_name)
    binding = resolved.inputs[input_name]
    kafka = binding.kafka
    if kafka is None:
        raise ConfigError(f"inputs.{input_name}.kafka", None, "replay needs the input's topic")
    target = DeadLetterTarget.of_kafka_input(kafka)
    if target is None:
        raise ConfigError(
            f"inputs.{input_name}.kafka.dlq",
            None,
            "its dead letters are discarded (dlq = { discard = true }): nothing to replay",
        )
    bounds = binding.bounds
    settings = {k.removeprefix("kafka."): v for k, v in kafka.options.items()}
    settings.pop("bootstrap.servers", None)

    def build_plan() -> ReplayPlan:
        """The plan (its decoder parses the job's DDL: needs a running Spark)."""
        return ReplayPlan(
            topic=kafka.topic,
            bootstrap=kafka.bootstrap_servers,
            decoder=decoder_spec(spec, kafka),
            bounds_min=None if bounds.min is None else parse_timestamp(bounds.min, "min"),
            bounds_max=None if bounds.max is None else parse_timestamp(bounds.max, "max"),
            max_future=None if bounds.max_future is None else bounds.max_future.micros,
            producer_settings=settings,
        )

    root = checkpoint_root(job_config, RunOptions(Mode.STREAM, checkpoint_root=checkpoint))
    ledger = ReplayLedger(ledger_path(root, loaded.name, input_name))
    return loaded, input_name, build_plan, target, ledger


_JOB = typer.Argument(..., help="Dotted path 'package.module:JOB' or a reference job.")
_REASON = typer.Option(None, "--reason", help="Only dead letters whose reason contains this text.")
_SINCE = typer.Option(None, "--since", help="Dead-letter time from (ISO-8601, UTC).")
_UNTIL = typer.Option(None, "--until", help="Dead-letter time before (exclusive).")
_DRY_RUN = typer.Option(
    False, "--dry-run", help="Decode again and say what would happen; produce nothing."
)
_AS_JSON = typer.Option(False, "--json", help="Print JSON.")


@app.command("replay")
def replay_command(
    job: str = _JOB,
    input_name: str = _INPUT,
    config: Path = _CONFIG,
    reason: str = _REASON,
    since: str = _SINCE,
    until: str = _UNTIL,
    dry_run: bool = _DRY_RUN,
    checkpoint: Path = _CHECKPOINT,
    as_json: bool = _AS_JSON,
    metastore_uri: str = METASTORE_URI,
) -> None:
    """Decode the dead letters of JOB's Kafka input again with the config's CURRENT decoder
    and event-time bounds; produce those that now decode back to the input's topic (each
    once, also across crashes; headers kappa-replay-of/-id name the original record), where
    the stream reads them; those that fail again stay, with the new reason recorded.

    Exit status: 0 done (also when some failed again: see the counts), 1 failed (the same
    command resumes; nothing is produced twice), 2 bad command line or config.
    """
    from rich.progress import Progress

    from kappaplus.dead_letters.replay import read_dead_letters, replay_dead_letters, select
    from kappaplus.session import stop_session

    try:
        _, name, build_plan, target, ledger = _plan(job, config, input_name, checkpoint)
        low, high = _when(since, "--since"), _when(until, "--until")
    except KappaError as exc:
        raise error_exit(_console, exc, wrap=False) from exc
    # Spark parses the job's declared schema (the decoder) and reads a dead-letter table
    spark = command_session("kappa-dlq-replay", metastore_uri=metastore_uri)
    try:
        plan = build_plan()
        letters = select(
            read_dead_letters(target, plan.topic, spark), reason=reason, since=low, until=high
        )
        with Progress(console=_console, transient=True) as bar:
            task = bar.add_task(f"replaying {name}", total=None)

            def advance(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            result = replay_dead_letters(letters, plan, ledger, dry_run=dry_run, progress=advance)
    except KappaError as exc:
        raise error_exit(_console, exc, wrap=False) from exc
    finally:
        stop_session(spark)
    if as_json:
        print(json.dumps({**result.as_json(), "dry_run": dry_run, "ledger": str(ledger.path)}))
        return
    _print_replay(result, name=name, topic=plan.topic, dry_run=dry_run)
    if not dry_run:
        _console.print(f"ledger: {ledger.path} (kappa dlq trail {job})", soft_wrap=True)


def _print_replay(result: Any, *, name: str, topic: str, dry_run: bool) -> None:
    """The replay's counts, and the first reasons of those still failing."""
    verb = "would replay" if dry_run else "replayed"
    _console.print(
        f"{name}: {result.selected} dead letters selected; {verb} {result.replayed} to "
        f"{topic}; {result.failed_again} failed again; {result.already} replayed "
        f"before (not again)"
        + (
            f"; {result.recovered_after_crash} found produced by a replay cut short"
            if result.recovered_after_crash
            else ""
        ),
        soft_wrap=True,
    )
    for coordinate, why in list(result.reasons.items())[:5]:
        _console.print(f"  still failing {coordinate}: {why}", soft_wrap=True, markup=False)


@app.command("trail")
def trail_command(
    job: str = typer.Argument(..., help="Dotted path 'package.module:JOB' or a reference job."),
    input_name: str = _INPUT,
    config: Path = _CONFIG,
    checkpoint: Path = _CHECKPOINT,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """The replay attempts of each dead letter of JOB's input: failed again (with the new
    reason) or produced again (where). No Spark, no broker."""
    try:
        _, name, _, _, ledger = _plan(job, config, input_name, checkpoint)
    except KappaError as exc:
        raise error_exit(_console, exc, wrap=False) from exc
    trail = ledger.trail()
    if as_json:
        print(json.dumps(trail))
        return
    if not trail:
        _console.print(f"{name}: no replays recorded ({ledger.path})")
        return
    for coordinate, attempts in trail.items():
        steps = [
            f"produced at {a['partition']}/{a['offset']}"
            if a["kind"] == "produced"
            else f"failed again: {a['reason']}"
            for a in attempts
        ]
        _console.print(f"{coordinate}: " + "; ".join(steps), soft_wrap=True, markup=False)
