"""Resolving an Iceberg table through its catalog, pinning a snapshot, and opening it as an
event-time stream.

Catalogs (pyiceberg): ``sql`` (a SQLite file, the embedded default under the state
directory: ``$KAPPA_HOME/iceberg/catalog.db`` with its warehouse beside it), ``rest`` and
``hive`` (a metastore's thrift URI) as configured. All three are tested: ``rest`` against
an Iceberg REST server on loopback, ``hive`` against the metastore ``kappa up`` starts (Hive
2.3 on Derby, with the transaction tables its lock API needs: pyiceberg locks the table for
every commit).

The snapshot is pinned per run: the first start of a run records the table's current
snapshot (and the metadata file that holds it) in the source's state directory, which lives
with the run's checkpoint; every later start of that run, a restart after a crash included,
reads that same snapshot. Snapshots committed since are counted and logged, never mixed
into the run: a fresh run reads them.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from kappaplus.connectors.iceberg.options import IcebergSourceOptions
from kappaplus.connectors.lake.options import range_options
from kappaplus.connectors.lake.stream import LakeFormat, open_lake_stream
from kappaplus.core.errors import ConfigError, TableError, TableNotFound
from kappaplus.core.settings import state_dir
from kappaplus.core.temp_names import temporary_name

if TYPE_CHECKING:
    from kappaplus.connectors.lake.jvm_reader import LakeStream

log = logging.getLogger(__name__)

CATALOG_TYPES = ("sql", "rest", "hive")


def default_catalog(home: Path | None = None) -> dict[str, str]:
    """The embedded SQL catalog: a SQLite file and a warehouse under the state directory."""
    root = (home or state_dir()) / "iceberg"
    return {
        "type": "sql",
        "uri": f"sqlite:///{(root / 'catalog.db').absolute()}",
        "warehouse": f"file://{(root / 'warehouse').absolute()}",
    }


DEFAULT_CATALOG_NAME = "kappa"
"""The name a catalog is opened under when its properties give no ``name``."""


def load_catalog(properties: dict[str, str] | None = None, name: str | None = None) -> Any:
    """A pyiceberg catalog from ``properties`` (``type`` sql | rest | hive, ``uri``,
    ``warehouse``, FileIO settings such as ``s3.endpoint``); default the embedded one.
    ``hive`` defaults ``hive.hive2-compatible`` to true (Hive 2.3 column types).

    ``name`` (the properties' ``name`` key, else ``kappa``) is the catalog's name: a SQL
    catalog (pyiceberg's, Iceberg's JDBC catalog that Spark, Trino and Flink write through)
    keys every table by it, so a table written through a catalog named ``lake`` is found
    only under that name."""
    from pyiceberg.catalog import load_catalog as pyiceberg_catalog

    props = dict(properties or default_catalog())
    name = props.pop("name", None) or name or DEFAULT_CATALOG_NAME
    kind = props.get("type", "sql")
    if kind not in CATALOG_TYPES:
        raise ConfigError("catalog.type", kind, f"expected one of {', '.join(CATALOG_TYPES)}")
    if kind == "hive":
        # Hive 2.3 (the metastore of `kappa up`) has no "timestamp with local time zone":
        # a commit of a table with a timestamptz column is refused without this
        props.setdefault("hive.hive2-compatible", "true")
    if kind == "sql" and props.get("uri", "").startswith("sqlite:///"):
        Path(props["uri"][len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
    try:
        return pyiceberg_catalog(name, **props)
    except Exception as exc:
        raise TableError(
            f"cannot open the Iceberg {kind} catalog at {props.get('uri')!r}: {_first_line(exc)}"
            "; check [inputs.<name>.iceberg] catalog (or --catalog) and that it is running"
        ) from exc


def _first_line(exc: BaseException) -> str:
    """An exception's message on one line (HTTP and thrift errors span several)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def catalog_name(catalog: Any) -> str:
    """``<type> catalog at <uri>``: where a table was looked up, for messages."""
    props = getattr(catalog, "properties", {}) or {}
    kind = props.get("type") or type(catalog).__name__
    return f"{kind} catalog at {props.get('uri')!r}"


def load_table(catalog: Any, table_name: str) -> Any:
    """``table_name`` from ``catalog``; a missing table, an unreachable catalog or a refused
    request is one line naming the table and the catalog's URI."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    where = catalog_name(catalog)
    try:
        return catalog.load_table(table_name)
    except (NoSuchTableError, NoSuchNamespaceError) as exc:
        elsewhere = _sql_names_holding(catalog, table_name)
        if elsewhere:
            names = " or ".join(repr(n) for n in elsewhere)
            raise TableNotFound(
                f"Iceberg table {table_name!r} not found under the catalog name "
                f"{catalog.name!r} in the {where}, which holds it under the name {names}: "
                f'give the catalog that name (catalog = {{ name = "{elsewhere[0]}", ... }}, '
                'or "name" in --catalog)'
            ) from exc
        raise TableNotFound(
            f"Iceberg table {table_name!r} not found in the {where}: {_first_line(exc)}; "
            "check the name and the catalog ([inputs.<name>.iceberg] catalog)"
        ) from exc
    except Exception as exc:
        raise TableError(
            f"Iceberg table {table_name!r} cannot be loaded from the {where}: "
            f"{_first_line(exc)}; check that the catalog is running and reachable"
        ) from exc


def _sql_names_holding(catalog: Any, table_name: str) -> list[str]:
    """The other catalog names a SQL catalog's database holds ``table_name`` under (its
    ``iceberg_tables`` rows are keyed by catalog name); empty for other catalogs, or when
    the database cannot be asked."""
    engine = getattr(catalog, "engine", None)
    namespace, _, table = table_name.rpartition(".")
    if engine is None or not namespace:
        return []
    from sqlalchemy import text

    query = text(
        "SELECT DISTINCT catalog_name FROM iceberg_tables "
        "WHERE table_namespace = :namespace AND table_name = :table AND catalog_name != :name"
    )
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                query, {"namespace": namespace, "table": table, "name": catalog.name}
            )
            return sorted(str(row[0]) for row in rows)
    except Exception as exc:  # noqa: BLE001 - only a hint: the error stands without it
        log.debug("asking the SQL catalog for other catalog names: %s", exc)
        return []


@dataclass(frozen=True)
class PinnedSnapshot:
    """The snapshot a run reads: its id and the metadata file that holds it."""

    table: str
    snapshot_id: int
    metadata_location: str
    newer_snapshots: int = 0
    newer_files: int = 0
    newer_rows: int = 0


def _pin_path(pin_dir: str, table: str) -> Path:
    key = hashlib.sha256(table.encode()).hexdigest()[:16]
    return Path(pin_dir) / "iceberg-pins" / f"{key}.json"


def table_schema(table_name: str, catalog: dict[str, str] | None) -> StructType:
    """The current schema of ``table_name`` as Spark sees it (what the source delivers
    before a stored event time becomes a timestamp): for checking a binding's mapping."""
    return spark_schema(load_table(load_catalog(catalog), table_name))


