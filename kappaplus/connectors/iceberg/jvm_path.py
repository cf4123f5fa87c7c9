"""Whether an Iceberg table's pinned snapshot can be read by the JVM reader (``kappa_hive_jvm``).

The JVM reader reads a slice's Parquet files with Spark's own vectorized reader; for an
Iceberg table it matches columns by their Parquet *field ids* (Spark's
``spark.sql.parquet.fieldId.read.enabled`` for this source only: the read schema carries each
field's id, :func:`with_field_ids`), as pyiceberg's Arrow scan (the Python reader) does, so a
renamed column, or a name dropped and added again, reads right across old files and a column
added later is null in them. Both readers plan the same slices with the same planner (served
to the JVM source from the driver's Python process,
:mod:`kappaplus.connectors.lake.planner_server`, here over the Iceberg lister). The JVM path
is taken when:

- every data file of the snapshot is Parquet and no delete file (position or equality)
  applies to any of them (pyiceberg applies them);
- the files' file system is one the session's JVM has a Hadoop file system for (local paths
  and ``file:``, ``hdfs:``...; not ``s3://`` without hadoop-aws);
- the table has no name mapping (``schema.name-mapping.default``: files without field ids,
  added from elsewhere, which pyiceberg maps by name) and no column read changed its type in
  the schema history (pyiceberg casts the older files' values);
- no column read is a fixed, uuid, time or nanosecond timestamp type;
- every file holds the source column of each identity partition it was written under (files
  added from a Hive layout may keep it in their path only, where pyiceberg fills it in);
- the event time is a timestamp (not stored as numbers or strings) and unplaceable rows fail
  the run (dead letters are written by the Python reader), as for Hive tables.

Anything else is read by the Python reader, and the reason is said once in the log.

>>> local_only = lambda scheme: scheme == "file"
>>> jvm_unsupported_iceberg(options, local_only)  # doctest: +SKIP
"column 'n' was int in schema 0 (now long)"
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import ArrayType, DataType, StructField, StructType
from pyspark.sql.types import MapType as SparkMapType

from kappaplus.connectors.iceberg.lister import _io_key, scan_tasks, static_table
from kappaplus.connectors.lake.jvm_reader import unreachable_file_system
from kappaplus.connectors.lake.options import NullEventTimePolicy

if TYPE_CHECKING:
    from kappaplus.connectors.iceberg.options import IcebergSourceOptions


NAME_MAPPING = "schema.name-mapping.default"
FIELD_ID_KEY = "parquet.field.id"
"""Spark's metadata key for a read schema field's Parquet field id."""


def with_field_ids(read_schema: StructType, schema: Any) -> StructType:
    """``read_schema`` (Spark) with each field's Iceberg field id in its metadata
    (:data:`FIELD_ID_KEY`), nested struct fields too, from the table's current ``schema``:
    what makes Spark's Parquet reader match columns by id."""
    from pyiceberg.types import ListType, MapType
    from pyiceberg.types import StructType as IcebergStruct

    def tag(kind: DataType, iceberg: Any) -> DataType:
        if isinstance(kind, StructType) and isinstance(iceberg, IcebergStruct):
            fields = []
            for f in kind.fields:
                match = next((x for x in iceberg.fields if x.name == f.name), None)
                if match is None:
                    fields.append(f)
                    continue
                meta = {**(f.metadata or {}), FIELD_ID_KEY: match.field_id}
                fields.append(
                    StructField(f.name, tag(f.dataType, match.field_type), f.nullable, meta)
                )
            return StructType(fields)
        if isinstance(kind, ArrayType) and isinstance(iceberg, ListType):
            return ArrayType(tag(kind.elementType, iceberg.element_type), kind.containsNull)
        if isinstance(kind, SparkMapType) and isinstance(iceberg, MapType):
            return SparkMapType(
                tag(kind.keyType, iceberg.key_type),
                tag(kind.valueType, iceberg.value_type),
                kind.valueContainsNull,
            )
        return kind

    tagged = tag(read_schema, schema.as_struct())
    assert isinstance(tagged, StructType)
    return tagged


def jvm_field_id_options(extra: dict[str, str], options: IcebergSourceOptions) -> dict[str, str]:
    """The JVM source's options for an Iceberg table: its read schema with field ids and the
    switch that makes Spark's Parquet reader match by them."""
    io = _io_key(options.io_properties)
    schema = static_table(options.metadata_location, io).schema()
    read = StructType.fromJson(json.loads(extra["readSchema"]))
    return {
        **extra,
        "readSchema": with_field_ids(read, schema).json(),
        "parquetFieldIds": "true",
    }


def _names_by_id(schema: Any) -> dict[int, str]:
    from pyiceberg.schema import index_name_by_id

    return dict(index_name_by_id(schema))


