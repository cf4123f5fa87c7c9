"""The lake of ``kappa demo`` (``--lake hive|iceberg|delta``): one small strategy per table format.

The demo's loop is the same whatever the lake: archive the topic, stream from Kafka,
backfill from the lake, reconcile. What differs is only where the archive goes and how the
demo looks at it, four things a :class:`DemoLake` says:

- :meth:`~DemoLake.archive_options`: what ``kappa archive`` is given beyond the topic and
  table (``table_format`` and the format's catalog or location);
- :meth:`~DemoLake.input_binding`: the job's ``[inputs.rider_events.<format>]`` binding,
  and its ``[mode.backfill.inputs...]`` override when the format has one (the backfill's
  slice size);
- :meth:`~DemoLake.rows`: the lake's rows (with an event time in ``[start, end)``),
  counted by the format's own reader (Spark for Hive, pyiceberg for Iceberg), not by the
  backfill: every one must be counted once by the backfill's sessions;
- :meth:`~DemoLake.drop` and :meth:`~DemoLake.where`: a fresh table per demo, and where it
  lives for the closing table.

- :class:`DeltaLake`: an unpartitioned Delta table under ``$KAPPA_HOME/delta``, one
  version per archive micro-batch through delta-rs, counted with deltalake.

>>> demo_lake("iceberg", Path("/tmp/kappa")).title
'Iceberg'
>>> demo_lake("orc", Path("/tmp/kappa"), option="--lake")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
kappaplus.core.errors.ConfigError: option '--lake' = 'orc': expected one of hive, iceberg, delta ...
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from kappaplus.core.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class DemoLake(ABC):
    """The demo's archive in one table format; ``home`` is the state directory."""

    home: Path
    name: ClassVar[str]
    title: ClassVar[str]

    @abstractmethod
    def archive_options(self, table: str = "") -> dict[str, Any]:
        """Fields of :class:`~kappaplus.archive.ArchiveOptions` for this format (given the
        demo's ``table`` name, those that replace the defaults the demo passes)."""

    @abstractmethod
    def input_binding(
        self, table: str, event_time_column: str, slice_hours: int
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The input's lake binding (``{"hive": {...}}``...) and its backfill override."""

    @abstractmethod
    def drop(self, spark: SparkSession, table: str) -> None:
        """Drop ``table`` if it exists (a demo archives into a fresh table)."""

    @abstractmethod
    def rows(
        self,
        spark: SparkSession,
        table: str,
        column: str,
        start: datetime | None = None,
        end: datetime | None = None,
    ) -> int:
        """Rows of ``table``; with ``start``/``end``, those whose ``column`` is in
        ``[start, end)``."""

    @abstractmethod
    def where(self, table: str) -> str:
        """Where the archive lives, for the closing table."""

    def audit_name(self, table: str) -> str:
        """The name ``kappa audit --table`` knows the archive by (the archiver's output and
        the backfill's lake reads are recorded under it)."""
        return table


class HiveLake(DemoLake):
    """Parquet partitions by event ``dt``/``hr`` in the metastore's warehouse; the backfill
    maps partitions to event time and slices by ``maxEventTimePerTrigger`` (a backfill
    override: the production binding keeps its defaults)."""

    name = "hive"
    title = "Hive"

    def archive_options(self, table: str = "") -> dict[str, Any]:
        return {"table_format": "hive"}

    def input_binding(
        self, table: str, event_time_column: str, slice_hours: int
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        binding = {
            "table": table,
            "event_time_column": event_time_column,
            "partition_format": "dt=%Y-%m-%d/hr=%H",
        }
        override = {"hive": {"maxEventTimePerTrigger": f"{slice_hours} hours"}}
        return {"hive": binding}, override

    def drop(self, spark: SparkSession, table: str) -> None:
        spark.sql(f"DROP TABLE IF EXISTS {table}")

    def rows(
        self,
        spark: SparkSession,
        table: str,
        column: str,
        start: datetime | None = None,
        end: datetime | None = None,
    ) -> int:
        from pyspark.sql import functions as F

        spark.catalog.refreshTable(table)
        rows = spark.table(table)
        if start is not None:
            rows = rows.where(F.col(column) >= F.lit(start))
        if end is not None:
            rows = rows.where(F.col(column) < F.lit(end))
        return rows.count()

    def where(self, table: str) -> str:
        return f"{table} (Hive, Parquet partitions under {self.home / 'warehouse'})"


@dataclass(frozen=True)
class IcebergLake(DemoLake):
    """An unpartitioned Iceberg table in the embedded SQL catalog (``$KAPPA_HOME/iceberg``,
    a SQLite file and a local warehouse), one snapshot per archive micro-batch; the
    backfill pins a snapshot and slices by the data files' event-time statistics. The
    catalog is written into the job's TOML, so ``kappa run``/``reconcile`` find it.

    ``properties``: another catalog instead (``kappa demo --s3``: the SQL catalog of the
    embedded object store, its warehouse in the store's bucket)."""

    name = "iceberg"
    title = "Iceberg"
    properties: dict[str, str] | None = field(default=None, compare=False)

    def catalog(self) -> dict[str, str]:
        from kappaplus.connectors.iceberg.catalog import default_catalog

        return dict(self.properties) if self.properties else default_catalog(self.home)

    def archive_options(self, table: str = "") -> dict[str, Any]:
        return {"table_format": "iceberg", "iceberg_catalog": self.catalog()}

    def input_binding(
        self, table: str, event_time_column: str, slice_hours: int
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        binding = {
            "table": table,
            "event_time_column": event_time_column,
            "catalog": self.catalog(),
            # only lake-reading modes read this binding: no backfill override needed
            "maxEventTimePerTrigger": f"{slice_hours} hours",
        }
        return {"iceberg": binding}, None

    def drop(self, spark: SparkSession, table: str) -> None:
        from kappaplus.connectors.iceberg.catalog import load_catalog

        catalog = load_catalog(self.catalog())
        if catalog.table_exists(table):
            catalog.purge_table(table)  # its data and metadata files too

    def rows(
        self,
        spark: SparkSession,
        table: str,
        column: str,
        start: datetime | None = None,
        end: datetime | None = None,
    ) -> int:
        from kappaplus.connectors.iceberg.catalog import load_catalog

        # the current snapshot's rows, read by pyiceberg and counted by Arrow
        times = load_catalog(self.catalog()).load_table(table).scan(selected_fields=(column,))
        values = times.to_arrow().column(column)
        return len(values) if start is None and end is None else _in_range(values, start, end)

    def where(self, table: str) -> str:
        props = self.catalog()
        return f"{table} (Iceberg, catalog {props['uri']}, warehouse {props['warehouse']})"


class DeltaLake(DemoLake):
    """An unpartitioned Delta table at ``$KAPPA_HOME/delta/<table>`` (a location: the
    demo's table name picks the directory), one version per archive micro-batch through
    delta-rs with the batch's application transaction; the backfill pins a version and
    slices by the log's per-file statistics. Its dead letters stay in the Hive table
    ``<table>_dead_letters``."""

    name = "delta"
    title = "Delta"

    def location(self, table: str) -> str:
        return str(self.home / "delta" / table.replace(".", "/"))

    def archive_options(self, table: str = "") -> dict[str, Any]:
        options: dict[str, Any] = {"table_format": "delta"}
        if table:
            options["table"] = self.location(table)
            options["dead_letter_table"] = f"{table}_dead_letters"
        return options

    def input_binding(
        self, table: str, event_time_column: str, slice_hours: int
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        binding = {
            "path": self.location(table),
            "event_time_column": event_time_column,
            # only lake-reading modes read this binding: no backfill override needed
            "maxEventTimePerTrigger": f"{slice_hours} hours",
        }
        return {"delta": binding}, None

    def drop(self, spark: SparkSession, table: str) -> None:
        import shutil

        shutil.rmtree(self.location(table), ignore_errors=True)

    def rows(
        self,
        spark: SparkSession,
        table: str,
        column: str,
        start: datetime | None = None,
        end: datetime | None = None,
    ) -> int:
        from kappaplus.connectors.delta.log import open_delta

        # the current version's rows, read by delta-rs and counted by Arrow
        data = open_delta(self.location(table), None).to_pyarrow_table(columns=[column])
        values = data.column(column)
        return len(values) if start is None and end is None else _in_range(values, start, end)

    def where(self, table: str) -> str:
        return f"{self.location(table)} (Delta, delta-rs, one version per archive batch)"

    def audit_name(self, table: str) -> str:
        return self.location(table)  # a Delta table is named by its location


def _in_range(values: Any, start: datetime | None, end: datetime | None) -> int:
    """How many of the Arrow timestamps ``values`` lie in ``[start, end)`` (nulls out)."""
    import pyarrow.compute as pc

    inside = pc.is_valid(values)
    if start is not None:
        inside = pc.and_(inside, pc.greater_equal(values, start))
    if end is not None:
        inside = pc.and_(inside, pc.less(values, end))
    return int(pc.sum(pc.cast(inside, "int64")).as_py() or 0)


LAKES: dict[str, type[DemoLake]] = {lake.name: lake for lake in (HiveLake, IcebergLake, DeltaLake)}
"""The lake formats ``kappa demo --lake`` runs with."""


def demo_lake(
    name: str,
    home: Path,
    *,
    option: str = "lake",
    catalog: dict[str, str] | None = None,
) -> DemoLake:
    """The strategy of lake format ``name``; ConfigError (exit 2) naming ``option`` and
    the choices. ``catalog``: the Iceberg lake's catalog properties (``--s3``); refused
    for another format."""
    lake = LAKES.get(name)
    if lake is None:
        raise ConfigError(
            option,
            name,
            f"expected one of {', '.join(LAKES)} (the table format of the demo's archive)",
        )
    if catalog is not None:
        if lake is not IcebergLake:
            raise ConfigError(
                "--s3",
                True,
                f"the demo keeps only an Iceberg lake in the object store: "
                f"use --lake iceberg, or leave out --s3 (--lake {name})",
            )
        return IcebergLake(home, catalog)
    return lake(home)
