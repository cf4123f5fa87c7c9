"""Iceberg tables for the tests, written with pyiceberg into a SQL (SQLite) catalog, and
ground truths computed independently from the rows as written (pandas), not by the reader.

Each table holds rows ``id, key, ts, v`` over a few days, written in files whose event
times are out of order (later days first, files spanning several days when the table is
not partitioned by day).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

BASE = datetime(2024, 3, 1, tzinfo=UTC)
TS = pa.timestamp("us", tz="UTC")


def catalog_props(root: Path, warehouse: str | None = None) -> dict[str, str]:
    root.mkdir(parents=True, exist_ok=True)
    return {
        "type": "sql",
        "uri": f"sqlite:///{root / 'catalog.db'}",
        "warehouse": warehouse or f"file://{root / 'warehouse'}",
    }


def open_catalog(props: dict[str, str]) -> Any:
    from pyiceberg.catalog import load_catalog

    # the SQL catalog keeps tables per catalog name: its "name" key, else kappa's default
    others = {k: v for k, v in props.items() if k != "name"}
    return load_catalog(props.get("name", "kappa"), **others)


def make_rows(days: int, per_day: int, seed: int) -> pd.DataFrame:
    """Rows with random event times over ``days`` days (a quiet gap in day 2's night)."""
    rng = random.Random(seed)
    rows = []
    for i in range(days * per_day):
        day = i % days
        second = rng.randrange(0, 86_400)
        if day == 1 and 3600 <= second < 6 * 3600:
            second += 6 * 3600  # a 5-hour gap: windows with no rows
        ts = BASE + timedelta(days=day, seconds=second, microseconds=rng.randrange(1_000_000))
        rows.append((i, rng.randrange(5), ts, float(rng.randrange(1000))))
    return pd.DataFrame(rows, columns=["id", "key", "ts", "v"])


def arrow_rows(frame: pd.DataFrame, value_name: str = "v") -> pa.Table:
    return pa.table(
        {
            "id": pa.array(frame["id"], pa.int64()),
            "key": pa.array(frame["key"], pa.int64()),
            "ts": pa.array(frame["ts"], TS),
            value_name: pa.array(frame["v"], pa.float64()),
        }
    )


@dataclass
class WrittenTable:
    """A table as written: its name, catalog, and the rows its current snapshot holds."""

    name: str
    props: dict[str, str]
    rows: pd.DataFrame
    value_column: str = "v"
    notes: list[str] = field(default_factory=list)

    def table(self) -> Any:
        return open_catalog(self.props).load_table(self.name)


def write_table(
    props: dict[str, str],
    name: str,
    partitioning: str,
    *,
    days: int = 3,
    per_day: int = 400,
    files: int = 6,
    seed: int = 1,
) -> WrittenTable:
    """A table partitioned by ``day`` (of ts), ``bucket`` (of key) or ``none``; the rows go
    in ``files`` appends in an order unrelated to event time (latest first, interleaved)."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import BucketTransform, DayTransform
    from pyiceberg.types import DoubleType, LongType, NestedField, TimestamptzType

    catalog = open_catalog(props)
    catalog.create_namespace_if_not_exists(name.split(".")[0])
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "key", LongType(), required=False),
        NestedField(3, "ts", TimestamptzType(), required=False),
        NestedField(4, "v", DoubleType(), required=False),
    )
    spec = PartitionSpec()
    if partitioning == "day":
        spec = PartitionSpec(PartitionField(3, 1000, DayTransform(), "ts_day"))
    elif partitioning == "bucket":
        spec = PartitionSpec(PartitionField(2, 1000, BucketTransform(4), "key_bucket"))
    table = catalog.create_table(name, schema=schema, partition_spec=spec)
    rows = make_rows(days, per_day, seed)
    # out of event-time order: the latest rows first, each append a mix of days
    order = rows.sort_values("ts", ascending=False).reset_index(drop=True)
    chunks = [order.iloc[i::files] for i in range(files)] if partitioning != "day" else []
    if partitioning == "day":
        # one append per day, latest day first, each split in two interleaved files
        for day in reversed(range(days)):
            part = order[order["ts"].dt.floor("D") == pd.Timestamp(BASE + timedelta(days=day))]
            chunks += [part.iloc[0::2], part.iloc[1::2]]
    for chunk in chunks:
        table.append(arrow_rows(chunk))
    return WrittenTable(name, props, rows)


def evolve(written: WrittenTable, seed: int = 7) -> WrittenTable:
    """Rename ``v`` to ``value``, add a column, append rows under the new names, and delete
    rows copy-on-write (pyiceberg rewrites the files)."""
    from pyiceberg.expressions import LessThan
    from pyiceberg.types import StringType

    table = written.table()
    with table.update_schema() as update:
        update.rename_column("v", "value")
        update.add_column("note", StringType())
    table = written.table()
    extra = make_rows(2, 100, seed)
    extra["id"] += 100_000
    extra["ts"] += timedelta(hours=12)
    new = arrow_rows(extra, "value").append_column("note", pa.array(["new"] * len(extra)))
    table.append(new)
    table = written.table()
    table.delete(LessThan("id", 50))
    rows = pd.concat([written.rows, extra], ignore_index=True)
    rows = rows[rows["id"] >= 50].reset_index(drop=True)
    return WrittenTable(written.name, written.props, rows, "value", ["renamed", "cow-deleted"])


def _commit_delete_file(table: Any, delete_file: Any) -> None:
    """Commit ``delete_file`` in a delete manifest (pyiceberg writes position and equality
    deletes of its own only copy-on-write; this is what a merge-on-read writer commits)."""
    from pyiceberg.manifest import ManifestContent, ManifestWriterV2

    original_content = ManifestWriterV2.content
    original_meta = ManifestWriterV2._meta

    def content(self: Any) -> ManifestContent:
        return ManifestContent.DELETES

    def meta(self: Any) -> dict[str, str]:
        return {**original_meta.fget(self), "content": "deletes"}  # type: ignore[attr-defined]

    ManifestWriterV2.content = content  # type: ignore[method-assign]
    ManifestWriterV2._meta = property(meta)  # type: ignore[assignment,method-assign]
    try:
        with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
            append.append_data_file(delete_file)
    finally:
        ManifestWriterV2.content = original_content  # type: ignore[method-assign]
        ManifestWriterV2._meta = original_meta  # type: ignore[method-assign]


def position_delete(written: WrittenTable, every: int = 7) -> WrittenTable:
    """Delete every ``every``-th row of the table's first data file with a position delete
    file (merge-on-read): the data file stays, the delete file says which rows are gone."""
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    table = written.table()
    task = sorted(table.scan().plan_files(), key=lambda t: t.file.file_path)[0]
    data = pq.read_table(task.file.file_path.replace("file://", ""))
    positions = list(range(0, data.num_rows, every))
    gone = set(data.column("id").to_pylist()[p] for p in positions)
    schema = pa.schema(
        [
            pa.field("file_path", pa.string(), False, {b"PARQUET:field_id": b"2147483546"}),
            pa.field("pos", pa.int64(), False, {b"PARQUET:field_id": b"2147483545"}),
        ]
    )
    deletes = pa.table(
        [pa.array([task.file.file_path] * len(positions)), pa.array(positions, pa.int64())],
        schema=schema,
    )
    location = task.file.file_path.rsplit("/", 1)[0] + "/pos-deletes-00001.parquet"
    local = location.replace("file://", "")
    pq.write_table(deletes, local)
    delete_file = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=location,
        file_format=FileFormat.PARQUET,
        partition=task.file.partition,
        record_count=len(positions),
        file_size_in_bytes=Path(local).stat().st_size,
    )
    delete_file.spec_id = task.file.spec_id
    _commit_delete_file(table, delete_file)
    rows = written.rows[~written.rows["id"].isin(gone)].reset_index(drop=True)
    return WrittenTable(written.name, written.props, rows, written.value_column, written.notes)


def equality_delete(
    written: WrittenTable,
    deletes: dict[str, list[Any]],
    *,
    partition_of: str | None = None,
    name: str = "eq-deletes-00001.parquet",
) -> tuple[WrittenTable, str]:
    """Commit an equality delete file (merge-on-read) deleting the rows whose columns
    ``deletes`` (names to values, one delete row per position; ``None`` is null) all equal a
    delete row; returns the table with the ground truth updated and the file's path.

    The delete file is written by pyarrow, its columns carrying the table's field ids (the
    ``equality_ids``), and committed in a delete manifest of its own snapshot; pyiceberg's
    metadata is checked: the snapshot holds the file as an equality delete whose data
    sequence number is the snapshot's. The ground truth drops, by pandas, the matching rows
    (null equal to null) among the rows written before (the delete applies to older files
    only). With ``partition_of`` (a data file path) the delete is scoped to that file's
    partition, and only rows of that partition's data files are dropped; otherwise it is a
    global delete (the table must be unpartitioned).
    """
    from pyiceberg.io.pyarrow import schema_to_pyarrow
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    table = written.table()
    schema = table.schema()
    files = data_files(table)
    scope = [f for f in files if partition_of is None or f.file_path == partition_of]
    assert scope, f"no data file {partition_of}"
    home = scope[0]
    if partition_of is None:
        assert table.spec().is_unpartitioned(), "a global delete needs an unpartitioned spec"
    columns = {c: schema.find_field(c) for c in deletes}
    arrow_schema = pa.schema(
        [
            pa.field(
                c,
                schema_to_pyarrow(f.field_type),
                True,
                {b"PARQUET:field_id": str(f.field_id).encode()},
            )
            for c, f in columns.items()
        ]
    )
    frame = pa.table([pa.array(v) for v in deletes.values()], names=list(deletes))
    frame = frame.cast(arrow_schema)
    location = home.file_path.rsplit("/", 1)[0] + "/" + name
    with table.io.new_output(location).create(overwrite=True) as out:  # local or s3://
        pq.write_table(frame, out)
    delete_file = DataFile.from_args(
        content=DataFileContent.EQUALITY_DELETES,
        file_path=location,
        file_format=FileFormat.PARQUET,
        partition=home.partition,
        record_count=frame.num_rows,
        file_size_in_bytes=len(table.io.new_input(location)),
        equality_ids=[f.field_id for f in columns.values()],
    )
    delete_file.spec_id = home.spec_id
    _commit_delete_file(table, delete_file)
    _check_committed(written.table(), location, [f.field_id for f in columns.values()])
    # ground truth: pandas, null equal to null, over the rows written before
    rows = written.rows
    hit = pd.Series(False, index=rows.index)
    for values in zip(*deletes.values(), strict=True):
        match = pd.Series(True, index=rows.index)
        for c, value in zip(deletes, values, strict=True):
            column = rows[c]
            match &= column.isna() if value is None else (column == value).fillna(False)
        hit |= match
    if partition_of is not None:
        same = [f.file_path for f in files if f.partition == home.partition]
        ids = set()
        for path in same:
            with table.io.new_input(path).open() as stream:
                ids |= set(pq.read_table(stream, columns=["id"])["id"].to_pylist())
        hit &= rows["id"].isin(ids)
    kept = rows[~hit].reset_index(drop=True)
    return WrittenTable(
        written.name, written.props, kept, written.value_column, written.notes
    ), location


def data_files(table: Any) -> list[Any]:
    """The current snapshot's live data files, by path, from its manifests (pyiceberg's
    ``plan_files()`` refuses a snapshot with equality deletes)."""
    from pyiceberg.manifest import DataFileContent

    snapshot = table.current_snapshot()
    found = [
        entry.data_file
        for manifest in snapshot.manifests(table.io)
        for entry in manifest.fetch_manifest_entry(table.io)
        if entry.data_file.content == DataFileContent.DATA
    ]
    return sorted(found, key=lambda f: f.file_path)


def _check_committed(table: Any, location: str, equality_ids: list[int]) -> None:
    """pyiceberg's own metadata: the current snapshot added ``location`` as an equality
    delete file with ``equality_ids`` and the snapshot's sequence number."""
    from pyiceberg.manifest import DataFileContent, ManifestContent

    snapshot = table.current_snapshot()
    found = [
        (manifest, entry)
        for manifest in snapshot.manifests(table.io)
        for entry in manifest.fetch_manifest_entry(table.io)
        if entry.data_file.file_path == location
    ]
    assert len(found) == 1, found
    manifest, entry = found[0]
    assert manifest.content == ManifestContent.DELETES
    assert entry.data_file.content == DataFileContent.EQUALITY_DELETES
    assert list(entry.data_file.equality_ids) == equality_ids
    assert entry.snapshot_id == snapshot.snapshot_id
    assert entry.sequence_number == snapshot.sequence_number
    assert snapshot.sequence_number > max(
        s.sequence_number for s in table.snapshots() if s.snapshot_id != snapshot.snapshot_id
    )


