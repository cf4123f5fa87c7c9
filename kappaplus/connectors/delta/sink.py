"""Exactly-once micro-batches into a Delta table, through delta-rs (no JVM connector), with
the idempotence scheme of Spark's own Delta sink: application transactions (``txn``
actions: appId = the output query's name, which carries its checkpoint's id; version = the
batch id), committed in the same log entry as the batch's data files.

The protocol is :class:`kappaplus.connectors.lake_sink.LakeTableSink`'s (shared with the
Iceberg sink); each micro-batch is collected on the driver as Arrow, as the Iceberg sink
does (an output is small next to the job's input, and one process holding the batch commits
it as ONE log entry):

1. ``before-write``: the table is opened (created from the batch's schema, unpartitioned,
   when missing) and ``txn`` of this query read (:meth:`DeltaTable.transaction_version`):
   a batch id at or below it was committed by an earlier attempt and is skipped;
2. ``before-commit``: the rows are written as one Parquet file in the table's location
   (with the per-file statistics the Delta log keeps: ``numRecords``, ``minValues``,
   ``maxValues``, ``nullCount``; a backfill from this table slices by them);
3. the file's ``add`` action and the ``txn`` action are committed as one version
   (``create_write_transaction`` with ``CommitProperties(app_transactions=...)``, no
   silent retry inside delta-rs: a concurrent commit comes back here, the table is
   reopened and ``txn`` read again);
4. ``after-commit``: Spark records the batch in its checkpoint.

A crash before step 3 leaves a file no version references: readers never see it
(``VACUUM`` removes it); the replay writes the batch again. A crash after step 3 makes the
replay a no-op. Readers see a batch whole or not at all: one version per batch (an empty
batch's version holds its ``txn`` only).

``txn`` actions live in the log and its checkpoints, so log clean-up does not forget them,
unless the table sets ``delta.setTransactionRetentionDuration``: do not set it on a table
this sink writes. :func:`app_transactions` lists every query's ``txn`` (the doubling
refusal of :mod:`kappaplus.runtime.state.target_claims` reads it).

>>> sink = DeltaTableSink("/lake/sessions", None, query="sessions-ab12")  # doctest: +SKIP
>>> sink.write_batch(batch_df, batch_id)                                  # doctest: +SKIP
True
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kappaplus.connectors.delta.names import NAME_PATTERN, registered_tables
from kappaplus.connectors.lake_sink import (
    CommitConflict,
    InjectedFault,
    LakeTableSink,
    fit_arrow,
    inject_fault,
)
from kappaplus.core.errors import ConfigError, TableError, TableNotFound

log = logging.getLogger(__name__)

__all__ = [
    "FAULT_ENV",
    "DeltaTableSink",
    "InjectedFault",
    "app_transactions",
    "output_location",
]

FAULT_ENV = "KAPPA_DELTA_SINK_FAULT"
"""Tests only: ``before-write`` fails a batch after its ``txn`` check, before its file is
written; ``before-commit`` after the file is written, before the commit; ``after-commit``
after the commit, before Spark records the batch; ``<step>:<batch id>`` only that batch."""

BACKFILL_SUFFIX = "_backfill"
STRING_STATS_MAX = 32
"""Strings longer than this get no min/max statistics (a truncated max would be wrong)."""


def output_location(path: str) -> str:
    """Where an output's Delta table lives: a registered name's location (``<name>_backfill``
    of a registered ``<name>``: its location + ``_backfill``), else ``path`` itself (a local
    path made absolute). An unregistered dotted name is refused: it is no location."""
    if "/" in path or "\\" in path or not NAME_PATTERN.match(path):
        return path if "://" in path else os.path.abspath(path)
    tables = registered_tables()
    if path in tables:
        return tables[path]
    base = path[: -len(BACKFILL_SUFFIX)] if path.endswith(BACKFILL_SUFFIX) else None
    if base is not None and base in tables:
        return tables[base].rstrip("/") + BACKFILL_SUFFIX
    raise ConfigError(
        "path",
        path,
        "not a registered Delta table name; register it (kappa table register --delta "
        f"{path} --location PATH) or give the table's location",
    )


class DeltaTableSink(LakeTableSink):
    """Writes one output query's micro-batches into the Delta table at ``path`` (a location
    or a registered name, :func:`output_location`)."""

    FORMAT = "Delta"

    def __init__(self, path: str, storage_options: dict[str, str] | None, *, query: str) -> None:
        super().__init__(path, query=query)
        self.location = output_location(path)
        self.storage_options = dict(storage_options) if storage_options else None

    def load(self, schema: pa.Schema | None = None) -> Any:
        """The table at its latest version; created (unpartitioned) when missing."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            return DeltaTable(self.location, storage_options=self.storage_options)
        except TableNotFoundError:
            if schema is None:
                raise TableNotFound(
                    f"no Delta table at {self.location!r} (output {self.table_name!r}): it is "
                    "created by the first batch written to it"
                ) from None
        log.info("creating Delta table %s", self.location)
        return DeltaTable.create(
            self.location,
            schema=schema,
            mode="ignore",
            storage_options=self.storage_options,
            commit_properties=_created_by(self.query),
        )

    def committed_batch(self, table: Any | None = None) -> int:
        """The ``txn`` version of this query in the table (-1: none)."""
        table = table if table is not None else self.load()
        version = table.transaction_version(self.query)
        return -1 if version is None else int(version)

    def commit(self, table: Any, rows: pa.Table, batch_id: int) -> None:
        """One Parquet file, then one log entry: its ``add`` and this query's ``txn`` (an
        empty batch: the ``txn`` alone, as Spark's Delta sink does)."""
        from deltalake import CommitProperties, Transaction
        from deltalake.exceptions import CommitFailedError

        inject_fault(FAULT_ENV, "before-write", batch_id)
        adds = []
        if rows.num_rows:
            schema = pa.schema(table.schema().to_arrow())
            adds.append(self._write_file(fit_arrow(rows, schema, self.location), batch_id))
        inject_fault(FAULT_ENV, "before-commit", batch_id)
        properties = CommitProperties(
            custom_metadata={"kappa.query": self.query, "kappa.batch": str(batch_id)},
            max_commit_retries=0,
            app_transactions=[Transaction(app_id=self.query, version=batch_id)],
        )
        try:
            table.create_write_transaction(
                adds, "append", table.schema(), commit_properties=properties
            )
        except CommitFailedError as exc:
            raise CommitConflict(str(exc)) from exc
        inject_fault(FAULT_ENV, "after-commit", batch_id)

    def _write_file(self, rows: pa.Table, batch_id: int) -> Any:
        """Write ``rows`` as a Parquet file at the table's root; its ``add`` action."""
        import pyarrow.parquet as pq
        from deltalake.transaction import AddAction

        name = f"part-{batch_id:05d}-{uuid.uuid4()}-c000.snappy.parquet"
        fs = _filesystem(self.location, self.storage_options)
        pq.write_table(rows, name, filesystem=fs, compression="snappy")
        size = int(fs.get_file_info(name).size)
        now = int(dt.datetime.now(dt.UTC).timestamp() * 1000)
        return AddAction(name, size, {}, now, True, json.dumps(file_statistics(rows)))


