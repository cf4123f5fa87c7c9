"""Typed options of the exactly-once Hive table sink, validated once at construction, and the
SQL quoting and partition-path helpers the sink and its commit log share."""

from __future__ import annotations

import logging
import re
from typing import Any, Protocol
from urllib.parse import unquote

from kappaplus.core.errors import ConfigError
from kappaplus.core.options import (
    BOOL,
    NAME,
    POSITIVE_INT,
    TEXT,
    check_fields,
    choice,
    json_value,
    matching,
    option,
    options_class,
)
from kappaplus.core.table import (
    BATCH_COLUMN,
    DEFAULT_PARTITION_COLUMN,
    DEFAULT_VISIBILITY,
    TABLE_NAME,
    VISIBILITIES,
    Visibility,
)

log = logging.getLogger(__name__)


class HiveOutputBinding(Protocol):
    """What the sink reads of a job's ``[outputs.<name>.hive]`` binding
    (:class:`kappaplus.config.HiveOutput`); the sink does not import the job configuration."""

    @property
    def table(self) -> str: ...
    @property
    def partition_column(self) -> str: ...
    @property
    def partition_expr(self) -> str | None: ...
    @property
    def hour_partition(self) -> str | None: ...
    @property
    def visibility(self) -> Visibility: ...


_QUERY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
STAGING_DIR = "_kappa_staging"
SLOTS_DIR = "_kappa_batch_slots"
"""Reservations of ``kappa_batch`` values: one empty file per value taken, plus a hint
``_next``; a value is taken by creating its file, which fails if another writer has it."""
MANIFEST_VERSION = 2
ADD_PARTITION_BATCH = "spark.sql.addPartitionInBatch.size"