# -- ground truths (pandas over the rows as written) ------------------------------------


def tumbling(rows: pd.DataFrame, minutes: int) -> list[tuple]:
    start = rows["ts"].dt.floor(f"{minutes}min")
    grouped = rows.assign(start=start).groupby("start").agg(n=("id", "size"), s=("v", "sum"))
    return sorted((ts.to_pydatetime(), int(n), round(s, 6)) for ts, n, s in grouped.itertuples())


def sliding(rows: pd.DataFrame, size_min: int, slide_min: int) -> list[tuple]:
    out: dict[datetime, int] = {}
    for ts in rows["ts"]:
        first = ts.floor(f"{slide_min}min") - pd.Timedelta(minutes=size_min - slide_min)
        for k in range(size_min // slide_min):
            start = first + pd.Timedelta(minutes=k * slide_min)
            if start <= ts < start + pd.Timedelta(minutes=size_min):
                out[start.to_pydatetime()] = out.get(start.to_pydatetime(), 0) + 1
    return sorted(out.items())


def sessions(rows: pd.DataFrame, gap_min: int) -> list[tuple]:
    out = []
    gap = pd.Timedelta(minutes=gap_min)
    for key, group in rows.sort_values("ts").groupby("key"):
        start = end = None
        n = 0
        for ts in group["ts"]:
            if start is not None and ts < end:
                end = max(end, ts + gap)
                n += 1
            else:
                if start is not None:
                    out.append((int(key), start.to_pydatetime(), end.to_pydatetime(), n))
                start, end, n = ts, ts + gap, 1
        out.append((int(key), start.to_pydatetime(), end.to_pydatetime(), n))
    return sorted(out)


def write_events(props: dict[str, str], name: str, events: list[dict[str, Any]]) -> None:
    """An unpartitioned Iceberg table of rider events, in four appends in arrival order
    (files out of event-time order)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField, StringType, TimestamptzType

    from kappaplus.examples.generate import arrival_order

    catalog = open_catalog(props)
    catalog.create_namespace_if_not_exists("db")
    schema = Schema(
        *[
            NestedField(i + 1, c, StringType(), required=False)
            for i, c in enumerate(["event_id", "rider_id", "event_type", "area"])
        ],
        NestedField(5, "event_time", TimestamptzType(), required=False),
    )
    table = catalog.create_table(name, schema=schema)
    ordered = arrival_order(events)
    for k in range(4):
        chunk = ordered[k::4]
        table.append(
            pa.table(
                {
                    **{
                        c: pa.array([e[c] for e in chunk], pa.string())
                        for c in schema.column_names[:4]
                    },
                    "event_time": pa.array(
                        [e["event_time"] for e in chunk], pa.timestamp("us", tz="UTC")
                    ),
                }
            )
        )