def _created_by(query: str) -> Any:
    from deltalake import CommitProperties

    return CommitProperties(custom_metadata={"kappa.query": query})


def _filesystem(location: str, storage_options: dict[str, str] | None) -> Any:
    """A pyarrow filesystem rooted at the table's location, through delta-rs's object
    store (the same storage options as the table: local paths and ``s3://`` alike)."""
    import pyarrow.fs as pafs
    from deltalake.fs import DeltaStorageHandler

    return pafs.PyFileSystem(DeltaStorageHandler(location, storage_options or None))


def _stat(value: Any, kind: pa.DataType) -> Any:
    """A min/max value as the Delta log writes it (timestamps in milliseconds, UTC)."""
    if pa.types.is_timestamp(kind):
        stamp = value.astimezone(dt.UTC) if value.tzinfo else value
        return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"
    if pa.types.is_date(kind):
        return value.isoformat()
    return value


def file_statistics(rows: pa.Table) -> dict[str, Any]:
    """``numRecords``, ``minValues``, ``maxValues`` and ``nullCount`` of a data file, for the
    top-level columns of types the Delta log keeps statistics for (numbers, dates,
    timestamps with a time zone, short strings); the others get a null count only.

    >>> import datetime as dt
    >>> stamp = dt.datetime(2024, 3, 1, 0, 0, 0, 123999, tzinfo=dt.UTC)
    >>> t = pa.table({"n": [3, 1, None], "ts": pa.array([stamp] * 3, pa.timestamp("us", "UTC"))})
    >>> file_statistics(t)["maxValues"], file_statistics(t)["nullCount"]
    ({'n': 3, 'ts': '2024-03-01T00:00:00.123Z'}, {'n': 1, 'ts': 0})
    """
    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for field in rows.schema:
        column = rows.column(field.name)
        kind = field.type
        if pa.types.is_nested(kind):
            continue
        nulls[field.name] = int(column.null_count)
        ranged = (
            pa.types.is_integer(kind)
            or pa.types.is_floating(kind)
            or pa.types.is_date(kind)
            or (pa.types.is_timestamp(kind) and kind.tz is not None)
            or pa.types.is_string(kind)
            or pa.types.is_large_string(kind)
        )
        if not ranged or column.null_count == len(column):
            continue
        if pa.types.is_floating(kind) and pc.any(pc.is_nan(column)).as_py():
            continue
        bounds = pc.min_max(column)
        lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
        if isinstance(lo, str) and max(len(lo), len(hi)) > STRING_STATS_MAX:
            continue
        low[field.name], high[field.name] = _stat(lo, kind), _stat(hi, kind)
    return {"numRecords": rows.num_rows, "minValues": low, "maxValues": high, "nullCount": nulls}


