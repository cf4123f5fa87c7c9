"""Which catalog a session uses, and where else a table it cannot find may be.

A session uses the metastore server of its state directory once ``kappa up`` runs, else the
embedded Derby catalog (:mod:`kappaplus.session`). A table registered through one is not
visible in the other, although both keep data in the same warehouse. ``kappa table
register`` notes each registration in ``state_dir()/tables.json``; with that note and the
warehouse directory, a lookup that fails can say that the table exists in the other catalog.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kappaplus.core.settings import state_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EMBEDDED = "embedded"


def describe_sections(rows: Any) -> tuple[list[str], dict[str, str]]:
    """The partition columns (in order) and the detail rows (``Location``, ``Provider``,
    ...) of a ``DESCRIBE TABLE EXTENDED`` / ``DESCRIBE FORMATTED`` result.

    >>> describe_sections([("id", "bigint"), ("# Partition Information", ""),
    ...                    ("# col_name", "data_type"), ("dt", "string"), ("", ""),
    ...                    ("# Detailed Table Information", ""), ("Location", "file:/w/t ")])
    (['dt'], {'Location': 'file:/w/t'})
    """
    partitions: list[str] = []
    details: dict[str, str] = {}
    section = "columns"
    for row in rows:
        name = (row[0] or "").strip()
        if name.startswith("# Partition Information"):
            section = "partitions"
        elif name.startswith("# Detailed Table Information"):
            section = "details"
        elif name.startswith("#") or not name:
            continue
        elif section == "partitions":
            partitions.append(name)
        elif section == "details":
            details[name] = (row[1] or "").strip()
    return partitions, details


def described(spark: SparkSession, table: str) -> tuple[list[str], dict[str, str]]:
    """The partition columns and the details (``Type``, ``Provider``, ``InputFormat``,
    ``Location``) of ``table``, as :func:`describe_sections` reads them from ``DESCRIBE
    TABLE EXTENDED``; raises what that statement raises for a missing or unreadable table.

    A plain ``[database.]table`` name is asked of the session catalog directly
    (:func:`catalog_sections`): one metastore call. A session's first SQL statement pays
    the SQL parser's start, and a run asked its
    input table before its first micro-batch; anything else, or a lookup that fails, goes
    through ``DESCRIBE`` so its error is Spark's own.
    """
    sections = catalog_sections(spark, table)
    if sections is not None:
        return sections
    return describe_sections(spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect())


def catalog_sections(spark: SparkSession, table: str) -> tuple[list[str], dict[str, str]] | None:
    """:func:`described` from the session catalog's metadata of ``table``, in the words
    ``DESCRIBE`` uses; None when ``table`` is not a plain ``[database.]table`` name or the
    catalog cannot answer (missing table or database, any error)."""
    try:
        jvm: Any = spark._jvm  # type: ignore[attr-defined]
        state = spark._jsparkSession.sessionState()  # type: ignore[attr-defined]
        identifier = state.sqlParser().parseTableIdentifier(table)
        metadata = state.catalog().getTempViewOrPermanentTableMetadata(identifier)
        names = metadata.partitionColumnNames()
        partitions = [str(names.apply(i)) for i in range(names.size())]
        details = {"Type": str(metadata.tableType().name())}
        provider = metadata.provider()
        if provider.isDefined():
            details["Provider"] = str(provider.get())
        input_format = metadata.storage().inputFormat()
        if input_format.isDefined():
            details["InputFormat"] = str(input_format.get())
        location = metadata.storage().locationUri()
        if location.isDefined():
            utils = jvm.org.apache.spark.sql.catalyst.catalog.CatalogUtils
            details["Location"] = str(utils.URIToString(location.get()))
    except Exception:  # noqa: BLE001 - DESCRIBE answers, and names what is wrong
        return None
    return partitions, details


def catalog_of(spark: SparkSession) -> str:
    """The metastore URI the session uses, or ``"embedded"`` (Derby under the state dir)."""
    uri = spark.sparkContext.getConf().get("spark.hadoop.hive.metastore.uris", "") or ""
    return uri or EMBEDDED


def describe_catalog(catalog: str) -> str:
    """Human words for a catalog id."""
    if catalog == EMBEDDED:
        return f"the embedded catalog (Derby, {state_dir() / 'metastore_db'})"
    return f"the metastore server {catalog}"


def _registry(home: str | os.PathLike[str] | None = None) -> Path:
    return state_dir(home) / "tables.json"


def note_registration(spark: SparkSession, table: str, details: dict[str, Any]) -> None:
    """Remember that ``table`` was registered in the session's catalog."""
    path = _registry()
    notes = json.loads(path.read_text()) if path.is_file() else {}
    notes[_qualified(spark, table)] = {**details, "catalog": catalog_of(spark)}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(notes, indent=2, sort_keys=True))
    tmp.replace(path)


def _qualified(spark: SparkSession, table: str) -> str:
    return table if "." in table else f"{spark.catalog.currentDatabase()}.{table}"


def elsewhere(spark: SparkSession, table: str) -> str | None:
    """Why a table the session cannot find may exist in the other catalog, or None."""
    current = catalog_of(spark)
    path = _registry()
    if path.is_file():
        note = json.loads(path.read_text()).get(_qualified(spark, table))
        if note is not None and note.get("catalog") != current:
            again = f"kappa table register {table} --location {note.get('location')}"
            # the local stack's metastore server keeps its catalog between `kappa down`/`up`
            stopped = current == EMBEDDED and (state_dir() / "metastore").is_dir()
            way_out = (
                f"start it again with `kappa up`, or register the table here too ({again})"
                if stopped
                else f"register it again here ({again})"
            )
            return (
                f"table {table!r} was registered in {describe_catalog(note['catalog'])}, but "
                f"this command uses {describe_catalog(current)}: {way_out}"
            )
    database, _, name = _qualified(spark, table).rpartition(".")
    warehouse = state_dir() / "warehouse"
    folder = warehouse / (name if database == "default" else f"{database}.db/{name}")
    if folder.is_dir():
        other = "the embedded catalog" if current != EMBEDDED else "the metastore server"
        return (
            f"table {table!r} has data in {folder} but is not in {describe_catalog(current)}; "
            f"it was probably created through {other} (tables made before or after `kappa up` "
            f"live in different catalogs): create or register it again (kappa table register "
            f"{table} --location {folder})"
        )
    return None
