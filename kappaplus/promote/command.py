"""What ``kappa promote`` does once its options are parsed: decide the step (promote, resume
a stopped promotion, undo, or show the journal) before Spark starts, carry it out in a
session, and say what became of the tables. The command line (:mod:`kappaplus.cli.promote`)
only parses options, opens the session and prints."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kappaplus.promote.plan import PromoteError, check_backfill_finished, promote_plan
from kappaplus.promote.swap import DONE, PROMOTING, UNDOING, UNDONE, journal_path, read_journal

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class PromotionStep:
    """A promotion to start, resume or undo, checked as far as it can be without Spark."""

    job: Any
    config: Any
    plan: Any
    journal: dict[str, Any] | None
    undo: bool
    resuming: bool


def _stream_free(job: Any, config: Any, output: str, checkpoint: Path | None) -> None:
    """Refuse while the production stream runs: its sink writes the production name."""
    from kappaplus.runtime.state.checkpoints import LOCK_FILE, stream_checkpoint
    from kappaplus.runtime.state.locks import check_free

    run = stream_checkpoint(job, config, output, checkpoint).parent
    check_free(run / LOCK_FILE, f"the production stream (checkpoint {run}); stop it, promote")


def prepare_promotion(
    job: Any,
    config: Any,
    *,
    job_name: str,
    output: str | None,
    config_given: Path | None,
    checkpoint: Path | None,
    undo: bool,
    again: Callable[[str], str],
) -> PromotionStep:
    """The step ``kappa promote`` is asked for (``job_name`` and ``config_given`` as the user
    wrote them, and ``again(output)``, the command line for an output, for the advice in
    refusals); :class:`PromoteError` when it is refused."""
    plan = promote_plan(job, config, output, checkpoint)
    journal = read_journal(plan.production)
    if undo:
        if journal is None or journal.get("status") == UNDONE:
            raise PromoteError(
                f"no promotion into {plan.production} to undo ({journal_path(plan.production)})"
            )
    elif journal is not None and journal.get("status") == UNDOING:
        raise PromoteError(
            f"promotion {journal['id']} stopped while being undone: finish with "
            f"{again(plan.output)} --undo"
        )
    resuming = not undo and journal is not None and journal.get("status") == PROMOTING
    if not undo and not resuming:
        given = f" -c {config_given}" if config_given is not None else ""
        plan = check_backfill_finished(plan, f"kappa run {job_name}{given}")
        _stream_free(job, config, plan.output, checkpoint)
    return PromotionStep(job, config, plan, journal, undo, resuming)


def carry_out(
    spark: SparkSession, step: PromotionStep, *, force: bool, say: Callable[[str], object]
) -> dict[str, Any]:
    """Promote, resume or undo in ``spark``; the journal record it ends with."""
    from kappaplus.promote.checks import check_ready, check_tables, writers_since_promotion
    from kappaplus.promote.swap import new_record
    from kappaplus.promote.swap import promote as run_promotion
    from kappaplus.promote.swap import undo as run_undo

    plan, journal = step.plan, step.journal
    if step.undo:
        assert journal is not None
        writers = writers_since_promotion(spark, journal) if not force else []
        if journal.get("status") == DONE and writers:
            raise PromoteError(
                f"{plan.production} has batches of {', '.join(writers)} written since "
                f"promotion {journal['id']}: undoing would move them out of readers' "
                f"sight (to {plan.backfill}); stop that run first, or pass --force"
            )
        return run_undo(spark, journal)
    if step.resuming:
        assert journal is not None
        steps = [s["step"] for s in journal.get("steps", [])]
        say(
            f"resuming promotion {journal['id']} (stopped after: {steps[-1] if steps else 'start'})"
        )
        return run_promotion(spark, journal)
    check_tables(spark, plan)
    readiness = check_ready(spark, step.job, step.config, plan)
    if readiness.problems and not force:
        raise PromoteError(
            f"not promoting {plan.backfill}: {'; '.join(readiness.problems)}; "
            "pass --force to promote anyway"
        )
    record = new_record(plan, journal, force)
    record["checks"] = readiness.summary()
    return run_promotion(spark, record)


def outcome_lines(record: dict[str, Any], again: Callable[[str], str]) -> list[tuple[str, bool]]:
    """What became of the tables, the way back and where the journal is: ``(line, as
    written)``, the way back being a command line to print as written (``again(output)``:
    the command line for an output)."""
    production, backfill = record["production_table"], record["backfill_table"]
    if record["status"] == DONE:
        lines = [
            (
                f"promoted: {production} is now the backfill of "
                f"{record.get('backfill_range')} (run {record.get('backfill_run')}); the "
                f"previous production table is {record['previous_table']}",
                False,
            ),
            (f"undo: {again(record['output'])} --undo", True),
        ]
    else:
        lines = [
            (
                f"undone: {production} is the previous production table again; the backfill "
                f"is back in {backfill}",
                False,
            )
        ]
    return [*lines, (f"journal: {journal_path(production)}", False)]
