"""Avro schemas (``.avsc``) to Spark schemas: ``timestamp-millis``/``timestamp-micros``
become ``TIMESTAMP``, unions with null become nullable fields."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kappaplus.core.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType


def _load_avsc(path: str | Path) -> tuple[Any, StructType]:
    import fastavro
    from pyspark.sql.types import StructType

    source = Path(path)
    try:
        raw = json.loads(source.read_text())
    except OSError as exc:
        raise ConfigError("avro_schema", str(path), f"cannot read the file: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(
            "avro_schema", str(path), f"not JSON at char {exc.pos}: {exc.msg}"
        ) from exc
    try:
        parsed = fastavro.parse_schema(raw)
    except Exception as exc:
        raise ConfigError("avro_schema", str(path), f"not a valid Avro schema: {exc}") from exc
    if not isinstance(raw, dict) or raw.get("type") != "record":
        raise ConfigError("avro_schema", str(path), "the top-level Avro type must be a record")
    kind, _ = _avro_to_spark(raw, {}, str(path), "")
    assert isinstance(kind, StructType)
    return parsed, kind


def _avro_to_spark(
    avro: Any, named: dict[str, Any], path: str, where: str
) -> tuple[DataType, bool]:
    """The Spark type for an Avro type, and whether it is nullable."""
    from pyspark.sql import types as T

    primitive: dict[str, DataType] = {
        "boolean": T.BooleanType(),
        "int": T.IntegerType(),
        "long": T.LongType(),
        "float": T.FloatType(),
        "double": T.DoubleType(),
        "bytes": T.BinaryType(),
        "string": T.StringType(),
    }
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        if len(branches) != 1:
            raise ConfigError(
                "avro_schema",
                path,
                f"field {where!r}: only unions of null and one type are supported, got {avro}",
            )
        kind, _ = _avro_to_spark(branches[0], named, path, where)
        return kind, len(branches) < len(avro)
    if isinstance(avro, str):
        if avro in primitive:
            return primitive[avro], False
        short = avro.rsplit(".", 1)[-1]
        if avro in named or short in named:
            return _avro_to_spark(named.get(avro, named.get(short)), named, path, where)
        raise ConfigError("avro_schema", path, f"field {where!r}: unsupported type {avro!r}")
    if not isinstance(avro, dict):
        raise ConfigError("avro_schema", path, f"field {where!r}: unsupported type {avro!r}")
    kind_name = avro.get("type")
    logical = avro.get("logicalType")
    if logical in ("timestamp-millis", "timestamp-micros"):
        return T.TimestampType(), False
    if logical in ("local-timestamp-millis", "local-timestamp-micros"):
        return T.TimestampNTZType(), False
    if logical == "date":
        return T.DateType(), False
    if logical == "decimal":
        return T.DecimalType(int(avro["precision"]), int(avro.get("scale", 0))), False
    if logical == "uuid":
        return T.StringType(), False
    if logical in ("time-millis", "time-micros"):
        raise ConfigError(
            "avro_schema", path, f"field {where!r}: logical type {logical!r} is not supported"
        )
    if kind_name == "record":
        if "name" in avro:
            named[avro["name"]] = avro
            named[str(avro["name"]).rsplit(".", 1)[-1]] = avro
        fields = []
        for f in avro.get("fields", []):
            sub = f"{where}.{f['name']}" if where else f["name"]
            ftype, nullable = _avro_to_spark(f["type"], named, path, sub)
            fields.append(T.StructField(f["name"], ftype, nullable))
        return T.StructType(fields), False
    if kind_name == "enum":
        named[avro["name"]] = avro
        return T.StringType(), False
    if kind_name == "fixed":
        named[avro["name"]] = avro
        return T.BinaryType(), False
    if kind_name == "array":
        item, nullable = _avro_to_spark(avro["items"], named, path, f"{where}[]")
        return T.ArrayType(item, nullable), False
    if kind_name == "map":
        value, nullable = _avro_to_spark(avro["values"], named, path, f"{where}{{}}")
        return T.MapType(T.StringType(), value, nullable), False
    if isinstance(kind_name, str | list | dict):
        return _avro_to_spark(kind_name, named, path, where)
    raise ConfigError("avro_schema", path, f"field {where!r}: unsupported type {avro!r}")
