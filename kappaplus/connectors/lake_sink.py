"""What the exactly-once lake table sinks (Iceberg, Delta) have in common: the commit
protocol of Spark's own Delta sink (application transactions, appId/version) over a table
format's optimistic commit, driven per micro-batch of one output query.

Each micro-batch is collected on the driver as Arrow (an output is what a job's aggregation
emits: small next to its input; and one process then holds the whole batch, so it can
commit it as ONE table version) and goes through :meth:`LakeTableSink.write_arrow`:

1. the table is loaded (created from the batch's schema when missing);
2. the last batch id this query committed is read from the table (``committed_batch``):
   a batch id at or below it was committed by an earlier attempt (Spark replays the last
   batch after a crash between the table's commit and its own) and is skipped, never
   written twice;
3. the rows are written as data files and committed with the batch id in ONE commit
   (``commit``): readers see a batch whole or not at all, and a crash before the commit
   leaves only files no table version references (the replay writes the batch again);
4. a commit that conflicts with another writer's is retried on the reloaded table, from
   step 2, at most :data:`COMMIT_RETRIES` times.

Faults can be injected at each step (tests of the protocol): the format's sink names an
environment variable (``KAPPA_ICEBERG_SINK_FAULT``, ``KAPPA_DELTA_SINK_FAULT``) whose value
``<step>`` or ``<step>:<batch id>`` fails that step (:func:`inject_fault`).
"""

from __future__ import annotations

import logging
import os
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from kappaplus.core.errors import TableError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

COMMIT_RETRIES = 5


class InjectedFault(RuntimeError):
    """A failure injected by a sink's fault variable (tests of the commit protocol)."""


def inject_fault(env: str, step: str, batch_id: int) -> None:
    """Raise :class:`InjectedFault` when ``$env`` is ``step`` or ``step:<batch_id>``."""
    wanted = os.environ.get(env, "")
    name, _, only = wanted.partition(":")
    if name == step and (not only or int(only) == batch_id):
        raise InjectedFault(f"injected {step} of batch {batch_id}")


class CommitConflict(Exception):
    """A commit lost to a concurrent writer's (the table is reloaded and checked again)."""


class LakeTableSink(ABC):
    """One output query's micro-batches into one lake table, exactly once (module
    docstring). Subclasses implement :meth:`load`, :meth:`committed_batch` and
    :meth:`commit` for their format; ``FORMAT`` names it in logs and errors."""

    FORMAT = "lake"

    def __init__(self, table: str, *, query: str) -> None:
        self.table_name = table
        self.query = query

    @abstractmethod
    def load(self, schema: pa.Schema | None = None) -> Any:
        """The table; created from ``schema`` when missing (``schema`` None: must exist)."""

    @abstractmethod
    def committed_batch(self, table: Any | None = None) -> int:
        """The last batch id this query committed to the table (-1: none)."""

    @abstractmethod
    def commit(self, table: Any, rows: pa.Table, batch_id: int) -> None:
        """Write ``rows`` and commit them with ``batch_id`` as one table version; raise
        :class:`CommitConflict` when a concurrent commit won."""

    def write_batch(self, batch: DataFrame, batch_id: int) -> bool:
        """Write ``batch`` as batch ``batch_id``; False when an earlier attempt committed it."""
        return self.write_arrow(batch.toArrow(), batch_id)

    def write_arrow(self, rows: pa.Table, batch_id: int) -> bool:
        """The commit protocol over an Arrow table (module docstring)."""
        table = self.load(rows.schema)
        for attempt in range(1, COMMIT_RETRIES + 1):
            done = self.committed_batch(table)
            if batch_id <= done:
                log.info(
                    "%s table %s: batch %d of %s was committed before (last %d): skipped",
                    self.FORMAT,
                    self.table_name,
                    batch_id,
                    self.query,
                    done,
                )
                return False
            try:
                self.commit(table, rows, batch_id)
            except CommitConflict as exc:
                log.warning(
                    "%s table %s: commit of batch %d conflicted (attempt %d): %s",
                    self.FORMAT,
                    self.table_name,
                    batch_id,
                    attempt,
                    exc,
                )
                table = self.load()
                continue
            return True
        raise TableError(
            f"{self.FORMAT} table {self.table_name!r}: batch {batch_id} of {self.query} could "
            f"not be committed after {COMMIT_RETRIES} conflicting commits; run the same "
            "command again"
        )


def fit_arrow(rows: pa.Table, schema: pa.Schema, table: str) -> pa.Table:
    """``rows`` in the table's column order and types (by name; a column the batch lacks is
    null). A batch column the table lacks is refused (:class:`TableError` naming it): it
    would otherwise be dropped without a word."""
    extra = [name for name in rows.column_names if schema.get_field_index(name) < 0]
    if extra:
        raise TableError(
            f"table {table!r} has no column {', '.join(map(repr, extra))} of this batch; "
            "add the column to the table, or write to a new table"
        )
    arrays = []
    for field in schema:
        if field.name in rows.column_names:
            column = rows.column(field.name)
            arrays.append(column if column.type == field.type else column.cast(field.type))
        else:
            arrays.append(pa.nulls(rows.num_rows, field.type))
    return pa.Table.from_arrays(arrays, schema=schema)
