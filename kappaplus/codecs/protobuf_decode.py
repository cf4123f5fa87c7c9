"""Protobuf values -> the job's event columns, in the Python workers (the upb-backed
``protobuf`` runtime), column by column; a value that does not decode gets a reason.

Each field of the message gets one reader (``message -> Arrow-ready value``) built once from
the descriptor; a batch parses every value, then runs each reader down the parsed messages.
A record is a dead letter, with its reason, when its bytes do not parse (truncated, a bad
tag or wire type: the reason says at which byte), when a field the job's message knows
arrives with another wire type (the runtime would keep it aside as an unknown field and
read the default), when its Confluent frame is bad or its writer schema is not the job's
message, or when its event time (or a ``required`` field) is absent.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from kappaplus.codecs.protobuf_registry import (
    FramingError,
    ProtobufWriterSchemas,
    message_at,
    read_frame,
)
from kappaplus.codecs.protobuf_schema import (
    DURATION,
    TIMESTAMP,
    WRAPPERS,
    is_map,
    message_descriptor,
)
from kappaplus.codecs.registry import UnknownSchemaId

if TYPE_CHECKING:
    from google.protobuf.descriptor import Descriptor, FieldDescriptor

    from kappaplus.codecs.spec import DecoderSpec

Reader = Callable[[Any], Any]
_UNIT_MICROS = {"s": 1_000_000, "ms": 1_000, "us": 1}


def _element(field: FieldDescriptor) -> Reader | None:
    """How one value of ``field`` (an element, for repeated fields) becomes Arrow-ready;
    None: as the runtime gives it."""
    from google.protobuf.descriptor import FieldDescriptor as FD

    if field.type == FD.TYPE_ENUM:
        names = {v.number: v.name for v in field.enum_type.values}
        return lambda v: names.get(v) or str(v)
    if field.type != FD.TYPE_MESSAGE:
        return None
    name = field.message_type.full_name
    if name in (TIMESTAMP, DURATION):
        return lambda t: t.seconds * 1_000_000 + t.nanos // 1_000
    if name in WRAPPERS:
        return operator.attrgetter("value")
    readers = [(f.name, field_reader(f)) for f in field.message_type.fields]
    return lambda m: {n: r(m) for n, r in readers}


def field_reader(field: FieldDescriptor, unit: str | None = None) -> Reader:
    """``message -> value of field``: null where the field has presence and is absent;
    with ``unit``, an integer field read as epoch ``unit`` -> microseconds."""
    name = field.name
    if is_map(field):
        key = _element(field.message_type.fields_by_name["key"])
        value = _element(field.message_type.fields_by_name["value"])
        if key is None and value is None:
            return lambda m: list(getattr(m, name).items())
        k = key or (lambda x: x)
        v = value or (lambda x: x)
        return lambda m: [(k(a), v(b)) for a, b in getattr(m, name).items()]
    element = _element(field)
    if unit is not None:
        factor = _UNIT_MICROS[unit]
        element = lambda v: v * factor  # noqa: E731
    if field.is_repeated:
        if element is None:
            return lambda m: list(getattr(m, name))
        each = element
        return lambda m: [each(x) for x in getattr(m, name)]
    if field.has_presence:
        if element is None:
            return lambda m: getattr(m, name) if m.HasField(name) else None
        one = element
        return lambda m: one(getattr(m, name)) if m.HasField(name) else None
    if element is None:
        return operator.attrgetter(name)
    single = element
    return lambda m: single(getattr(m, name))


def describe_bad_bytes(value: bytes) -> str:
    """Where a value stops being a Protobuf message: a walk of its tags and lengths."""
    pos, size = 0, len(value)

    def varint(at: int) -> tuple[int, int]:
        result = shift = 0
        while True:
            if at >= size:
                raise ValueError(f"truncated varint at byte {at} of {size}")
            byte = value[at]
            result |= (byte & 0x7F) << shift
            at += 1
            if not byte & 0x80:
                return result, at
            shift += 7
            if shift > 63:
                raise ValueError(f"malformed varint at byte {at}")

    try:
        while pos < size:
            start = pos
            tag, pos = varint(pos)
            number, wire = tag >> 3, tag & 7
            if number == 0:
                return f"field number 0 at byte {start}"
            if wire == 0:
                _, pos = varint(pos)
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            elif wire == 2:
                length, pos = varint(pos)
                pos += length
            elif wire in (3, 4):
                return f"group wire type {wire} (field {number}) at byte {start}"
            else:
                return f"invalid wire type {wire} (field {number}) at byte {start}"
            if pos > size:
                return f"truncated: field {number} at byte {start} runs past the end ({size} bytes)"
    except ValueError as exc:
        return str(exc)
    return "a field's contents do not parse (bad nested message, invalid UTF-8 in a string)"


class ProtobufReader:
    """Decodes values of the spec's message into columns (one per event field)."""

    def __init__(self, spec: DecoderSpec) -> None:
        from google.protobuf import message_factory

        assert spec.proto_set is not None and spec.message is not None
        descriptor = message_descriptor(spec.proto_set, spec.message, str(spec.proto_schema))
        self.descriptor: Descriptor = descriptor
        self.message_class: Any = message_factory.GetMessageClass(descriptor)
        self.full_name = descriptor.full_name
        self.fields = [f.name for f in spec.event_schema.fields]
        unit = spec.event_time_unit
        by_name = descriptor.fields_by_name
        self.readers = [
            field_reader(by_name[n], unit if n == spec.event_time else None) for n in self.fields
        ]
        self.known_numbers = {f.number: f.name for f in descriptor.fields}
        self.event_index = self.fields.index(spec.event_time)
        self.checked = [(self.fields.index(n), n) for n in spec.required]
        url = spec.schema_registry_url
        self.writers = ProtobufWriterSchemas(url) if url else None
        self.framing = spec.wire_format
        self._writer_checks: dict[tuple[int, tuple[int, ...]], str | None] = {}

    def parse(self, value: bytes | None) -> tuple[Any, str | None]:
        """The parsed message, or None and the reason."""
        if value is None:
            return None, "value is null (tombstone record)"
        context = ""
        if self.framing == "confluent" or (self.framing == "auto" and value[:1] == b"\x00"):
            try:
                schema_id, indexes, start = read_frame(value)
            except FramingError as exc:
                return None, str(exc)
            problem = self._check_writer(schema_id, indexes)
            if problem is not None:
                return None, problem
            value = value[start:]
            context = f" (Confluent schema id {schema_id})"
        try:
            message = self.message_class.FromString(value)
        except Exception:  # noqa: BLE001 - DecodeError and the runtime's other refusals
            return None, (
                f"Protobuf decode failed{context}: {len(value)} bytes are not one "
                f"{self.full_name} message: {describe_bad_bytes(value)}"
            )
        return message, self._misread(message, context)

    def _misread(self, message: Any, context: str) -> str | None:
        from google.protobuf.unknown_fields import UnknownFieldSet

        unknown = UnknownFieldSet(message)
        if not len(unknown):
            return None
        for item in unknown:
            name = self.known_numbers.get(item.field_number)
            if name is not None:
                return (
                    f"Protobuf decode failed{context}: field {name!r} (number "
                    f"{item.field_number}) has wire type {item.wire_type}, not its declared "
                    f"type's"
                )
        return None

    def _check_writer(self, schema_id: int, indexes: tuple[int, ...]) -> str | None:
        key = (schema_id, indexes)
        if key in self._writer_checks:
            return self._writer_checks[key]
        problem = None
        if self.writers is not None:
            try:
                files = self.writers.get(schema_id)
            except UnknownSchemaId as exc:
                problem = str(exc)
            else:
                name = message_at(files, indexes)
                if name is None:
                    problem = (
                        f"Confluent schema id {schema_id}: no message at index "
                        f"{list(indexes)} of its schema"
                    )
                elif name != self.full_name:
                    problem = (
                        f"Confluent schema id {schema_id}: the record is a {name}, "
                        f"the job reads {self.full_name}"
                    )
        self._writer_checks[key] = problem
        return problem

    def decode_columns(self, values: Sequence[bytes | None]) -> tuple[list[list[Any]], list[Any]]:
        """The event columns of ``values`` and each value's reason (None when it decoded);
        a failed value's columns are null."""
        from google.protobuf.unknown_fields import UnknownFieldSet

        parse, slow, misread = self.message_class.FromString, self.parse, self._misread
        framed = self.framing != "plain"
        messages: list[Any] = []
        errors: list[str | None] = []
        for value in values:
            # the common case inline: an unframed value that parses with no unknown fields
            if value is None or (framed and (not value or value[0] == 0)):
                message, problem = slow(value)
            else:
                try:
                    message, problem = parse(value), None
                except Exception:  # noqa: BLE001 - the slow path says why
                    message, problem = slow(value)
                else:
                    if len(UnknownFieldSet(message)):
                        problem = misread(message, "")
            if problem is not None:
                message = None
            messages.append(message)
            errors.append(problem)
        if any(errors):
            columns = [[None if m is None else r(m) for m in messages] for r in self.readers]
        else:
            columns = [[r(m) for m in messages] for r in self.readers]
        event = columns[self.event_index]
        failed = [i for i, m in enumerate(messages) if m is not None and event[i] is None]
        for index, _name in self.checked:
            column = columns[index]
            failed += [i for i, m in enumerate(messages) if m is not None and column[i] is None]
        for i in sorted(set(failed)):
            errors[i] = self._absent(columns, i)
            for column in columns:
                column[i] = None
        return columns, errors

    def _absent(self, columns: list[list[Any]], i: int) -> str:
        problems = []
        if columns[self.event_index][i] is None:
            problems.append(f"event time {self.fields[self.event_index]!r} is null")
        for index, name in self.checked:
            if columns[index][i] is None:
                problems.append(f"required field {name!r} is null")
        return "; ".join(problems)

    def decode_one(self, value: bytes | None) -> dict[str, Any] | str:
        """One value: the event dict, or the reason it failed."""
        columns, errors = self.decode_columns([value])
        if errors[0] is not None:
            return str(errors[0])
        return {n: c[0] for n, c in zip(self.fields, columns, strict=True)}
