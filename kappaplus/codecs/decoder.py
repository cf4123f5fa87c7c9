"""Record decoders (run in the Python workers): one value -> one event or a reason, JSON or
Avro, plain or in the Confluent wire format (writer schemas from a registry when one is
configured); and the ``mapInArrow`` batch function built on them."""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Iterator
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from kappaplus.codecs.convert import (
    _avro_normalizer,
    _FieldError,
    _json_converter,
    _shown,
    event_time_converter,
)
from kappaplus.codecs.registry import UnknownSchemaId, WriterSchemas
from kappaplus.codecs.required import required_problems
from kappaplus.codecs.schema import RECORD_ARROW_TYPE
from kappaplus.codecs.spec import DecoderSpec

if TYPE_CHECKING:
    pass


class _Decoder:
    """Decodes one value (bytes) into a dict of Arrow-ready top-level values, or raises."""

    def __init__(self, spec: DecoderSpec) -> None:
        self.spec = spec
        self.fields = [f.name for f in spec.event_schema.fields]
        self.required = spec.required_fields
        self.event_time = spec.event_time
        self.writer_schemas: WriterSchemas | None = None
        if spec.format == "protobuf":
            from kappaplus.codecs.protobuf_decode import ProtobufReader

            self.protobuf = ProtobufReader(spec)
        elif spec.format == "json":
            # Decimal fields keep their digits exactly; other numbers parse as float.
            decimals = "decimal(" in spec.event_schema.simpleString()
            # one decoder for all records (json.loads with options builds one per call)
            self.json = json.JSONDecoder(parse_float=Decimal if decimals else float)
            self.converters = {
                f.name: _json_converter(f.dataType) for f in spec.event_schema.fields
            }
            self.converters[spec.event_time] = event_time_converter(
                spec.event_time, spec.event_time_unit
            )
        else:
            self.normalizers = {
                f.name: _avro_normalizer(f.dataType) for f in spec.event_schema.fields
            }
            url = spec.schema_registry_url
            self.writer_schemas = WriterSchemas(url) if url else None

    def decode(self, value: bytes | None) -> dict[str, Any]:
        if self.spec.format == "protobuf":
            decoded = self.protobuf.decode_one(value)
            if isinstance(decoded, str):
                raise _FieldError(decoded)
            return decoded
        if value is None:
            raise _FieldError("value is null (tombstone record)")
        row = self._decode_json(value) if self.spec.format == "json" else self._decode_avro(value)
        if row.get(self.event_time) is None:
            raise _FieldError(f"event time {self.event_time!r} is null")
        return row

    def _decode_json(self, value: bytes) -> dict[str, Any]:
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _FieldError(f"value is not UTF-8: invalid byte at {exc.start}") from None
        try:
            obj = self.json.decode(text)
        except json.JSONDecodeError as exc:
            raise _FieldError(f"invalid JSON at char {exc.pos}: {exc.msg}") from None
        except RecursionError:
            raise _FieldError("invalid JSON: nested too deeply") from None
        if not isinstance(obj, dict):
            raise _FieldError(f"expected a JSON object, got {_shown(obj)}")
        problems = required_problems(obj, self.required)
        row: dict[str, Any] = {}
        for name in self.fields:
            try:
                row[name] = self.converters[name](obj.get(name), name)
            except _FieldError as exc:
                problems.append(str(exc))
        if problems:
            raise _FieldError("; ".join(problems))
        return row

    def _decode_avro(self, value: bytes) -> dict[str, Any]:
        spec = self.spec
        wire_format = spec.wire_format
        if wire_format == "plain":
            record = self._read_avro(value, 0, "")
        elif wire_format == "confluent":
            record = self._read_confluent(value)
        else:
            if len(value) >= 5 and value[0] == 0:
                try:
                    record = self._read_confluent(value)
                except _FieldError as confluent_error:
                    try:
                        record = self._read_avro(value, 0, "")
                    except _FieldError:
                        raise confluent_error from None
            else:
                try:
                    record = self._read_avro(value, 0, "")
                except _FieldError as plain_error:
                    what = (
                        (f"magic byte 0x{value[0]:02x}" if value else "empty value")
                        if len(value) >= 5 or not value
                        else f"only {len(value)} bytes"
                    )
                    raise _FieldError(
                        f"not Confluent wire format / schema mismatch: {what}; "
                        f"as plain Avro: {plain_error}"
                    ) from None
        problems = required_problems(record, self.required)
        if problems:
            raise _FieldError("; ".join(problems))
        row = {}
        for name in self.fields:
            norm = self.normalizers[name]
            element = record.get(name)
            row[name] = norm(element, name) if norm is not None and element is not None else element
        return row

    def _read_confluent(self, value: bytes) -> dict[str, Any]:
        if len(value) < 5:
            raise _FieldError(
                f"not Confluent wire format: {len(value)} bytes, need magic byte + schema id"
            )
        if value[0] != 0:
            raise _FieldError(
                f"not Confluent wire format: magic byte 0x{value[0]:02x}, expected 0x00"
            )
        schema_id = int.from_bytes(value[1:5], "big")
        ids = self.spec.schema_ids
        if ids is not None and schema_id not in ids:
            raise _FieldError(
                f"unknown Confluent schema id {schema_id}, expected one of {sorted(ids)}"
            )
        writer = None
        if self.writer_schemas is not None:
            try:
                writer = self.writer_schemas.get(schema_id)
            except UnknownSchemaId as exc:
                raise _FieldError(str(exc)) from None
        return self._read_avro(value, 5, f" (Confluent schema id {schema_id})", writer)

    def _read_avro(
        self, value: bytes, start: int, context: str, writer: Any = None
    ) -> dict[str, Any]:
        import fastavro

        stream = io.BytesIO(value)
        stream.seek(start)
        try:
            if writer is None:
                record = fastavro.schemaless_reader(stream, self.spec.avro_parsed)
            else:
                record = fastavro.schemaless_reader(stream, writer, self.spec.avro_parsed)
        except Exception as exc:  # EOFError, StopIteration, UnicodeDecodeError, ...
            detail = str(exc) or type(exc).__name__
            if isinstance(exc, EOFError | StopIteration):
                detail = f"truncated: {detail}"
            raise _FieldError(f"Avro decode failed{context}: {detail}") from None
        trailing = len(value) - stream.tell()
        if trailing:
            raise _FieldError(
                f"Avro schema mismatch{context}: {trailing} bytes left after the record"
            )
        if not isinstance(record, dict):
            raise _FieldError(f"Avro decode failed{context}: not a record")
        return record


