"""The checks of a promotion that need the catalog: both tables exist, ``<table>_previous``
is free, and the backfill can stand for production over its range.

``kappa reconcile`` over the backfill's range must explain every difference (the late rows
production kept). Beyond what reconcile decides, promoting hides from readers whatever
production holds that the backfill does not cover, so two more checks: no production rows
outside the backfill's range (they would stay only in ``<table>_previous``), and no backfill
window still open in production (the production stream would emit it again, after the
swap, into the promoted table: doubled). ``--force`` skips these three; the tables and
the free ``_previous`` name are always required.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kappaplus.promote.plan import PromoteError, PromotePlan

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from kappaplus.audit.reconcile import Reconciliation


@dataclass
class Readiness:
    """What the checks found: the reconciliation and the problems ``--force`` may skip."""

    reconciliation: Reconciliation | None = None
    problems: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        result = self.reconciliation
        return {
            "reconcile_explained": None if result is None else result.explained,
            "reconcile_verdict": None if result is None else result.verdict,
            "identical": None if result is None else result.identical,
            "different": None if result is None else result.different,
            "problems": self.problems,
        }


def check_tables(spark: SparkSession, plan: PromotePlan) -> None:
    """Both tables exist and ``<table>_previous`` is free (never skipped)."""
    exists = spark.catalog.tableExists
    if not exists(plan.backfill):
        raise PromoteError(
            f"the backfill table {plan.backfill} does not exist: run the backfill first (kappa "
            f"run --mode backfill), or see kappa promote --status if it was promoted already"
        )
    if not exists(plan.production):
        raise PromoteError(
            f"the production table {plan.production} does not exist: nothing to swap; to "
            f"publish the backfill under that name, ALTER TABLE {plan.backfill} RENAME TO "
            f"{plan.production}"
        )
    if exists(plan.previous):
        raise PromoteError(
            f"table {plan.previous} exists (an earlier promotion's previous table?): promote "
            f"keeps {plan.production} under that name and never drops a table; drop or "
            f"rename {plan.previous} first"
        )


def check_ready(spark: SparkSession, job: Any, config: Any, plan: PromotePlan) -> Readiness:
    """Reconcile the backfill's range; list what would keep it from standing for
    production (``--force`` skips them)."""
    from pyspark.sql import functions as F

    from kappaplus.audit.reconcile import reconcile
    from kappaplus.core.timeutil import from_micros, parse_timestamp
    from kappaplus.runtime.reconcile_target import target_of

    def when(key: str) -> Any:
        value = plan.range.get(key)
        return None if not value else from_micros(parse_timestamp(value, key))

    start, end = when("start"), when("end")
    readiness = Readiness()
    shown = f"[{plan.range.get('start') or '-'}, {plan.range.get('end') or '-'})"
    if config.outputs[plan.output].reconcile is None:
        readiness.problems.append(
            f"kappa reconcile cannot check {plan.backfill} against {plan.production}: declare "
            f"[outputs.{plan.output}.reconcile] key = [...] (and window_end, measure)"
        )
    else:
        result = reconcile(spark, target_of(job, config, plan.output, start=start, end=end))
        readiness.reconciliation = result
        if not result.explained:
            readiness.problems.append(
                f"kappa reconcile over {shown} does not explain the differences: {result.verdict}"
            )
        if result.open_in_production:
            readiness.problems.append(
                f"{result.open_in_production} windows of {plan.backfill} are still open in "
                "the production stream (after its watermark): it would emit them again into "
                "the promoted table"
            )
    column = plan.event_time_column
    if column is not None and (start is not None or end is not None):
        outside = F.lit(False)
        if start is not None:
            outside = outside | (F.col(column) < F.lit(start))
        if end is not None:
            outside = outside | (F.col(column) >= F.lit(end))
        spark.catalog.refreshTable(plan.production)
        span = (
            spark.table(plan.production)
            .where(outside)
            .agg(
                F.count(F.lit(1)),
                F.date_format(F.min(column), "yyyy-MM-dd HH:mm:ss"),
                F.date_format(F.max(column), "yyyy-MM-dd HH:mm:ss"),
            )
            .first()
        )
        if span is not None and int(span[0]):
            readiness.problems.append(
                f"{plan.production} holds {span[0]} rows outside the backfill's range {shown} "
                f"({column} from {span[1]} to {span[2]}): readers would no longer see them "
                f"(they would stay in {plan.previous}); backfill the whole range production "
                "covers (up to its watermark)"
            )
    return readiness


def writers_since_promotion(spark: SparkSession, record: dict[str, Any]) -> list[str]:
    """The runs other than the promoted backfill that committed batches to the table under
    the production name (the production stream, started again, appends there): undoing
    would move their rows out of readers' sight, under ``<table>_backfill``."""
    from kappaplus.connectors.hive.commits import committed_runs

    found = []
    for run in committed_runs(spark, record["production_table"]):
        prov = run.provenance or {}
        if prov.get("key") != record.get("backfill_identity"):
            found.append(f"{prov.get('mode') or 'a run'} {run.query} ({run.batches} batches)")
    return found
