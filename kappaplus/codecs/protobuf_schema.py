"""Protobuf schemas: a ``.proto`` file (compiled when the run starts, with ``grpc_tools.protoc``)
or a descriptor set (``.desc``/``.pb``) -> the message's descriptor -> its Spark schema.

A ``.proto`` file's imports are resolved beside it and from the well-known types shipped
with grpcio-tools. Compiled descriptor sets are cached per file (path, size, modification
time), so a run compiles each file once per process. The Spark types:

- scalars: ``int32``/``sint32``/``sfixed32`` INT, ``int64``/``sint64``/``sfixed64``/``uint32``/
  ``fixed32`` BIGINT, ``uint64``/``fixed64`` DECIMAL(20,0), ``float`` FLOAT, ``double`` DOUBLE,
  ``bool`` BOOLEAN, ``string`` STRING, ``bytes`` BINARY; enums STRING (the value's name);
- a nested message STRUCT, ``repeated`` ARRAY, ``map<k, v>`` MAP;
- ``google.protobuf.Timestamp`` TIMESTAMP, ``Duration`` BIGINT (microseconds: Parquet lake
  tables cannot hold Spark intervals), the wrapper types (``StringValue``...) their scalar;
- nullable where the field has presence (``optional``, ``oneof`` members, messages,
  wrappers); a field without presence reads its default (0, ``""``), never null.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kappaplus.core.errors import ConfigError

if TYPE_CHECKING:
    from google.protobuf.descriptor import Descriptor, FieldDescriptor
    from pyspark.sql.types import DataType, StructType

TIMESTAMP = "google.protobuf.Timestamp"
DURATION = "google.protobuf.Duration"
WRAPPERS = {
    f"google.protobuf.{name}Value": name
    for name in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")
}
DESCRIPTOR_SUFFIXES = (".desc", ".pb", ".binpb", ".protoset")

_compiled: dict[tuple[str, int, int], bytes] = {}


def well_known_include() -> str:
    """The directory holding ``google/protobuf/*.proto`` as shipped with grpcio-tools."""
    import grpc_tools

    return str(Path(grpc_tools.__file__).parent / "_proto")


def descriptor_set(path: str | Path, option: str = "schema_file") -> bytes:
    """A serialized ``FileDescriptorSet`` of ``path`` (a ``.proto`` compiled with its
    imports, or a descriptor set read as is); errors name the file and the problem."""
    source = Path(path)
    try:
        stat = source.stat()
    except OSError as exc:
        raise ConfigError(option, str(path), f"cannot read the file: {exc.strerror}") from None
    key = (str(source.resolve()), stat.st_size, stat.st_mtime_ns)
    cached = _compiled.get(key)
    if cached is not None:
        return cached
    if source.suffix == ".proto":
        data = compile_proto(source, option)
    else:
        data = source.read_bytes()
        _parse_set(data, str(path), option)
    _compiled[key] = data
    return data


def compile_proto(
    source: Path, option: str = "schema_file", include: tuple[Path, ...] = ()
) -> bytes:
    """Compile ``source`` with ``python -m grpc_tools.protoc`` (imports beside it, in
    ``include`` and among the well-known types) into a serialized descriptor set."""
    with tempfile.TemporaryDirectory(prefix="kappa-protoc-") as tmp:
        out = Path(tmp) / "set.desc"
        args = [sys.executable, "-m", "grpc_tools.protoc", f"-I{source.parent.resolve()}"]
        args += [f"-I{d}" for d in include]
        args += [
            f"-I{well_known_include()}",
            "--include_imports",
            f"--descriptor_set_out={out}",
            str(source.resolve().name),
        ]
        done = subprocess.run(
            args, capture_output=True, text=True, cwd=source.parent.resolve(), check=False
        )
        if done.returncode != 0 or not out.is_file():
            shown = done.stderr.replace(f"{source.parent.resolve()}{os.sep}", "")
            raise ConfigError(option, str(source), _protoc_problem(shown))
        return out.read_bytes()


def compile_proto_text(text: str, name: str, imports: dict[str, str]) -> bytes:
    """Compile a ``.proto`` given as text (a registry's schema) named ``name``, with the
    texts of its non-well-known ``imports`` by import path."""
    digest = hashlib.sha256((name + "\0" + text).encode()).hexdigest()
    key = (f"text:{digest}", len(imports), 0)
    cached = _compiled.get(key)
    if cached is not None:
        return cached
    with tempfile.TemporaryDirectory(prefix="kappa-protoc-") as tmp:
        root = Path(tmp)
        for path, body in {**imports, name: text}.items():
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(body)
        data = compile_proto(root / name, "schema")
    _compiled[key] = data
    return data


def _protoc_problem(stderr: str) -> str:
    """protoc's complaint in one line (its first lines, the temporary paths left out)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    lines = [line for line in lines if "Warning" not in line] or lines
    if not lines:
        return "protoc failed without a message"
    shown = "; ".join(dict.fromkeys(lines[:3]))
    return f"does not compile: {shown}"[:400]


def _parse_set(data: bytes, path: str, option: str) -> Any:
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    files = descriptor_pb2.FileDescriptorSet()
    try:
        files.ParseFromString(data)
    except DecodeError as exc:
        raise ConfigError(option, path, f"not a Protobuf descriptor set: {exc}") from None
    if not files.file:
        raise ConfigError(option, path, "not a Protobuf descriptor set: no files in it")
    return files


def message_descriptor(data: bytes, message: str, path: str, option: str = "message") -> Descriptor:
    """The descriptor of ``message`` (full name, e.g. ``rides.v1.Ride``) in ``data``."""
    from google.protobuf import descriptor_pool

    files = _parse_set(data, path, "schema_file")
    pool = descriptor_pool.DescriptorPool()
    for proto in files.file:
        try:
            pool.Add(proto)
        except Exception as exc:  # noqa: BLE001 - TypeError of a broken set
            raise ConfigError(
                "schema_file", path, f"descriptor set is not self-contained: {exc}"
            ) from None
    try:
        return pool.FindMessageTypeByName(message)
    except KeyError:
        known = sorted(_message_names(files))
        shown = ", ".join(known[:12]) + (" ..." if len(known) > 12 else "")
        raise ConfigError(
            option, message, f"no such message in {path} (full names there: {shown})"
        ) from None


def _message_names(files: Any) -> list[str]:
    names: list[str] = []

    def walk(prefix: str, messages: Any) -> None:
        for m in messages:
            full = f"{prefix}.{m.name}" if prefix else m.name
            if not m.options.map_entry:
                names.append(full)
            walk(full, m.nested_type)

    for f in files.file:
        if not f.name.startswith("google/protobuf/"):
            walk(f.package, f.message_type)
    return names


def is_map(field: FieldDescriptor) -> bool:
    kind = field.message_type
    return bool(field.is_repeated and kind is not None and kind.GetOptions().map_entry)


def spark_schema(
    message: Descriptor, path: str, event_time: str | None = None, unit: str | None = None
) -> StructType:
    """The Spark schema of ``message``; with ``unit``, the integer ``event_time`` field is
    read as a TIMESTAMP (epoch numbers in that unit)."""
    from pyspark.sql.types import StructField, StructType, TimestampType

    fields = []
    for field in message.fields:
        kind, nullable = _field_type(field, path, field.name, (message.full_name,))
        if unit is not None and field.name == event_time:
            if kind.typeName() not in ("integer", "long") or field.is_repeated:
                raise ConfigError(
                    "event_time",
                    f"{{ column = {event_time!r}, unit = {unit!r} }}",
                    f"a unit is for an integer field; {message.full_name}.{field.name} is "
                    f"{kind.simpleString()}",
                )
            kind = TimestampType()
        fields.append(StructField(field.name, kind, nullable))
    return StructType(fields)


def _field_type(
    field: FieldDescriptor, path: str, where: str, seen: tuple[str, ...]
) -> tuple[DataType, bool]:
    """A field's Spark type and whether it is nullable."""
    from pyspark.sql.types import ArrayType, MapType

    if is_map(field):
        entry = field.message_type
        key, _ = _single_type(entry.fields_by_name["key"], path, f"{where}{{key}}", seen)
        value, value_null = _single_type(entry.fields_by_name["value"], path, f"{where}{{}}", seen)
        return MapType(key, value, value_null), False
    kind, nullable = _single_type(field, path, where, seen)
    if field.is_repeated:
        return ArrayType(kind, nullable), False
    return kind, nullable or field.has_presence


def _single_type(
    field: FieldDescriptor, path: str, where: str, seen: tuple[str, ...]
) -> tuple[DataType, bool]:
    from google.protobuf.descriptor import FieldDescriptor as FD
    from pyspark.sql import types as T

    scalars: dict[int, Any] = {
        FD.TYPE_INT32: T.IntegerType(),
        FD.TYPE_SINT32: T.IntegerType(),
        FD.TYPE_SFIXED32: T.IntegerType(),
        FD.TYPE_INT64: T.LongType(),
        FD.TYPE_SINT64: T.LongType(),
        FD.TYPE_SFIXED64: T.LongType(),
        FD.TYPE_UINT32: T.LongType(),
        FD.TYPE_FIXED32: T.LongType(),
        FD.TYPE_UINT64: T.DecimalType(20, 0),
        FD.TYPE_FIXED64: T.DecimalType(20, 0),
        FD.TYPE_FLOAT: T.FloatType(),
        FD.TYPE_DOUBLE: T.DoubleType(),
        FD.TYPE_BOOL: T.BooleanType(),
        FD.TYPE_STRING: T.StringType(),
        FD.TYPE_BYTES: T.BinaryType(),
        FD.TYPE_ENUM: T.StringType(),
    }
    if field.type in scalars:
        return scalars[field.type], False
    if field.type != FD.TYPE_MESSAGE:
        raise ConfigError("schema_file", path, f"field {where!r}: groups are not supported")
    message = field.message_type
    name = message.full_name
    if name == TIMESTAMP:
        return T.TimestampType(), True
    if name == DURATION:
        return T.LongType(), True
    if name in WRAPPERS:
        kind, _ = _single_type(message.fields_by_name["value"], path, where, seen)
        return kind, True
    if name in seen:
        raise ConfigError(
            "schema_file",
            path,
            f"field {where!r}: message {name} contains itself; a Spark schema cannot be recursive",
        )
    fields = []
    for sub in message.fields:
        kind, nullable = _field_type(sub, path, f"{where}.{sub.name}", (*seen, name))
        fields.append(T.StructField(sub.name, kind, nullable))
    return T.StructType(fields), True


def environment_has_upb() -> bool:
    """Whether the ``protobuf`` runtime is the upb-backed one (the fast decoder)."""
    from google.protobuf.internal import api_implementation

    return bool(api_implementation.Type() == "upb")


__all__ = [
    "DESCRIPTOR_SUFFIXES",
    "compile_proto",
    "compile_proto_text",
    "descriptor_set",
    "environment_has_upb",
    "is_map",
    "message_descriptor",
    "spark_schema",
    "well_known_include",
]