def _pairs(value: Any) -> tuple[Any, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
        raise TypeError("expected (column, SQL expression) pairs")
    return tuple(tuple(item) if isinstance(item, list) else item for item in value)


EXTRA_PARTITIONS = json_value(
    _pairs, lambda pairs: [list(pair) for pair in pairs], "(column, SQL expression) pairs"
)


def _provenance(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError("expected a JSON object")
    return value


PROVENANCE = json_value(_provenance, lambda value: value, "a JSON object")


@options_class
class HiveSinkOptions:
    """Where and how the sink writes.

    - ``table``: ``db.table`` or ``table``; created (parquet, partitioned) if missing.
    - ``query_name``: names the commit log and the published files; one streaming query
      per name and table (two queries may write one table under different names).
    - ``partition_column``: the (first) time partition column, ``dt`` by default.
    - ``partition_expr``: SQL expression computing it when the rows lack the column;
      default ``to_date(<event_time_column>)`` (the event date, session time zone).
    - ``extra_partitions``: ``(column, SQL expression)`` pairs, more time partition
      levels after ``partition_column``, e.g. ``(("hr", "hour(`event_time`)"),)`` for
      ``dt=.../hr=...``; a column the rows already have is used as it is.
    - ``visibility``: ``"batch"`` (default; one more partition column ``kappa_batch``, a
      reader sees whole batches) or ``"partition"`` (time partitions only, a batch spanning
      several partitions shows one partition at a time); see the module docstring.
    - ``files_per_partition``: files each batch writes per partition; 1 makes a batch's
      rows of one partition one file, more spreads large batches over more tasks.
    """

    table: str = option("table", matching(TABLE_NAME, "a Hive table name like 'db.table'"))
    query_name: str = option("queryName", matching(_QUERY, "letters, digits, '_', '-' or '.'"))
    partition_column: str = option(
        "partitionColumn", matching(_IDENT, "an identifier"), default=DEFAULT_PARTITION_COLUMN
    )
    partition_expr: str | None = option("partitionExpr", TEXT, default=None)
    event_time_column: str | None = option("eventTimeColumn", NAME, default=None)
    create_table: bool = option("createTable", BOOL, default=True)
    files_per_partition: int = option("filesPerPartition", POSITIVE_INT, default=1)
    visibility: Visibility = option("visibility", choice(VISIBILITIES), default=DEFAULT_VISIBILITY)
    extra_partitions: tuple[tuple[str, str], ...] = option(
        "extraPartitions", EXTRA_PARTITIONS, default=()
    )
    hold: bool = option("hold", BOOL, default=False)
    """``"batch"`` visibility only: publish and commit each batch but do not register its
    partitions: readers through the catalog do not see it until a range replacement swaps
    the held batches in (``kappaplus.runtime.state.range_replace``); the marker says ``held``."""
    provenance: dict[str, Any] | None = option("provenance", PROVENANCE, default=None)
    """Recorded in every commit marker: the run identity and range the batch came from
    (:mod:`kappaplus.runtime.state.identity`), so a later run can tell what the table holds."""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.partition_column.lower() == BATCH_COLUMN:
            raise ConfigError(
                "partition_column", self.partition_column, "reserved for the batch id column"
            )
        object.__setattr__(self, "extra_partitions", self._checked_extra(self.extra_partitions))
        if self.hold and self.visibility != "batch":
            raise ConfigError(
                "visibility",
                self.visibility,
                f"table {self.table}: replacing a range (--replace-range) needs visibility "
                "'batch' (the batches are held back until the run finishes)",
            )

    def _checked_extra(self, extra: Any) -> tuple[tuple[str, str], ...]:
        if isinstance(extra, str | bytes) or not isinstance(extra, tuple | list):
            raise ConfigError("extra_partitions", extra, "expected (column, SQL expression) pairs")
        pairs: list[tuple[str, str]] = []
        seen = {self.partition_column.lower(), BATCH_COLUMN}
        for item in extra:
            if (
                not isinstance(item, tuple | list)
                or len(item) != 2
                or not all(isinstance(part, str) for part in item)
            ):
                raise ConfigError(
                    "extra_partitions", item, "expected a (column, SQL expression) pair"
                )
            name, expr = item
            if not _IDENT.match(name):
                raise ConfigError("extra_partitions", name, "not an identifier")
            if name.lower() in seen:
                raise ConfigError(
                    "extra_partitions",
                    name,
                    f"the partition columns {sorted(seen)} are taken (or {BATCH_COLUMN!r} "
                    "is reserved for the batch id)",
                )
            if not expr.strip():
                raise ConfigError("extra_partitions", item, f"empty SQL expression for {name!r}")
            seen.add(name.lower())
            pairs.append((name, expr))
        return tuple(pairs)

    @classmethod
    def from_config(
        cls,
        output: HiveOutputBinding,
        *,
        query_name: str,
        event_time_column: str | None = None,
        provenance: dict[str, Any] | None = None,
        hold: bool = False,
    ) -> HiveSinkOptions:
        """Options for a resolved ``[outputs.<name>.hive]`` binding of a job config.

        ``hour_partition`` becomes an extra partition: the hour of ``event_time_column``.
        """
        extra: tuple[tuple[str, str], ...] = ()
        if output.hour_partition is not None:
            if event_time_column is None:
                raise ConfigError(
                    "hour_partition",
                    output.hour_partition,
                    f"the output written to {output.table} has no event-time column to take "
                    "the hour of",
                )
            extra = ((output.hour_partition, f"hour({quote_identifier(event_time_column)})"),)
        return cls(
            table=output.table,
            query_name=query_name,
            partition_column=output.partition_column,
            partition_expr=output.partition_expr,
            event_time_column=event_time_column,
            visibility=output.visibility,
            extra_partitions=extra,
            provenance=provenance,
            hold=hold,
        )

    def partition_expression(self) -> str | None:
        if self.partition_expr:
            return self.partition_expr
        if self.event_time_column:
            return f"to_date({quote_identifier(self.event_time_column)})"
        return None

    @property
    def time_partition_columns(self) -> list[str]:
        """The partition columns the rows carry: ``partition_column`` then the extra ones."""
        return [self.partition_column, *(name for name, _ in self.extra_partitions)]

    @property
    def table_partition_columns(self) -> list[str]:
        """The table's partition columns: the time ones, then ``kappa_batch`` in batch mode."""
        batch = [BATCH_COLUMN] if self.visibility == "batch" else []
        return [*self.time_partition_columns, *batch]


def quote_identifier(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def table_sql(table: str) -> str:
    return ".".join(quote_identifier(part) for part in table.split("."))


def sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def partition_segments(partition: str) -> list[tuple[str, str]]:
    """``dt=2024-01-01/hr=5`` -> ``[("dt", "2024-01-01"), ("hr", "5")]`` (unescaped)."""
    pairs = []
    for segment in partition.split("/"):
        column, _, raw = segment.partition("=")
        pairs.append((unquote(column), unquote(raw)))
    return pairs


def partition_key(partition: str) -> tuple[tuple[str, str], ...]:
    """A partition path compared the way the metastore does: column names case-insensitive."""
    return tuple((column.lower(), value) for column, value in partition_segments(partition))