def app_transactions(location: str, storage_options: dict[str, str] | None) -> dict[str, int]:
    """Every ``txn`` (appId -> last version) of the Delta table at ``location``, read from
    its log: the last checkpoint's ``txn`` column, then the commits after it. {} when there
    is no table."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(location, storage_options or None):
        return {}
    fs = _filesystem(location, storage_options)
    listing = fs.get_file_info(pafs.FileSelector("_delta_log", allow_not_found=True))
    names = {info.path.rsplit("/", 1)[-1] for info in listing}
    found: dict[str, int] = {}
    after = -1
    if "_last_checkpoint" in names:
        with fs.open_input_stream("_delta_log/_last_checkpoint") as stream:
            last = json.loads(stream.read().decode())
        after = int(last["version"])
        parts = last.get("parts")
        files = (
            [
                f"{after:020d}.checkpoint.{i:010d}.{int(parts):010d}.parquet"
                for i in range(1, 1 + int(parts))
            ]
            if parts
            else [f"{after:020d}.checkpoint.parquet"]
        )
        missing = [f for f in files if f not in names]
        if missing:
            raise TableError(
                f"Delta table {location!r}: checkpoint {missing[0]!r} named by "
                "_last_checkpoint is not in the log (a checkpoint format this reader does not "
                "know); its application transactions cannot be listed"
            )
        for name in files:
            txn = pq.read_table(f"_delta_log/{name}", columns=["txn"], filesystem=fs)
            for entry in txn.column("txn").to_pylist():
                if entry and entry.get("appId") is not None:
                    found[entry["appId"]] = int(entry["version"])
    commits = sorted(
        int(name[:20])
        for name in names
        if name.endswith(".json") and name[:20].isdigit() and int(name[:20]) > after
    )
    for version in commits:
        with fs.open_input_stream(f"_delta_log/{version:020d}.json") as stream:
            for line in stream.read().decode().splitlines():
                if '"txn"' in line:
                    action = json.loads(line).get("txn")
                    if action:
                        found[action["appId"]] = int(action["version"])
    return found
