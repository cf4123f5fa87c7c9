"""``kappa run --mode backfill --replace-range``: replace the rows other runs committed to an
output table over this run's range with this run's rows, in one step for readers.

A Hive table has no transaction over several partitions but one: the metastore's
``alter_partitions``, which changes the locations of many partitions in one call (one
metastore transaction). The replacement is built around it:

1. **Hold.** Before its first batch the run records its intent beside its checkpoint
   (``_kappa_replace.json``: per output, the table, the range and the runs it replaces),
   and its Hive sink commits every batch without registering its partitions (``hold``):
   readers through the catalog see only the old rows while the run writes. A resumed run
   reads the intent, so it holds its batches whatever flags it is given.
2. **Plan**, once the run has finished: the partitions of the replaced runs with rows in
   the range (``[start, end)``, widened to the event times this run's rows carry), and
   this run's held partitions. Written to a journal (``<checkpoint>/<output>/
   _kappa_replace_journal.json``) before anything changes.
3. **Stage**: each affected old partition gets a new directory under
   ``<location>/_kappa_replaced/<query>/``: its rows outside the range, and, for the first
   affected partition of each time partition (``dt[/hr]``), this run's held files of that
   time partition (moved in).
4. **Swap**: this run's held partitions whose time partition holds no replaced rows are
   registered first (harmless: no old rows there); then ONE ``alter_partitions`` call
   points every affected partition at its new directory: for each time partition a reader
   sees the old rows or the new ones, never both, never neither.
5. **Record**: ``_replaced-<query>`` beside each replaced run's markers (the range), so a
   later run is not refused for rows that are gone; the old directories are deleted; the
   journal is marked done.

Every step is idempotent and driven by the journal: a crash anywhere leaves the old rows
(before the swap) or the new (after it), never both, and running the same command again
rolls the replacement forward (the finished run reads nothing more and swaps).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kappaplus.core.errors import ReplayError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyspark.sql import SparkSession

    from kappaplus.runtime.binding.outputs import OutputPlan
    from kappaplus.runtime.options import RunOptions
    from kappaplus.runtime.state.target_claims import Claim

log = logging.getLogger(__name__)

INTENT_FILE = "_kappa_replace.json"
"""In the run's checkpoint directory: what the run replaces, per output."""
JOURNAL_FILE = "_kappa_replace_journal.json"
"""In an output's checkpoint: the planned replacement, rolled forward until done."""
MOVED_FILE = "_moved_into.json"
"""Beside a query's markers: the partitions of other runs its held rows were moved into."""
REPLACED_DIR = "_kappa_replaced"
"""Under the table location: the new directories of replaced partitions."""


def _write_json(path: Path, value: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(value, sort_keys=True))
    tmp.replace(path)


def hold_for_replacement(
    plans: Mapping[str, OutputPlan],
    mode_dir: Path,
    claims: list[Claim],
    run: RunOptions,
) -> dict[str, OutputPlan]:
    """``plans`` with ``hold`` set on the outputs this run replaces a range of: those the
    intent beside the checkpoint names (a resumed run), else, with ``--replace-range``,
    those ``claims`` name (recorded as the intent)."""
    intent_path = mode_dir / INTENT_FILE
    if intent_path.is_file():
        intent = json.loads(intent_path.read_text())
    elif run.replace_range and claims:
        outputs: dict[str, dict[str, Any]] = {}
        for claim in claims:
            entry = outputs.setdefault(
                claim.output,
                {
                    "table": claim.table,
                    "start": claim.mine[0],
                    "end": claim.mine[1],
                    "queries": [],
                },
            )
            entry["queries"].append(claim.other.query)
        intent = {"outputs": outputs}
        _write_json(intent_path, intent)
    else:
        if run.replace_range:
            log.info("--replace-range: no other run's rows in the output tables over this range")
        return dict(plans)
    return {
        name: dataclasses.replace(plan, hold=True) if name in intent["outputs"] else plan
        for name, plan in plans.items()
    }


