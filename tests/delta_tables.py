"""Delta tables for the tests, written with delta-rs (``deltalake.write_deltalake``), and
ground truths computed independently over the pinned version: delta-rs's own reader
(``DeltaTable(path, version=v).to_pandas()``) and plain pandas, not the source under test.

Each table holds rows ``id, key, ts, v`` (plus the partition column ``day``, a string, when
partitioned by day) over a few days, written in appends whose event times are out of order
(latest rows first, each unpartitioned append a mix of days).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
from iceberg_tables import BASE, arrow_rows, make_rows


def delta_rows(frame: pd.DataFrame, partitioned: bool) -> pa.Table:
    table = arrow_rows(frame)
    if partitioned:
        days = frame["ts"].dt.strftime("%Y-%m-%d")
        table = table.append_column("day", pa.array(days, pa.string()))
    return table


@dataclass
class WrittenDelta:
    """A Delta table as written: its location and whether it is partitioned by day."""

    path: str
    partitioned: bool

    def table(self, version: int | None = None) -> Any:
        from deltalake import DeltaTable

        return DeltaTable(self.path, version=version)

    def version(self) -> int:
        return int(self.table().version())

    def truth(self, version: int | None = None) -> pd.DataFrame:
        """The rows of ``version`` (default the current one) as delta-rs reads them (its
        DataFusion reader: ``to_pandas`` refuses deletion vectors, this one applies them)."""
        from deltalake import QueryBuilder

        found = QueryBuilder().register("t", self.table(version)).execute("select * from t")
        frame = pa.table(found.read_all()).to_pandas()
        frame["ts"] = pd.to_datetime(frame["ts"], utc=True)
        return frame

    def append(self, frame: pd.DataFrame, **kwargs: Any) -> None:
        from deltalake import write_deltalake

        write_deltalake(
            self.path,
            delta_rows(frame, self.partitioned),
            mode="append",
            partition_by=["day"] if self.partitioned else None,
            **kwargs,
        )


def write_delta(
    root: Path,
    partitioning: str,
    *,
    days: int = 3,
    per_day: int = 400,
    files: int = 6,
    seed: int = 1,
    configuration: dict[str, str] | None = None,
) -> WrittenDelta:
    """A table partitioned by ``day`` (a string column) or ``none``; rows appended out of
    event-time order (latest first; unpartitioned: each append a mix of days)."""
    from deltalake import write_deltalake

    partitioned = partitioning == "day"
    path = str(root / f"delta_{partitioning}")
    rows = make_rows(days, per_day, seed)
    order = rows.sort_values("ts", ascending=False).reset_index(drop=True)
    chunks = [order.iloc[i::files] for i in range(files)] if not partitioned else []
    if partitioned:  # one append per day, latest day first, each in two interleaved files
        for day in reversed(range(days)):
            part = order[order["ts"].dt.floor("D") == pd.Timestamp(BASE + timedelta(days=day))]
            chunks += [part.iloc[0::2], part.iloc[1::2]]
    for i, chunk in enumerate(chunks):
        write_deltalake(
            path,
            delta_rows(chunk, partitioned),
            mode="append" if i else "error",
            partition_by=["day"] if partitioned else None,
            configuration=configuration if not i else None,
        )
    return WrittenDelta(path, partitioned)


Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def z85(data: bytes) -> str:
    """Z85 (ZeroMQ base-85) of ``data`` (a multiple of 4 bytes): Delta's inline vectors."""
    assert len(data) % 4 == 0
    out = []
    for i in range(0, len(data), 4):
        value = int.from_bytes(data[i : i + 4], "big")
        chunk = []
        for _ in range(5):
            value, digit = divmod(value, 85)
            chunk.append(Z85[digit])
        out.append("".join(reversed(chunk)))
    return "".join(out)


