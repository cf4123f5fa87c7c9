"""What ``kappa promote`` swaps, and whether the backfill behind it finished: pure Python, so
these refusals come before Spark starts.

The tables come from the job config: the production table is the output's ``[...hive]``
table as a stream resolves it, the backfill table the one a backfill writes (``backfill_table``
or ``<table>_backfill``, :func:`kappaplus.config.resolve`), and the previous production table
is kept as ``<table>_previous``. The backfill run is the one whose checkpoint the config's
backfill binding names (``<root>/<job>/backfill/<binding hash>``,
:func:`kappaplus.runtime.state.identity.run_dir`): it finished when no live process holds it, its
query for the output committed every batch it planned, and its lake sources reached the
end of the recorded range.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kappaplus.core.errors import ConfigError, StateError
from kappaplus.core.modes import Mode

if TYPE_CHECKING:
    from kappaplus.config import JobConfig
    from kappaplus.jobs import Job

PREVIOUS_SUFFIX = "_previous"


class PromoteError(StateError):
    """A promotion refused: the backfill, a table or the reconciliation is not ready."""


@dataclass(frozen=True)
class PromotePlan:
    """One output's promotion: the three table names and the backfill run behind it."""

    job: str
    output: str
    production: str
    backfill: str
    previous: str
    backfill_checkpoint: Path
    """The backfill run's checkpoint directory (one query per output below it)."""
    event_time_column: str | None = None
    range: dict[str, str | None] = field(default_factory=dict)
    """``start``/``end`` of the backfill, as its checkpoint identity records them."""
    run_id: str | None = None
    """The backfill's run record (``kappa status``), when one is found."""
    identity_key: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "output": self.output,
            "production_table": self.production,
            "backfill_table": self.backfill,
            "previous_table": self.previous,
            "backfill_checkpoint": str(self.backfill_checkpoint),
            "backfill_range": self.range,
            "backfill_run": self.run_id,
            "backfill_identity": self.identity_key,
        }


def promote_plan(
    job: Job, config: JobConfig, output: str | None, checkpoint_root: Path | None = None
) -> PromotePlan:
    """The tables of ``output`` (the job's only output when None) and its backfill run's
    checkpoint; :class:`ConfigError` when the output has no Hive table."""
    from kappaplus.config import resolve
    from kappaplus.core.modes import Mode
    from kappaplus.runtime.state.checkpoints import mode_checkpoint

    output = job.chosen_output(output)
    production = resolve(config, "stream", job).outputs[output].hive
    backfill = resolve(config, "backfill", job).outputs[output].hive
    if production is None or backfill is None:
        raise ConfigError(
            f"outputs.{output}.hive", None, "kappa promote swaps Hive tables: this output has none"
        )
    directory, identity = mode_checkpoint(job, config, Mode.BACKFILL, checkpoint_root)
    spec = job.output(output)
    return PromotePlan(
        job=job.name,
        output=output,
        production=production.table,
        backfill=backfill.table,
        previous=f"{production.table}{PREVIOUS_SUFFIX}",
        backfill_checkpoint=directory,
        event_time_column=spec.event_time_column,
        identity_key=identity.key(),
    )


def _sources_ended(sources: tuple[Any, ...]) -> bool:
    """Every lake source of a backfill batch reached the end of its range."""
    lake = [s for s in sources if isinstance(s, dict) and "phase" in s]
    return bool(lake) and all(
        s.get("phase") == "end" or float(s.get("done") or 0.0) >= 1.0 for s in lake
    )


def check_backfill_finished(plan: PromotePlan, command: str = "kappa run <job>") -> PromotePlan:
    """``plan`` with the backfill's range and run id, or :class:`PromoteError` naming the
    checkpoint and the command that finishes it (``command``: how the user runs the job)."""
    from dataclasses import replace

    from kappaplus.runtime.state.checkpoints import LOCK_FILE
    from kappaplus.runtime.state.identity import IDENTITY_FILE
    from kappaplus.runtime.state.locks import check_free
    from kappaplus.runtime.state.records import list_runs, read_checkpoint

    directory = plan.backfill_checkpoint
    how = f"{command} --mode backfill --start <start> --end <end> (into {plan.backfill})"
    marker = directory / IDENTITY_FILE
    if not marker.is_file():
        raise PromoteError(
            f"no backfill of job {plan.job} into {plan.backfill} has run with this config (no "
            f"checkpoint {directory}): run {how} first"
        )
    check_free(directory / LOCK_FILE, f"the backfill checkpoint {directory}")
    try:
        recorded = json.loads(marker.read_text())
    except (OSError, ValueError) as exc:
        raise PromoteError(
            f"the backfill checkpoint's identity {marker} is unreadable: {exc}"
        ) from None
    span = dict(recorded.get("range") or {})
    runs = [
        r
        for r in list_runs()
        if Mode(r.mode).writes_backfill_targets
        and (r.identity or {}).get("key") == plan.identity_key
    ]
    run_id = runs[-1].run_id if runs else None
    state = read_checkpoint(directory / plan.output)
    shown = f"[{span.get('start') or '-'}, {span.get('end') or '-'})"
    if not state.exists or state.last_commit_batch is None:
        raise PromoteError(
            f"the backfill of {plan.backfill} over {shown} committed no batch yet (checkpoint "
            f"{directory / plan.output}): run {how} to completion first"
        )
    if state.pending or not _sources_ended(state.sources):
        done = state.done()
        where = "" if done is None else f", {done:.0%} of the range done"
        again = f"{command} --mode backfill --start {span.get('start')} --end {span.get('end')}"
        raise PromoteError(
            f"the backfill of {plan.backfill} over {shown} did not finish (run "
            f"{run_id or '?'}: batch {state.last_commit_batch} committed{where}): run the same "
            f"backfill again to complete it ({again}), then promote"
        )
    return replace(plan, range=span, run_id=run_id)