def replace_held(spark: SparkSession, plans: Mapping[str, OutputPlan], mode_dir: Path) -> None:
    """Swap the held batches of a finished run in for the rows they replace (module
    docstring); nothing if the run replaces nothing, idempotent once done."""
    intent_path = mode_dir / INTENT_FILE
    if not intent_path.is_file():
        return
    intent = json.loads(intent_path.read_text())
    for name, entry in intent["outputs"].items():
        plan = plans[name]
        journal_path = plan.checkpoint / JOURNAL_FILE
        journal = json.loads(journal_path.read_text()) if journal_path.is_file() else None
        if journal is not None and journal.get("done"):
            continue
        if journal is None:
            journal = plan_swap(spark, plan, entry)
            _write_json(journal_path, journal)
        roll_forward(spark, journal)
        journal["done"] = True
        _write_json(journal_path, journal)
        log.warning(
            "table %s: rows of %s over [%s, %s) replaced by this run's (%d partition(s) "
            "swapped in one metastore call)",
            journal["table"],
            ", ".join(journal["queries"]),
            journal["range"][0],
            journal["range"][1],
            len(journal["affected"]),
        )


def _time_partition(partition: str) -> str:
    """``dt=2024-03-01/hr=5`` of ``dt=2024-03-01/hr=5/kappa_batch=7``."""
    from kappaplus.core.table import BATCH_COLUMN

    return "/".join(
        segment
        for segment in partition.split("/")
        if segment.split("=", 1)[0].lower() != BATCH_COLUMN
    )


def _partitions_in_range(
    spark: SparkSession, table: str, column: str, start: int | None, end: int | None
) -> set[tuple[tuple[str, str], ...]]:
    """The keys of ``table``'s partitions holding rows with ``column`` in ``[start, end)``."""
    from pyspark.sql import functions as F

    from kappaplus.connectors.hive.commits import partition_columns

    columns = partition_columns(spark, table)
    time_value = F.unix_micros(F.col(f"`{column}`").cast("timestamp"))
    in_range = F.lit(True)
    if start is not None:
        in_range = in_range & (time_value >= F.lit(start))
    if end is not None:
        in_range = in_range & (time_value < F.lit(end))
    spark.catalog.refreshTable(table)
    hits = spark.table(table).where(in_range).select(*columns).distinct().collect()
    return {
        tuple((name.lower(), str(row[name])) for name in columns)
        for row in hits
        if all(row[name] is not None for name in columns)
    }


def plan_swap(spark: SparkSession, plan: OutputPlan, entry: Mapping[str, Any]) -> dict[str, Any]:
    """The journal of one output's replacement: range, affected partitions, moves, adds."""
    from kappaplus.connectors.hive.commits import query_markers, table_location
    from kappaplus.connectors.hive.sink_options import partition_key
    from kappaplus.connectors.hive.sink_span import widen
    from kappaplus.core.table.hadoop_fs import HadoopFs

    assert plan.hive is not None
    table = plan.hive.table
    location = table_location(spark, table)
    column = plan.spec.event_time_column
    if column is None:
        raise ReplayError(f"table {table}: --replace-range needs the output's event-time column")
    mine = query_markers(spark, location, plan.query_name)
    held = sorted(
        {p for record in mine.values() if record.get("held") for p in record.get("partitions", [])}
    )
    span = None
    for record in mine.values():
        span = widen(span, record.get("event_time"))
    start, end = entry.get("start"), entry.get("end")
    if span is not None:
        start = span[0] if start is None else min(start, span[0])
        end = span[1] + 1 if end is None else max(end, span[1] + 1)
    owned: dict[tuple[tuple[str, str], ...], str] = {}
    for query in entry["queries"]:
        for record in query_markers(spark, location, query).values():
            for partition in record.get("partitions", []):
                owned[partition_key(partition)] = partition
        for partition in moved_partitions(spark, location, query):
            owned[partition_key(partition)] = partition
    keys = _partitions_in_range(spark, table, column, start, end)
    locations = partition_locations(spark, table)
    affected = []
    chosen: dict[str, str] = {}
    for key in sorted(keys & set(owned)):
        partition = owned[key]
        target = f"{location}/{REPLACED_DIR}/{plan.query_name}/{partition}"
        affected.append({"partition": partition, "from": locations[key], "to": target})
        chosen.setdefault(_time_partition(partition), target)
    fs = HadoopFs(spark, location)
    moves: list[list[str]] = []
    adds: list[str] = []
    for partition in held:
        into = chosen.get(_time_partition(partition))
        if into is None:
            adds.append(partition)
            continue
        source = f"{location}/{partition}"
        for name in fs.list_files(source) if fs.exists(source) else []:
            if not name.startswith(("_", ".")):
                moves.append([f"{source}/{name}", f"{into}/{name}"])
    return {
        "table": table,
        "location": location,
        "column": column,
        "range": [start, end],
        "queries": list(entry["queries"]),
        "query": plan.query_name,
        "affected": affected,
        "moves": moves,
        "adds": adds,
        "held": held,
        "done": False,
    }