def decode_batches(
    spec: DecoderSpec,
    arrow_schema: pa.Schema,
    batches: Iterable[pa.RecordBatch],
    *,
    arrow_json: bool = True,
) -> Iterator[pa.RecordBatch]:
    """Decode the Kafka records of ``batches`` into ``arrow_schema`` (the event fields, the
    error, the raw record). JSON batches go through Arrow's JSON reader where it vouches for
    them (:mod:`kappaplus.codecs.arrow_json`; ``arrow_json=False``: never), else record by
    record; the outcome is the same."""
    if spec.format == "protobuf":
        yield from _protobuf_batches(spec, arrow_schema, batches)
        return
    from kappaplus.codecs.arrow_json import ArrowJsonReader

    decoder = _Decoder(spec)
    names = decoder.fields
    event_types = [arrow_schema.field(n).type for n in names]
    reader = ArrowJsonReader.of(spec, arrow_schema) if arrow_json else None
    for batch in batches:
        record = _record_struct(batch)
        fast = None if reader is None else reader.decode(batch.column("value"))
        if fast is not None:
            errors_col = pa.nulls(batch.num_rows, pa.string())
            yield pa.RecordBatch.from_arrays([*fast, errors_col, record], schema=arrow_schema)
            continue
        values = batch.column("value").to_pylist()
        columns: list[list[Any]] = [[] for _ in names]
        errors: list[str | None] = []
        for value in values:
            try:
                row = decoder.decode(value)
            except _FieldError as exc:
                errors.append(str(exc))
                for column in columns:
                    column.append(None)
                continue
            errors.append(None)
            for column, name in zip(columns, names, strict=True):
                column.append(row[name])
        arrays = [
            _to_arrow(column, kind, name, errors)
            for column, kind, name in zip(columns, event_types, names, strict=True)
        ]
        arrays.append(pa.array(errors, type=pa.string()))
        arrays.append(record)
        yield pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def _protobuf_batches(
    spec: DecoderSpec, arrow_schema: pa.Schema, batches: Iterable[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """:func:`decode_batches` for Protobuf: whole columns at a time (:mod:`.protobuf_decode`)."""
    from kappaplus.codecs.protobuf_decode import ProtobufReader

    reader = ProtobufReader(spec)
    names = reader.fields
    event_types = [arrow_schema.field(n).type for n in names]
    for batch in batches:
        columns, errors = reader.decode_columns(batch.column("value").to_pylist())
        arrays = [
            _to_arrow(column, kind, name, errors)
            for column, kind, name in zip(columns, event_types, names, strict=True)
        ]
        arrays.append(pa.array(errors, type=pa.string()))
        arrays.append(_record_struct(batch))
        yield pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def _to_arrow(
    column: list[Any], kind: pa.DataType, name: str, errors: list[str | None]
) -> pa.Array:
    try:
        return pa.array(column, type=kind)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass
    # A value passed validation but Arrow refuses it: find it, make that row a dead letter.
    out = []
    for i, value in enumerate(column):
        try:
            pa.array([value], type=kind)
            out.append(value)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            errors[i] = f"field {name!r}: cannot convert {_shown(value)} to {kind}: {exc}"
            out.append(None)
    return pa.array(out, type=kind)


def _record_struct(batch: pa.RecordBatch) -> pa.StructArray:
    arrays = []
    for f in RECORD_ARROW_TYPE:
        column = batch.column(f.name)
        if column.type != f.type:
            column = column.cast(f.type)
        arrays.append(column)
    return pa.StructArray.from_arrays(arrays, fields=list(RECORD_ARROW_TYPE))


def decode_flagged(
    spec: DecoderSpec, out_type: pa.StructType, values: pa.Array, flagged: pa.Array
) -> pa.StructArray:
    """Decode the values whose flag is true; the others get an all-null row.

    ``out_type``: the event fields then the error (a string). Used for the records the
    JVM fast path (:mod:`kappaplus.codecs.fastjson`) does not vouch for.
    """
    import pyarrow.compute as pc

    size = len(values)
    wanted = [i for i, flag in enumerate(flagged.to_pylist()) if flag]
    if not wanted:
        return pa.nulls(size, type=out_type)
    decoder = _Decoder(spec)
    names = decoder.fields
    columns: list[list[Any]] = [[None] * size for _ in names]
    errors: list[str | None] = [None] * size
    for i, value in zip(wanted, pc.take(values, pa.array(wanted)).to_pylist(), strict=True):
        try:
            row = decoder.decode(value)
        except _FieldError as exc:
            errors[i] = str(exc)
            continue
        for column, name in zip(columns, names, strict=True):
            column[i] = row[name]
    kinds = [out_type.field(n).type for n in names]
    arrays = [
        _to_arrow(column, kind, name, errors)
        for column, kind, name in zip(columns, kinds, names, strict=True)
    ]
    arrays.append(pa.array(errors, type=pa.string()))
    mask = pa.array([not flag for flag in flagged.to_pylist()], type=pa.bool_())
    return pa.StructArray.from_arrays(arrays, fields=list(out_type), mask=mask)
