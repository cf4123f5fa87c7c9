"""Exactly-once micro-batches into an Iceberg table, through pyiceberg (no JVM connector).

Each micro-batch of an output query is collected on the driver as Arrow (an output is
what a job's aggregation emits: small next to its input), written as data files by pyiceberg
and committed as ONE snapshot, in one transaction with the table property
``kappa.batch.<query>`` = the batch id: the idempotence scheme of Spark's own Delta sink
(application transactions, appId/version), on Iceberg's optimistic commit.

- Before writing, the property is read: a batch id at or below it was committed by an
  earlier attempt (Spark replays the last batch after a crash between the table's commit
  and its own): it is skipped, never written twice.
- A crash before the commit leaves data files no snapshot references (readers never see
  them; Iceberg's orphan-file removal deletes them); the replay writes the batch again.
- Readers see a batch whole or not at all: one snapshot per batch.
- A concurrent commit by another writer makes pyiceberg's commit fail; the table is
  reloaded and the check made again (at most ``COMMIT_RETRIES`` times).

The property lives in the table metadata, so snapshot expiry does not forget it (a marker
kept only in snapshot summaries would be expired with its snapshot).

>>> sink = IcebergTableSink("db.sessions", None, query="sessions-ab12")  # doctest: +SKIP
>>> sink.write_batch(batch_df, batch_id)                                # doctest: +SKIP
True
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from kappaplus.connectors.iceberg.catalog import load_catalog
from kappaplus.core.errors import TableError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

BATCH_PROPERTY_PREFIX = "kappa.batch."
COMMIT_RETRIES = 5
FAULT_ENV = "KAPPA_ICEBERG_SINK_FAULT"
"""Tests only: ``before-commit`` fails a batch after its data files are written, before the
commit; ``after-commit`` fails it after the commit, before Spark records the batch;
``<step>:<batch id>`` only that batch."""


class InjectedFault(RuntimeError):
    """A failure injected by :data:`FAULT_ENV` (tests of the commit protocol)."""


def _fault(step: str, batch_id: int) -> None:
    wanted = os.environ.get(FAULT_ENV, "")
    name, _, only = wanted.partition(":")
    if name == step and (not only or int(only) == batch_id):
        raise InjectedFault(f"injected {step} of batch {batch_id}")


def batch_property(query: str) -> str:
    """The table property holding the last batch id ``query`` committed."""
    return f"{BATCH_PROPERTY_PREFIX}{query}"


class IcebergTableSink:
    """Writes one output query's micro-batches into the Iceberg table ``table``."""

    def __init__(self, table: str, catalog: dict[str, str] | None, *, query: str) -> None:
        self.table_name = table
        self.catalog_properties = catalog
        self.query = query
        self._catalog: Any = None

    def catalog(self) -> Any:
        if self._catalog is None:
            self._catalog = load_catalog(self.catalog_properties)
        return self._catalog

    def load(self, schema: pa.Schema | None = None) -> Any:
        """The table; created from ``schema`` (unpartitioned) when missing."""
        from pyiceberg.exceptions import NoSuchTableError

        catalog = self.catalog()
        try:
            return catalog.load_table(self.table_name)
        except NoSuchTableError:
            if schema is None:
                raise
        namespace = self.table_name.rsplit(".", 1)[0]
        catalog.create_namespace_if_not_exists(namespace)
        log.info("created Iceberg table %s", self.table_name)
        return catalog.create_table_if_not_exists(self.table_name, schema=schema)

    def committed_batch(self, table: Any | None = None) -> int:
        """The last batch id this query committed (-1: none)."""
        table = table if table is not None else self.load()
        return int(table.properties.get(batch_property(self.query), -1))

    def write_batch(self, batch: DataFrame, batch_id: int) -> bool:
        """Write ``batch`` as batch ``batch_id``; False when an earlier attempt committed it."""
        rows = batch.toArrow()
        return self.write_arrow(rows, batch_id)

    def write_arrow(self, rows: pa.Table, batch_id: int) -> bool:
        """The commit protocol over an Arrow table (see the module docstring)."""
        from pyiceberg.exceptions import CommitFailedException

        table = self.load(rows.schema)
        for attempt in range(1, COMMIT_RETRIES + 1):
            done = self.committed_batch(table)
            if batch_id <= done:
                log.info(
                    "Iceberg table %s: batch %d of %s was committed before (last %d): skipped",
                    self.table_name,
                    batch_id,
                    self.query,
                    done,
                )
                return False
            try:
                with table.transaction() as tx:
                    if rows.num_rows:
                        summary = {"kappa.query": self.query, "kappa.batch": str(batch_id)}
                        tx.append(
                            _fit(rows, table.schema().as_arrow()), snapshot_properties=summary
                        )
                    _fault("before-commit", batch_id)
                    tx.set_properties({batch_property(self.query): str(batch_id)})
            except CommitFailedException as exc:
                log.warning(
                    "Iceberg table %s: commit of batch %d conflicted (attempt %d): %s",
                    self.table_name,
                    batch_id,
                    attempt,
                    exc,
                )
                table = self.load()
                continue
            _fault("after-commit", batch_id)
            return True
        raise TableError(
            f"Iceberg table {self.table_name!r}: batch {batch_id} of {self.query} could not be "
            f"committed after {COMMIT_RETRIES} conflicting commits; run the same command again"
        )


def _fit(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` in the table's column order and types (by name; a missing column is null)."""
    arrays = []
    for field in schema:
        if field.name in rows.column_names:
            column = rows.column(field.name)
            arrays.append(column if column.type == field.type else column.cast(field.type))
        else:
            arrays.append(pa.nulls(rows.num_rows, field.type))
    return pa.Table.from_arrays(arrays, schema=schema)