def roll_forward(spark: SparkSession, journal: Mapping[str, Any]) -> None:
    """Carry out (or finish) a planned replacement; every step is idempotent."""
    from pyspark.sql import functions as F

    from kappaplus.connectors.hive.commits import record_replaced
    from kappaplus.connectors.hive.sink_options import (
        partition_segments,
        quote_identifier,
        sql_string,
        table_sql,
    )
    from kappaplus.core.table.commit_log import COMMITS_DIR
    from kappaplus.core.table.hadoop_fs import HadoopFs

    table, location = journal["table"], journal["location"]
    start, end = journal["range"]
    fs = HadoopFs(spark, location)
    time_value = F.unix_micros(F.col(quote_identifier(journal["column"])).cast("timestamp"))
    in_range = F.lit(True)
    if start is not None:
        in_range = in_range & (time_value >= F.lit(start))
    if end is not None:
        in_range = in_range & (time_value < F.lit(end))
    for part in journal["affected"]:
        if fs.exists(f"{part['to']}/_SUCCESS"):
            continue
        kept = spark.read.parquet(part["from"]).where(~in_range | time_value.isNull())
        kept.write.mode("overwrite").parquet(part["to"])
    for source, target in journal["moves"]:
        if fs.exists(target):
            continue
        if not fs.exists(source):
            raise ReplayError(
                f"table {table}: the replacement of {journal['query']} lists {source} but it "
                f"is neither there nor at {target}"
            )
        fs.rename(source, target)
    if journal["adds"]:
        specs = []
        for partition in journal["adds"]:
            values = ", ".join(
                f"{quote_identifier(name)} = {sql_string(value)}"
                for name, value in partition_segments(partition)
            )
            where = sql_string(f"{location}/{partition}")
            specs.append(f"PARTITION ({values}) LOCATION {where}")
        spark.sql(f"ALTER TABLE {table_sql(table)} ADD IF NOT EXISTS " + " ".join(specs))
    alter_locations(spark, table, {p["partition"]: p["to"] for p in journal["affected"]})
    spark.catalog.refreshTable(table)
    for query in journal["queries"]:
        record_replaced(spark, location, query, journal["query"], [start, end])
    into = sorted(
        {
            part["partition"]
            for part in journal["affected"]
            if any(target.startswith(part["to"] + "/") for _, target in journal["moves"])
        }
    )
    if into:
        # the run's rows now also live in these partitions (of the replaced runs): a later
        # replacement of this run's range must find them there
        fs.write_atomically(
            f"{location}/{COMMITS_DIR}/{journal['query']}/{MOVED_FILE}", json.dumps(into)
        )
    for part in journal["affected"]:
        if fs.exists(part["from"]) and part["from"] != part["to"]:
            fs.delete(part["from"])
    for partition in journal["held"]:
        directory = f"{location}/{partition}"
        moved = partition not in journal["adds"] and fs.exists(directory)
        if moved and not fs.list_files(directory):
            fs.delete(directory)  # its files went into a replaced partition


