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

The protocol is :class:`kappaplus.connectors.lake_sink.LakeTableSink`'s (shared with the
Delta sink); this module supplies Iceberg's table, marker and commit.

The property lives in the table metadata, so snapshot expiry does not forget it (a marker
kept only in snapshot summaries would be expired with its snapshot).

>>> sink = IcebergTableSink("db.sessions", None, query="sessions-ab12")  # doctest: +SKIP
>>> sink.write_batch(batch_df, batch_id)                                # doctest: +SKIP
True
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa

from kappaplus.connectors.iceberg.catalog import load_catalog
from kappaplus.connectors.lake_sink import (
    COMMIT_RETRIES,
    CommitConflict,
    InjectedFault,
    LakeTableSink,
    fit_arrow,
    inject_fault,
)

log = logging.getLogger(__name__)

__all__ = ["COMMIT_RETRIES", "FAULT_ENV", "IcebergTableSink", "InjectedFault", "batch_property"]

BATCH_PROPERTY_PREFIX = "kappa.batch."
FAULT_ENV = "KAPPA_ICEBERG_SINK_FAULT"
"""Tests only: ``before-commit`` fails a batch after its data files are written, before the
commit; ``after-commit`` fails it after the commit, before Spark records the batch;
``<step>:<batch id>`` only that batch."""


def batch_property(query: str) -> str:
    """The table property holding the last batch id ``query`` committed."""
    return f"{BATCH_PROPERTY_PREFIX}{query}"


class IcebergTableSink(LakeTableSink):
    """Writes one output query's micro-batches into the Iceberg table ``table``."""

    FORMAT = "Iceberg"

    def __init__(self, table: str, catalog: dict[str, str] | None, *, query: str) -> None:
        super().__init__(table, query=query)
        self.catalog_properties = catalog
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

    def commit(self, table: Any, rows: pa.Table, batch_id: int) -> None:
        """One transaction: the data files appended as one snapshot and the property
        ``kappa.batch.<query>`` set to ``batch_id``."""
        from pyiceberg.exceptions import CommitFailedException

        try:
            with table.transaction() as tx:
                if rows.num_rows:
                    summary = {"kappa.query": self.query, "kappa.batch": str(batch_id)}
                    fitted = fit_arrow(rows, table.schema().as_arrow(), self.table_name)
                    tx.append(fitted, snapshot_properties=summary)
                inject_fault(FAULT_ENV, "before-commit", batch_id)
                tx.set_properties({batch_property(self.query): str(batch_id)})
        except CommitFailedException as exc:
            raise CommitConflict(str(exc)) from exc
        inject_fault(FAULT_ENV, "after-commit", batch_id)
