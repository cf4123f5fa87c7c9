"""Protobuf in the Confluent wire format, and writer schemas from a Schema Registry.

A framed value is ``0x00``, a 4-byte big-endian schema id, the message-index list (zigzag
varints: a count then the indexes of the message in its file, nested indexes after the
top-level one; a single ``0`` stands for ``[0]``, the file's first message), then the
message. With a registry configured, each schema id's ``.proto`` text (and the texts it
references) is fetched once per process and compiled, and the index list is resolved to a
message name there: a record whose id the registry lacks, or whose message is not the job's,
is a dead letter naming the id. The bytes are read with the job's message: Protobuf's own
compatibility is by field number (a field the writer added is skipped, one it removed reads
as absent).
"""

from __future__ import annotations

from typing import Any

from kappaplus.codecs.registry import RegistrySchemas, UnknownSchemaId


class FramingError(ValueError):
    """The value is not in the Confluent wire format; the message says why."""


def _varint(value: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(value):
            raise FramingError("truncated message-index list")
        byte = value[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise FramingError("malformed varint in the message-index list")


def _zigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def read_frame(value: bytes) -> tuple[int, tuple[int, ...], int]:
    """``(schema id, message indexes, where the message starts)`` of a framed value."""
    if len(value) < 6:
        raise FramingError(
            f"not Confluent wire format: {len(value)} bytes, need magic byte, schema id "
            "and message indexes"
        )
    if value[0] != 0:
        raise FramingError(f"not Confluent wire format: magic byte 0x{value[0]:02x}")
    schema_id = int.from_bytes(value[1:5], "big")
    raw, pos = _varint(value, 5)
    count = _zigzag(raw)
    if count == 0:
        return schema_id, (0,), pos
    if count < 0 or count > 64:
        raise FramingError(f"message-index list of {count} entries (schema id {schema_id})")
    indexes = []
    for _ in range(count):
        raw, pos = _varint(value, pos)
        indexes.append(_zigzag(raw))
    return schema_id, tuple(indexes), pos


def _zigzag_varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        byte = z & 0x7F
        z >>= 7
        if z:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def frame_header(schema_id: int, indexes: tuple[int, ...]) -> bytes:
    """The Confluent header of a message: magic byte, id, indexes (``[0]`` as one ``0``)."""
    head = b"\x00" + schema_id.to_bytes(4, "big")
    if indexes == (0,):
        return head + b"\x00"
    return head + _zigzag_varint(len(indexes)) + b"".join(_zigzag_varint(i) for i in indexes)


def message_indexes(files: Any, full_name: str) -> tuple[int, ...]:
    """The index path of ``full_name`` in the last (main) file of a ``FileDescriptorSet``."""
    main = files.file[-1]
    prefix = main.package

    def walk(messages: Any, path: tuple[int, ...], scope: str) -> tuple[int, ...] | None:
        for i, m in enumerate(messages):
            name = f"{scope}.{m.name}" if scope else m.name
            if name == full_name:
                return (*path, i)
            found = walk(m.nested_type, (*path, i), name)
            if found is not None:
                return found
        return None

    found = walk(main.message_type, (), prefix)
    if found is None:
        raise KeyError(full_name)
    return found


def message_at(files: Any, indexes: tuple[int, ...]) -> str | None:
    """The full name of the message at ``indexes`` in the main file, None if none is."""
    main = files.file[-1]
    scope, messages = main.package, main.message_type
    name = None
    for i in indexes:
        if i < 0 or i >= len(messages):
            return None
        name = f"{scope}.{messages[i].name}" if scope else messages[i].name
        scope, messages = name, messages[i].nested_type
    return name


class ProtobufWriterSchemas(RegistrySchemas):
    """Compiled writer schemas (descriptor sets) by Confluent id, fetched once each."""

    def get(self, schema_id: int) -> Any:
        """The writer's ``FileDescriptorSet`` (parsed) registered under ``schema_id``."""
        cached = self._cache.get(schema_id)
        if cached is not None:
            return cached
        from google.protobuf import descriptor_pb2

        from kappaplus.codecs.protobuf_schema import compile_proto_text
        from kappaplus.core.errors import ConfigError

        what = f"Confluent schema id {schema_id}"
        client = self.registry()
        schema = self._fetch(what, lambda: client.get_schema(schema_id))
        kind = (getattr(schema, "schema_type", None) or "AVRO").upper()
        if kind != "PROTOBUF":
            raise UnknownSchemaId(f"{what} is a {kind} schema, not Protobuf")
        imports: dict[str, str] = {}
        self._references(schema, imports, what)
        try:
            data = compile_proto_text(schema.schema_str, f"schema_{schema_id}.proto", imports)
        except ConfigError as exc:
            raise UnknownSchemaId(f"{what}: the registry's schema {exc.problem}") from None
        files = descriptor_pb2.FileDescriptorSet()
        files.ParseFromString(data)
        self._cache[schema_id] = files
        return files

    def _references(self, schema: Any, imports: dict[str, str], what: str) -> None:
        client = self.registry()
        for ref in getattr(schema, "references", None) or []:
            if ref.name in imports or ref.name.startswith("google/protobuf/"):
                continue
            found = self._fetch(
                f"{what}: reference {ref.subject} version {ref.version}",
                lambda ref=ref: client.get_version(ref.subject, ref.version),
            )
            imports[ref.name] = found.schema.schema_str
            self._references(found.schema, imports, what)

    def register(self, subject: str, text: str) -> int:
        """Register a ``.proto`` text under ``subject`` (idempotent): its schema id."""
        from confluent_kafka.schema_registry import Schema

        client = self.registry()
        return int(
            self._fetch(
                f"registering subject {subject}",
                lambda: client.register_schema(subject, Schema(text, "PROTOBUF")),
            )
        )