def roaring_array(positions: list[int]) -> bytes:
    """Delta's RoaringBitmapArray of row positions below 65536 (one bitmap, one array
    container): magic, bitmap count, key, then Roaring's portable format."""
    import struct

    positions = sorted(positions)
    bitmap = struct.pack("<II", 12346, 1) + struct.pack("<HH", 0, len(positions) - 1)
    bitmap += struct.pack("<I", 8 + 4 + 4) + struct.pack(f"<{len(positions)}H", *positions)
    body = struct.pack("<iq", 1681511377, 1) + struct.pack("<i", 0) + bitmap
    return body + b"\0" * (-len(body) % 4)


def add_deletion_vector(written: WrittenDelta, positions: tuple[int, ...] = (0, 3)) -> str:
    """Commit a new version that gives the table's first file an inline deletion vector
    (rows at ``positions`` deleted), as a writer with deletion vectors would (delta-rs does
    not write them); returns that file's path as the log names it."""
    import json

    log = Path(written.path) / "_delta_log"
    version = written.version()
    first = next(
        json.loads(line)["add"]
        for name in sorted(log.glob("*.json"))
        for line in name.read_text().splitlines()
        if '"add"' in line
    )
    data = roaring_array(list(positions))
    commit = [
        {"commitInfo": {"timestamp": 1, "operation": "DELETE"}},
        {"remove": {"path": first["path"], "deletionTimestamp": 1, "dataChange": True}},
        {
            "add": {
                **first,
                "dataChange": True,
                "deletionVector": {
                    "storageType": "i",
                    "pathOrInlineDv": z85(data),
                    "sizeInBytes": len(data),
                    "cardinality": len(positions),
                },
            }
        },
    ]
    target = log / f"{version + 1:020d}.json"
    target.write_text("".join(json.dumps(a) + "\n" for a in commit))
    return str(first["path"])


def add_file_without_statistics(written: WrittenDelta, frame: pd.DataFrame) -> str:
    """Commit a data file whose ``add`` action has no ``stats`` (as writers that skip
    statistics leave it); returns its path as the log names it."""
    import json

    import pyarrow.parquet as pq

    rows = delta_rows(frame, False)
    name = "part-nostats-0000.parquet"
    pq.write_table(rows, Path(written.path) / name)
    version = written.version()
    add = {
        "path": name,
        "partitionValues": {},
        "size": (Path(written.path) / name).stat().st_size,
        "modificationTime": 1,
        "dataChange": True,
    }
    commit = [{"commitInfo": {"timestamp": 1, "operation": "WRITE"}}, {"add": add}]
    target = Path(written.path) / "_delta_log" / f"{version + 1:020d}.json"
    target.write_text("".join(json.dumps(a) + "\n" for a in commit))
    return name


def enable_column_mapping(written: WrittenDelta) -> None:
    """Commit a version that turns on column mapping (mode ``name``, reader version 2), as
    Spark's ``ALTER TABLE ... SET TBLPROPERTIES`` would (delta-rs does not write it): each
    field gets a column id and a physical name."""
    import json

    log = Path(written.path) / "_delta_log"
    actions = [
        json.loads(line)
        for name in sorted(log.glob("*.json"))
        for line in name.read_text().splitlines()
    ]
    meta = [a["metaData"] for a in actions if "metaData" in a][-1]
    schema = json.loads(meta["schemaString"])
    for i, f in enumerate(schema["fields"]):
        f["metadata"] = {
            "delta.columnMapping.id": i + 1,
            "delta.columnMapping.physicalName": f["name"],
        }
    meta["schemaString"] = json.dumps(schema)
    meta["configuration"] = {
        "delta.columnMapping.mode": "name",
        "delta.columnMapping.maxColumnId": str(len(schema["fields"])),
    }
    commit = [
        {"commitInfo": {"timestamp": 1, "operation": "SET TBLPROPERTIES"}},
        {"protocol": {"minReaderVersion": 2, "minWriterVersion": 5}},
        {"metaData": meta},
    ]
    target = log / f"{written.version() + 1:020d}.json"
    target.write_text("".join(json.dumps(a) + "\n" for a in commit))
