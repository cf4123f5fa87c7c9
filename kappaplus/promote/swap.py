"""The catalog steps of a promotion and of its undo, journaled so a crash at any step is
completed (or undone) by running the command again.

A Hive catalog renames one table per operation, so the swap is two renames:
``<table>`` -> ``<table>_previous``, then ``<table>_backfill`` -> ``<table>``. Before the
first, the journal (``$KAPPA_HOME/promotions/<table>.json``) records the promotion
(``promoting``: who, when, which backfill run, which tables) and the backfill table gets
the table property ``kappa.promote.id``; after the second the journal says ``done``. Where
a crash stopped is read back from the catalog, not from memory: which of the three names
exist, and whether the table under the production name carries this promotion's id. So
``kappa promote`` run again after a crash finishes the renames, and ``--undo`` takes them
back (production table back under its name, the backfill table back under
``<table>_backfill``) from any step. Between the two renames (two metastore calls) the
production name is briefly absent: a reader then gets "table not found", never a mix of
the two tables; a crash exactly there leaves it absent until the command is run again.

Every step is idempotent and checked against the catalog before it runs; nothing here
drops or rewrites a table.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import socket
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kappaplus.promote.plan import PromoteError, PromotePlan

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

ID_PROPERTY = "kappa.promote.id"
"""The table property naming the promotion that put a table under the production name."""
PROMOTING, DONE, UNDOING, UNDONE = "promoting", "done", "undoing", "undone"


KILL_AFTER_ENV = "KAPPA_PROMOTE_KILL_AFTER"
"""Fault injection for the chaos suite: the name of a step after which the process kills
itself with SIGKILL (as ``kill -9`` would), journal and catalog as that step left them."""
STEPS = ("marked", "production_moved", "backfill_moved")
UNDO_STEPS = ("undo_backfill_moved", "undo_production_moved")


def after_step(step: str) -> None:
    """Called after each step (:data:`STEPS`, :data:`UNDO_STEPS`): ``$KAPPA_PROMOTE_KILL_AFTER``
    kills the process there (the chaos suite); in-process tests replace it to raise."""
    if os.environ.get(KILL_AFTER_ENV) == step:
        import signal

        log.warning("%s=%s: killing this process (SIGKILL)", KILL_AFTER_ENV, step)
        os.kill(os.getpid(), signal.SIGKILL)


def journal_path(production: str) -> Path:
    """The promotion journal of one production table: ``$KAPPA_HOME/promotions/<table>.json``."""
    from kappaplus.core.settings import state_dir

    return state_dir() / "promotions" / f"{production}.json"


def read_journal(production: str) -> dict[str, Any] | None:
    """The latest promotion into ``production`` (earlier ones under ``history``), None if
    there was none."""
    path = journal_path(production)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise PromoteError(
            f"the promotion journal {path} is unreadable ({exc}): repair it"
        ) from None
    return data if isinstance(data, dict) else None


def write_journal(record: dict[str, Any]) -> Path:
    """Write the journal atomically (temporary file renamed into place)."""
    path = journal_path(record["production_table"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True))
    os.replace(tmp, path)
    return path


def _now() -> str:
    return datetime.fromtimestamp(time.time(), UTC).isoformat(timespec="seconds")


def new_record(plan: PromotePlan, previous: dict[str, Any] | None, forced: bool) -> dict[str, Any]:
    """The journal of a new promotion of ``plan`` (earlier ones kept under ``history``)."""
    history = list((previous or {}).pop("history", []) or [])
    if previous:
        history.append(previous)
    stamp = datetime.fromtimestamp(time.time(), UTC).strftime("%Y%m%dT%H%M%SZ")
    return {
        **plan.as_json(),
        "id": f"{plan.job}-{plan.output}-{stamp}-{os.getpid()}",
        "status": PROMOTING,
        "by": f"{getpass.getuser()}@{socket.gethostname()}",
        "started_at": _now(),
        "forced": forced,
        "steps": [],
        "history": history,
    }


@dataclass(frozen=True)
class Catalog:
    """What the catalog holds under the three names of one promotion."""

    production: bool
    production_id: str | None
    backfill: bool
    backfill_id: str | None
    previous: bool


def observe(spark: SparkSession, record: dict[str, Any]) -> Catalog:
    """Which of the promotion's tables exist, and the promotion id each carries."""

    def promote_id(table: str) -> str | None:
        rows = spark.sql(f"SHOW TBLPROPERTIES {_sql(table)}").collect()
        return next((str(r[1]) for r in rows if r[0] == ID_PROPERTY), None)

    exists = spark.catalog.tableExists
    production, backfill = record["production_table"], record["backfill_table"]
    has_production, has_backfill = exists(production), exists(backfill)
    return Catalog(
        production=has_production,
        production_id=promote_id(production) if has_production else None,
        backfill=has_backfill,
        backfill_id=promote_id(backfill) if has_backfill else None,
        previous=exists(record["previous_table"]),
    )