def pin_snapshot(
    catalog: Any, table_name: str, pin_dir: str, snapshot_id: int | None = None
) -> tuple[Any, PinnedSnapshot]:
    """The table and its snapshot for this run: the one pinned in ``pin_dir`` by an earlier
    start of the run, else ``snapshot_id``, else the current one (then pinned). Snapshots
    committed after the pinned one are counted (and logged), not read."""
    table = load_table(catalog, table_name)
    path = _pin_path(pin_dir, table_name)
    if path.exists():
        pinned = json.loads(path.read_text())
        if snapshot_id is not None and snapshot_id != pinned["snapshot_id"]:
            raise ConfigError(
                "snapshot",
                snapshot_id,
                f"this run of Iceberg table {table_name!r} is pinned to snapshot "
                f"{pinned['snapshot_id']}; start the run over (--fresh) to read another",
            )
        snap_id, location = int(pinned["snapshot_id"]), str(pinned["metadata_location"])
    else:
        if snapshot_id is None:
            current = table.current_snapshot()
            if current is None:
                raise TableError(f"Iceberg table {table_name!r} has no snapshot (no data yet)")
            snapshot_id = int(current.snapshot_id)
        elif table.metadata.snapshot_by_id(snapshot_id) is None:
            raise ConfigError("snapshot", snapshot_id, f"not a snapshot of {table_name!r}")
        snap_id, location = snapshot_id, str(table.metadata_location)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(temporary_name(path.name))
        tmp.write_text(json.dumps({"snapshot_id": snap_id, "metadata_location": location}))
        tmp.replace(path)
    newer = _committed_after(table, snap_id)
    pin = PinnedSnapshot(table_name, snap_id, location, *newer)
    if pin.newer_snapshots:
        log.warning(
            "Iceberg table %r: %d snapshot(s) committed after the pinned snapshot %d "
            "(+%d data files, +%d rows) are not part of this run; a fresh run reads them",
            table_name,
            pin.newer_snapshots,
            snap_id,
            pin.newer_files,
            pin.newer_rows,
        )
    return table, pin


def _committed_after(table: Any, snapshot_id: int) -> tuple[int, int, int]:
    """(snapshots, added data files, added rows) committed after ``snapshot_id``."""
    current = table.current_snapshot()
    snapshots = files = rows = 0
    node = current
    while node is not None and node.snapshot_id != snapshot_id:
        snapshots += 1
        summary = node.summary.additional_properties if node.summary is not None else {}
        files += int(summary.get("added-data-files", 0))
        rows += int(summary.get("added-records", 0))
        parent = node.parent_snapshot_id
        node = table.metadata.snapshot_by_id(parent) if parent is not None else None
    return snapshots, files, rows