def _read_ids(schema: Any, columns: list[str]) -> dict[int, str]:
    """Field ids (nested ones too) of the top-level ``columns`` of ``schema`` -> full names."""
    names = _names_by_id(schema)
    return {
        fid: name
        for fid, name in names.items()
        if any(name == c or name.startswith(c + ".") for c in columns)
    }


def schema_history_problem(
    metadata: Any, columns: list[str], *, by_field_id: bool = True
) -> str | None:
    """Why Spark's Parquet reader could read ``columns`` otherwise than pyiceberg in some file
    of the table, or None: a type changed (pyiceberg casts old files' values); read by name
    (``by_field_id`` False), also a rename or a name reused by another field."""
    from pyiceberg.types import PrimitiveType

    current = metadata.schema()
    wanted = _read_ids(current, columns)
    for old in metadata.schemas:
        if old.schema_id == current.schema_id:
            continue
        old_names = _names_by_id(old)
        old_ids = {name: fid for fid, name in old_names.items()}
        for fid, name in wanted.items():
            was = old_names.get(fid)
            if not by_field_id and was is not None and was != name:
                return f"column {name!r} was named {was!r} in schema {old.schema_id}"
            other = old_ids.get(name)
            if not by_field_id and other is not None and other != fid:
                return (
                    f"the name {name!r} belonged to another column (field id {other}) in "
                    f"schema {old.schema_id}"
                )
            if was is not None:
                then, now = old.find_field(fid).field_type, current.find_field(fid).field_type
                if isinstance(now, PrimitiveType) and then != now:
                    return f"column {name!r} was {then} in schema {old.schema_id} (now {now})"
    return None


def _unsupported_type(metadata: Any, columns: list[str]) -> str | None:
    from pyiceberg.types import (
        FixedType,
        TimestampNanoType,
        TimestamptzNanoType,
        TimeType,
        UUIDType,
    )

    python_only = (FixedType, UUIDType, TimeType, TimestampNanoType, TimestamptzNanoType)
    current = metadata.schema()
    for fid, name in _read_ids(current, columns).items():
        kind = current.find_field(fid).field_type
        if isinstance(kind, python_only):
            return f"column {name!r} is {kind}, which Spark's Parquet reader reads otherwise"
    return None


def _missing_partition_column(
    metadata: Any, tasks: dict[str, Any], columns: list[str]
) -> str | None:
    """A file written under an identity partition on a read column that holds no values of
    it (no per-column statistics for it): it may keep the value in its path only."""
    from pyiceberg.transforms import IdentityTransform

    current = metadata.schema()
    wanted = _read_ids(current, columns)
    identity: dict[int, list[int]] = {}
    for spec in metadata.partition_specs:
        identity[spec.spec_id] = [
            f.source_id
            for f in spec.fields
            if isinstance(f.transform, IdentityTransform) and f.source_id in wanted
        ]
    for path, task in tasks.items():
        f = task.file
        held = set((f.value_counts or {}).keys()) | set((f.column_sizes or {}).keys())
        for source_id in identity.get(f.spec_id, []):
            if source_id not in held:
                return (
                    f"file {path!r} has no statistics for partition column "
                    f"{wanted[source_id]!r} (it may keep its value in its path only)"
                )
    return None


def jvm_unsupported_iceberg(
    options: IcebergSourceOptions, reachable: Callable[[str], bool]
) -> str | None:
    """Why the JVM reader cannot read this pinned snapshot, or None when it can.

    ``reachable(scheme)`` says whether the session's JVM has a file system for a URI scheme.
    """
    if options.storage:
        return "the event time is stored as numbers or strings, which the Python reader converts"
    if options.null_event_time_policy is not NullEventTimePolicy.FAIL:
        return "unplaceable rows go to dead letters, which only the Python reader writes"
    io = _io_key(options.io_properties)
    metadata = static_table(options.metadata_location, io).metadata
    tasks = scan_tasks(options.table, options.metadata_location, options.snapshot_id, io)
    for path, planned in tasks.items():
        f = planned.file
        if str(f.file_format).split(".")[-1].upper() != "PARQUET":
            return f"data file {path!r} is {f.file_format}; the JVM reader reads Parquet"
        if planned.task.delete_files or planned.equality_deletes:
            return f"delete files apply to data file {path!r}; the Python reader applies them"
    unreachable = unreachable_file_system(tasks, reachable)
    if unreachable:
        return unreachable
    if metadata.properties.get(NAME_MAPPING):
        return (
            f"the table has a name mapping ({NAME_MAPPING}): files without field ids, which "
            "pyiceberg maps by name"
        )
    columns = options.data_columns
    return (
        _unsupported_type(metadata, columns)
        or schema_history_problem(metadata, columns)
        or _missing_partition_column(metadata, tasks, columns)
    )