def _sql(table: str) -> str:
    from kappaplus.connectors.hive.sink_options import table_sql

    return table_sql(table)


def _rename(spark: SparkSession, old: str, new: str) -> None:
    spark.sql(f"ALTER TABLE {_sql(old)} RENAME TO {_sql(new)}")
    log.info("promote: renamed %s to %s", old, new)


def _step(record: dict[str, Any], name: str) -> None:
    record["steps"].append({"step": name, "at": _now()})
    write_journal(record)
    after_step(name)


def promote(spark: SparkSession, record: dict[str, Any]) -> dict[str, Any]:
    """Run (or finish, after a crash) the promotion of ``record``; returns it ``done``."""
    from kappaplus.connectors.hive.sink_options import sql_string

    production, backfill = record["production_table"], record["backfill_table"]
    previous, ident = record["previous_table"], record["id"]
    write_journal(record)
    seen = observe(spark, record)
    if not (seen.production and seen.production_id == ident):
        if not seen.backfill:
            raise PromoteError(
                f"promotion {ident}: table {backfill} is gone and {production} is not it: "
                f"restore {backfill}, or undo with kappa promote --undo"
            )
        if seen.backfill_id != ident:
            props = {
                ID_PROPERTY: ident,
                "kappa.promote.from": backfill,
                "kappa.promote.run": record.get("backfill_run") or "",
                "kappa.promote.range": json.dumps(record.get("backfill_range") or {}),
                "kappa.promote.by": record["by"],
                "kappa.promote.at": record["started_at"],
                "kappa.promote.previous": previous,
            }
            listed = ", ".join(f"{sql_string(k)}={sql_string(v)}" for k, v in props.items())
            spark.sql(f"ALTER TABLE {_sql(backfill)} SET TBLPROPERTIES ({listed})")
            _step(record, "marked")
        if seen.production:
            if seen.previous:
                raise PromoteError(
                    f"table {previous} exists: promote keeps the production table {production} "
                    f"under that name and never drops a table; drop or rename {previous} "
                    "first (DROP TABLE after checking nothing needs it)"
                )
            _rename(spark, production, previous)
            _step(record, "production_moved")
        _rename(spark, backfill, production)
        _step(record, "backfill_moved")
    record["status"] = DONE
    record["ended_at"] = _now()
    write_journal(record)
    return record


def undo(spark: SparkSession, record: dict[str, Any]) -> dict[str, Any]:
    """Take back promotion ``record`` (done, or stopped part way): the production table
    back under its name, the backfill table back under its own; returns it ``undone``."""
    production, backfill = record["production_table"], record["backfill_table"]
    previous, ident = record["previous_table"], record["id"]
    record["status"] = UNDOING
    write_journal(record)
    seen = observe(spark, record)
    if seen.production and seen.production_id == ident:
        if seen.backfill:
            raise PromoteError(
                f"cannot undo promotion {ident}: table {backfill} exists again (a new "
                f"backfill?); the promoted rows must go back under that name: rename or drop "
                f"{backfill}, then run kappa promote --undo again"
            )
        _rename(spark, production, backfill)
        _step(record, "undo_backfill_moved")
        seen = observe(spark, record)
    if not seen.production:
        if not seen.previous:
            raise PromoteError(
                f"cannot undo promotion {ident}: neither {production} nor {previous} exists; "
                f"the promoted rows are in {backfill}"
            )
        _rename(spark, previous, production)
        _step(record, "undo_production_moved")
    record["status"] = UNDONE
    record["undone_at"] = _now()
    write_journal(record)
    return record