def spark_schema(table: Any) -> StructType:
    """The table's current schema as a Spark schema (via Arrow)."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow
    from pyspark.sql.pandas.types import from_arrow_schema

    arrow = schema_to_pyarrow(table.schema(), include_field_ids=False)
    return from_arrow_schema(arrow)


def iceberg_stream_options(
    table: Any,
    pin: PinnedSnapshot,
    *,
    event_time_column: str,
    io_properties: dict[str, str] | None = None,
    start: Any = None,
    end: Any = None,
    max_event_time_per_trigger: str | None = None,
    watermark_delay: str | None = None,
    manifest_dir: str,
    **options: Any,
) -> dict[str, str]:
    """The string options for ``format("kappa_iceberg")``, validated."""
    resolved: dict[str, str] = {
        "table": pin.table,
        "location": str(table.location()),
        "format": "parquet",
        "schema": json.dumps(spark_schema(table).jsonValue()),
        "eventTimeColumn": event_time_column,
        "manifestDir": manifest_dir,
        "metadataLocation": pin.metadata_location,
        "snapshotId": str(pin.snapshot_id),
        "ioProperties": json.dumps(io_properties or {}),
    }
    resolved.update(range_options(start, end, max_event_time_per_trigger, watermark_delay))
    resolved.update({k: str(v) for k, v in options.items() if v is not None})
    IcebergSourceOptions.parse(resolved)  # fail here, in the caller, with a clear message
    return resolved


def iceberg_lake_options(
    table: str,
    catalog: dict[str, str] | None,
    snapshot: int | None,
    *,
    event_time_column: str,
    **options: Any,
) -> dict[str, str]:
    """Load ``table`` from ``catalog`` (default the embedded one), pin its snapshot in the
    source's state (``manifestDir``, default under the state directory) and return the
    validated options of ``kappa_iceberg`` (also the lake options of a bootstrap)."""
    props = dict(catalog or default_catalog())
    manifests = str(
        options.pop("manifestDir", None) or state_dir() / "iceberg-source" / "manifests"
    )
    iceberg, pin = pin_snapshot(load_catalog(props), table, manifests, snapshot)
    io = {k: v for k, v in props.items() if k not in ("type", "uri", "warehouse")}
    return iceberg_stream_options(
        iceberg,
        pin,
        event_time_column=event_time_column,
        io_properties=io,
        manifest_dir=manifests,
        **options,
    )


def read_iceberg_stream(
    spark: SparkSession,
    table: str,
    *,
    event_time_column: str,
    **options: Any,
) -> DataFrame:
    """Open an Iceberg table's pinned snapshot as a streaming DataFrame, one event-time
    slice per micro-batch (the slicing options and the watermark are every lake format's:
    :class:`~kappaplus.connectors.lake.options.LakeSourceOptions`).

    ``catalog``: pyiceberg catalog properties (default the embedded SQL catalog);
    ``snapshot``: the snapshot to pin on the first start (default the current one);
    ``manifest_dir``: the source's state (slice manifests and the pin): keep it with the
    checkpoint, a new one starts a new run; ``reader``: ``auto`` (default: the JVM reader
    where reading the files by name reads what pyiceberg reads by field id, see
    :mod:`kappaplus.connectors.iceberg.jvm_path`; else the Python one, the reason logged),
    ``jvm`` (or a one-line error saying why not) or ``python``.

    >>> df = read_iceberg_stream(spark, "lake.rides", event_time_column="ts",
    ...                          watermark_delay="10 minutes")      # doctest: +SKIP
    """
    return open_iceberg_stream(
        spark,
        table,
        event_time_column=event_time_column,
        **options,
    ).df


def open_iceberg_stream(spark: SparkSession, table: str, **options: Any) -> LakeStream:
    """:func:`read_iceberg_stream`, and whether the reader counts the rows it delivers, as
    ``count_delivered`` asks (the JVM reader does)."""
    return open_lake_stream(spark, iceberg_format(), table, **options)


def _resolve(
    spark: SparkSession,
    table: str,
    *,
    catalog: dict[str, str] | None = None,
    snapshot: int | None = None,
    manifest_dir: str | None = None,
    **options: Any,
) -> dict[str, str]:
    return iceberg_lake_options(table, catalog, snapshot, manifestDir=manifest_dir, **options)


def _unsupported(spark: SparkSession, parsed: IcebergSourceOptions) -> str | None:
    from kappaplus.connectors.iceberg.jvm_path import jvm_unsupported_iceberg
    from kappaplus.connectors.lake.jvm_reader import jvm_has_file_system

    return jvm_unsupported_iceberg(parsed, jvm_has_file_system(spark))


def _jvm_options(extra: dict[str, str], parsed: IcebergSourceOptions) -> dict[str, str]:
    """The JVM reader's options, matching columns by field id as pyiceberg does."""
    from kappaplus.connectors.iceberg.jvm_path import jvm_field_id_options

    return jvm_field_id_options(extra, parsed)


def iceberg_format() -> LakeFormat:
    """The Iceberg format of :func:`~kappaplus.connectors.lake.stream.open_lake_stream`
    (made on use: the sink, which shares this module's catalog, needs no reader)."""
    from kappaplus.connectors.iceberg.source import IcebergStreamDataSource

    return LakeFormat(
        data_source=IcebergStreamDataSource,
        resolve=_resolve,
        unsupported=_unsupported,
        describe=lambda parsed: f"Iceberg table {parsed.table!r} snapshot {parsed.snapshot_id}",
        jvm_options=_jvm_options,
    )
