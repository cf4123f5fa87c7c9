"""A job's rows -> Protobuf messages (a Kafka output with ``format = "protobuf"``).

Columns map to the message's fields by name, with the decoder's types in reverse: a
TIMESTAMP to ``google.protobuf.Timestamp``, BIGINT microseconds to ``Duration``, a
nullable scalar to its wrapper, a string to an enum (by name), structs, arrays and maps to
messages, repeated fields and maps. A null leaves the field unset. Every column must be a
field of the message (checked before the query starts, :meth:`ProtobufWriter.check`). With
a Schema Registry the ``.proto`` is registered under ``<topic>-value`` and every value is
Confluent-framed with its id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from kappaplus.codecs.protobuf_schema import (
    DURATION,
    TIMESTAMP,
    WRAPPERS,
    descriptor_set,
    is_map,
    message_descriptor,
)
from kappaplus.core.errors import ConfigError, DataError

if TYPE_CHECKING:
    from google.protobuf.descriptor import Descriptor, FieldDescriptor

Setter = Callable[[Any, Any], None]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(value: Any) -> int:
    if isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return (moment - _EPOCH) // timedelta(microseconds=1)
    if isinstance(value, timedelta):
        return value // timedelta(microseconds=1)
    return int(value)


def _scalar(field: FieldDescriptor) -> Callable[[Any], Any]:
    """A Python value -> what the runtime takes for one element of ``field``."""
    from google.protobuf.descriptor import FieldDescriptor as FD

    if field.type == FD.TYPE_ENUM:
        numbers = {v.name: v.number for v in field.enum_type.values}

        def enum(value: Any) -> int:
            if isinstance(value, str):
                if value not in numbers:
                    raise ValueError(f"{value!r} is not a value of {field.enum_type.full_name}")
                return numbers[value]
            return int(value)

        return enum
    if field.type in (FD.TYPE_UINT64, FD.TYPE_FIXED64):
        return int
    if field.type == FD.TYPE_BYTES:
        return bytes
    return lambda v: v


def _fill(message: Descriptor) -> Callable[[Any, Any], None]:
    """``(message instance, dict) -> None``: set the fields the dict names."""
    setters = {f.name: _setter(f) for f in message.fields}

    def fill(target: Any, values: Any) -> None:
        for name, value in values.items():
            if value is not None:
                setters[name](target, value)

    return fill


def _into(field: FieldDescriptor) -> Callable[[Any, Any], None]:
    """``(sub-message instance, value) -> None`` for a message-typed field."""
    name = field.message_type.full_name
    if name == TIMESTAMP:
        return lambda t, v: t.FromMicroseconds(_micros(v))
    if name == DURATION:
        return lambda d, v: d.FromMicroseconds(_micros(v))
    if name in WRAPPERS:
        inner = _scalar(field.message_type.fields_by_name["value"])
        return lambda w, v: setattr(w, "value", inner(v))
    return _fill(field.message_type)


def _setter(field: FieldDescriptor) -> Setter:
    from google.protobuf.descriptor import FieldDescriptor as FD

    name = field.name
    if is_map(field):
        key = _scalar(field.message_type.fields_by_name["key"])
        value_field = field.message_type.fields_by_name["value"]
        if value_field.type == FD.TYPE_MESSAGE:
            into = _into(value_field)

            def message_map(m: Any, items: Any) -> None:
                target = getattr(m, name)
                for k, v in _items(items):
                    if v is not None:
                        into(target[key(k)], v)

            return message_map
        value = _scalar(value_field)

        def scalar_map(m: Any, items: Any) -> None:
            target = getattr(m, name)
            for k, v in _items(items):
                target[key(k)] = value(v)

        return scalar_map
    if field.type == FD.TYPE_MESSAGE:
        into = _into(field)
        if field.is_repeated:

            def messages(m: Any, items: Any) -> None:
                target = getattr(m, name)
                for item in items:
                    into(target.add(), item)

            return messages
        return lambda m, v: into(getattr(m, name), v)
    convert = _scalar(field)
    if field.is_repeated:
        return lambda m, items: getattr(m, name).extend(convert(v) for v in items)
    return lambda m, v: setattr(m, name, convert(v))


def _items(value: Any) -> Sequence[tuple[Any, Any]]:
    return list(value.items()) if isinstance(value, dict) else value


class ProtobufWriter:
    """Encodes rows (dicts) as messages of ``message`` in ``schema_file``."""

    def __init__(
        self, schema_file: str | Path, message: str, header: bytes = b"", data: bytes = b""
    ) -> None:
        from google.protobuf import message_factory

        self.path = str(schema_file)
        self.data = data or descriptor_set(self.path)
        self.message = message
        self.descriptor = message_descriptor(self.data, message, self.path)
        self.message_class: Any = message_factory.GetMessageClass(self.descriptor)
        self.fill = _fill(self.descriptor)
        self.header = header

    def __reduce__(self) -> tuple[Any, ...]:
        # to the workers as the compiled descriptor set: no .proto compiled there
        return (ProtobufWriter, (self.path, self.message, self.header, self.data))

    def check(self, columns: Sequence[str], key: str) -> None:
        """Every column must be a field of the message (ConfigError naming them)."""
        known = set(self.descriptor.fields_by_name)
        missing = [c for c in columns if c not in known]
        if missing:
            raise ConfigError(
                key,
                missing,
                f"columns not in {self.descriptor.full_name} (its fields: {sorted(known)})",
            )

    def encode(self, row: dict[str, Any]) -> bytes:
        message = self.message_class()
        try:
            self.fill(message, row)
        except (TypeError, ValueError, OverflowError) as exc:
            raise DataError(
                f"cannot encode a row as {self.descriptor.full_name}: {exc} (row {row!r:.200})"
            ) from None
        return self.header + message.SerializeToString()

    def encode_batches(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``mapInArrow`` function: each row -> one ``value`` (binary)."""
        for batch in batches:
            values = [self.encode(row) for row in batch.to_pylist()]
            yield pa.RecordBatch.from_arrays([pa.array(values, pa.binary())], names=["value"])


def registered_header(schema_file: str | Path, message: str, url: str, topic: str) -> bytes:
    """Register ``schema_file`` (a ``.proto``) under ``<topic>-value`` in the registry at
    ``url``; the Confluent header (id and message indexes) of ``message`` there."""
    from google.protobuf import descriptor_pb2

    from kappaplus.codecs.protobuf_registry import (
        ProtobufWriterSchemas,
        frame_header,
        message_indexes,
    )

    source = Path(schema_file)
    if source.suffix != ".proto":
        raise ConfigError(
            "schema_registry_url",
            "***",
            f"registering needs the .proto text; {source} is a descriptor set",
        )
    files = descriptor_pb2.FileDescriptorSet()
    files.ParseFromString(descriptor_set(source))
    own = [f.name for f in files.file[:-1] if not f.name.startswith("google/protobuf/")]
    if own:
        raise ConfigError(
            "schema_file",
            str(source),
            f"an output registered in a Schema Registry imports only well-known types; "
            f"it imports {own}",
        )
    schema_id = ProtobufWriterSchemas(url).register(f"{topic}-value", source.read_text())
    return frame_header(schema_id, message_indexes(files, message))