def moved_partitions(spark: SparkSession, location: str, query: str) -> list[str]:
    """Partitions of other runs that a range replacement moved ``query``'s rows into."""
    from kappaplus.core.table.commit_log import COMMITS_DIR
    from kappaplus.core.table.hadoop_fs import HadoopFs

    fs = HadoopFs(spark, location)
    path = f"{location}/{COMMITS_DIR}/{query}/{MOVED_FILE}"
    if not fs.exists(path):
        return []
    return [str(p) for p in json.loads(fs.read_text(path))]


def _table_parts(spark: SparkSession, table: str) -> tuple[str, str]:
    database, _, name = table.rpartition(".")
    return database or spark.catalog.currentDatabase(), name


def partition_locations(spark: SparkSession, table: str) -> dict[tuple[tuple[str, str], ...], str]:
    """Every partition of ``table`` (its key as :func:`partition_key` makes it) and its
    location, from the catalog."""
    from kappaplus.connectors.hive.commits import partition_columns

    columns = [c.lower() for c in partition_columns(spark, table)]
    found = {}
    for spec, partition in _catalog_partitions(spark, table):
        key = tuple((name, spec[name]) for name in columns)
        found[key] = str(partition.location().toString())
    return found


def _catalog_partitions(spark: SparkSession, table: str) -> list[tuple[dict[str, str], Any]]:
    jvm: Any = spark._jvm  # type: ignore[attr-defined]
    external = spark._jsparkSession.sessionState().catalog().externalCatalog()  # type: ignore[attr-defined]
    database, name = _table_parts(spark, table)
    convert = jvm.scala.jdk.javaapi.CollectionConverters
    listed = convert.asJava(external.listPartitions(database, name, jvm.scala.Option.apply(None)))
    out = []
    for index in range(listed.size()):
        partition = listed.get(index)
        spec = {str(k).lower(): str(v) for k, v in dict(convert.asJava(partition.spec())).items()}
        out.append((spec, partition))
    return out


def alter_locations(spark: SparkSession, table: str, locations: Mapping[str, str]) -> None:
    """Point the partitions ``locations`` names (partition paths) at new directories in
    ONE metastore call (``alter_partitions``: one transaction)."""
    from kappaplus.connectors.hive.commits import partition_columns
    from kappaplus.connectors.hive.sink_options import partition_key

    if not locations:
        return
    jvm: Any = spark._jvm  # type: ignore[attr-defined]
    external = spark._jsparkSession.sessionState().catalog().externalCatalog()  # type: ignore[attr-defined]
    convert = jvm.scala.jdk.javaapi.CollectionConverters
    columns = [c.lower() for c in partition_columns(spark, table)]
    wanted = {partition_key(p): target for p, target in locations.items()}
    changed = jvm.java.util.ArrayList()
    for spec, partition in _catalog_partitions(spark, table):
        target = wanted.get(tuple((name, spec[name]) for name in columns))
        if target is None:
            continue
        storage = partition.storage()
        arity = next(
            m.getParameterCount() for m in storage.getClass().getMethods() if m.getName() == "copy"
        )
        defaults = [getattr(storage, f"copy$default${i}")() for i in range(2, arity + 1)]
        uri = jvm.org.apache.hadoop.fs.Path(target).toUri()
        moved = storage.copy(jvm.scala.Option.apply(uri), *defaults)
        changed.add(
            partition.copy(
                partition.spec(),
                moved,
                partition.parameters(),
                partition.createTime(),
                partition.lastAccessTime(),
                partition.stats(),
            )
        )
    if changed.size() != len(wanted):
        raise ReplayError(
            f"table {table}: {len(wanted) - changed.size()} partition(s) to replace are no "
            "longer in the catalog"
        )
    database, name = _table_parts(spark, table)
    external.alterPartitions(database, name, convert.asScala(changed).toSeq())
