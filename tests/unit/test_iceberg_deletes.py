"""The equality-delete rules of :mod:`kappaplus.connectors.iceberg.deletes` on their own: which
delete files apply to a data file (sequence numbers, partitions), rows matched on one and on
two columns with nulls, delete files read once, and the one-line refusals. The tables end to
end are in tests/connectors/test_iceberg_source.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.types import DoubleType, ListType, LongType, NestedField, StringType

from kappaplus.connectors.iceberg import deletes
from kappaplus.connectors.iceberg.deletes import (
    EqualityMatcher,
    _EqualityIndex,
    apply_equality_deletes,
    check_equality_delete,
)
from kappaplus.core.errors import DataError

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "name", StringType(), required=False),
    NestedField(3, "v", DoubleType(), required=False),
    NestedField(4, "tags", ListType(5, StringType()), required=False),
)


def data_file(
    path: str,
    content: DataFileContent = DataFileContent.EQUALITY_DELETES,
    partition: Record | None = None,
    ids: list[int] | None = None,
    file_format: FileFormat = FileFormat.PARQUET,
) -> Any:
    f = DataFile.from_args(
        content=content,
        file_path=path,
        file_format=file_format,
        partition=partition if partition is not None else Record(),
        record_count=1,
        file_size_in_bytes=1,
        equality_ids=ids if content == DataFileContent.EQUALITY_DELETES else None,
    )
    f.spec_id = 1 if partition is not None else 0
    return f


def test_an_equality_delete_applies_to_strictly_older_files_of_its_partition() -> None:
    index = _EqualityIndex()
    p1, p2 = data_file("p1", partition=Record(1)), data_file("p2", partition=Record(2))
    g = data_file("global")
    index.add(5, p1, False)
    index.add(5, p2, False)
    index.add(7, g, True)
    index.sort()
    in_p1 = data_file("d", DataFileContent.DATA, Record(1))
    assert index.for_data_file(4, in_p1) == (p1, g)  # older: its partition's and the global
    assert index.for_data_file(5, in_p1) == (g,)  # same sequence number: not applied
    assert index.for_data_file(7, in_p1) == ()
    in_p3 = data_file("d3", DataFileContent.DATA, Record(3))
    assert index.for_data_file(1, in_p3) == (g,)  # another partition: only the global one


def write_deletes(tmp_path: Path, name: str, columns: dict[str, tuple[int, pa.Array]]) -> str:
    schema = pa.schema(
        [
            pa.field(c, a.type, True, {b"PARQUET:field_id": str(i).encode()})
            for c, (i, a) in columns.items()
        ]
    )
    path = tmp_path / name
    pq.write_table(pa.table([a for _, a in columns.values()], schema=schema), path)
    return str(path)


def matcher(path: str, ids: list[int], names: tuple[str, ...]) -> EqualityMatcher:
    delete = data_file(path, ids=ids)
    return EqualityMatcher("db.t", 42, delete, names, PyArrowFileIO(), ())


def test_rows_matched_on_two_columns_null_equal_to_null(tmp_path: Path) -> None:
    path = write_deletes(
        tmp_path,
        "pairs.parquet",
        {
            "n": (2, pa.array(["a", None, "c"])),
            "i": (1, pa.array([1, 2, None], pa.int32())),  # cast to the data's int64
        },
    )
    batch = pa.record_batch(
        {
            "id": pa.array([1, 1, 2, 2, None, None, 3], pa.int64()),
            "name": pa.array(["a", "b", None, "a", "c", None, "c"]),
        }
    )
    kept = apply_equality_deletes(batch, [matcher(path, [1, 2], ("id", "name"))])
    # deleted: (1, a), (2, null), (null, c); kept: (1, b), (2, a), (null, null), (3, c)
    assert kept.to_pylist() == [
        {"id": 1, "name": "b"},
        {"id": 2, "name": "a"},
        {"id": None, "name": None},
        {"id": 3, "name": "c"},
    ]


def test_rows_matched_on_one_column_by_several_files_read_once(tmp_path: Path) -> None:
    first = write_deletes(tmp_path, "one.parquet", {"x": (1, pa.array([1, None], pa.int64()))})
    second = write_deletes(tmp_path, "two.parquet", {"x": (1, pa.array([4], pa.int64()))})
    batch = pa.record_batch({"id": pa.array([None, 1, 2, 3, 4, 5], pa.int64())})
    kept = apply_equality_deletes(
        batch, [matcher(first, [1], ("id",)), matcher(second, [1], ("id",))]
    )
    assert kept.column("id").to_pylist() == [2, 3, 5]
    Path(first).unlink()  # cached: a second reader (another slice) does not reread it
    again = apply_equality_deletes(batch, [matcher(first, [1], ("id",))])
    assert again.column("id").to_pylist() == [2, 3, 4, 5]
    assert any(key[0] == first for key in deletes._cache)


def test_a_delete_file_without_the_field_id_is_refused(tmp_path: Path) -> None:
    path = write_deletes(tmp_path, "noid.parquet", {"x": (9, pa.array([1], pa.int64()))})
    batch = pa.record_batch({"id": pa.array([1, 2], pa.int64())})
    with pytest.raises(DataError) as caught:
        apply_equality_deletes(batch, [matcher(path, [1], ("id",))])
    text = str(caught.value)
    assert "db.t" in text and "42" in text and path in text and "field id 1" in text


@pytest.mark.parametrize(
    ("ids", "file_format", "said"),
    [
        ([3], FileFormat.PARQUET, "'v' of type double"),
        ([4], FileFormat.PARQUET, "'tags' of type list<string>"),
        ([1], FileFormat.ORC, "is FileFormat.ORC, not Parquet"),
        ([77], FileFormat.PARQUET, "field id 77, which the table's schema no longer has"),
        ([], FileFormat.PARQUET, "names no equality field ids"),
    ],
)
def test_what_cannot_be_compared_is_refused_in_one_line(
    ids: list[int], file_format: FileFormat, said: str
) -> None:
    delete = data_file("s3://b/t/eq.parquet", ids=ids, file_format=file_format)
    with pytest.raises(DataError) as caught:
        check_equality_delete("db.t", 42, SCHEMA, delete)
    text = str(caught.value)
    assert "\n" not in text and "db.t" in text and "snapshot 42" in text
    assert "s3://b/t/eq.parquet" in text and said in text, text


def test_comparable_columns_pass() -> None:
    check_equality_delete("db.t", 42, SCHEMA, data_file("eq.parquet", ids=[1, 2]))
