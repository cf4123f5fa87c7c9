"""JSON records decoded by Arrow's JSON reader, a batch at a time, when it can vouch for them.

The Python decoder (:mod:`kappaplus.codecs.decoder`) parses and checks one record at a time:
on a stream's records that is most of a Python worker's time (``docs/benchmarks.md``, issue
51). Arrow's reader parses a whole batch in C++. It is used only where its answer is the
Python decoder's, and it gives a batch's columns or nothing; with nothing, the batch is
decoded record by record as before, so every dead letter keeps its exact reason. So the
checks need only be sound one way: when this module answers, the Python decoder would have
decoded every record of the batch, to the same values.

What it vouches for: an event schema whose top-level fields are strings, booleans, integers
(``tinyint`` to ``bigint``), doubles and timestamps (the event time an ISO string, or an
integer in its declared unit); no other type (the Python decoder then decodes every batch).
A batch is answered when

- no value is null, every value is valid UTF-8 and holds no line break (the batch is read
  as one newline-delimited text, one line per record) and no byte-order mark;
- Arrow reads exactly one object per record with every field of its declared kind (Arrow
  refuses a number in a string field, ``1.0`` in an integer field, an integer out of range,
  a duplicated key, a lone surrogate, anything after the object: each is then the Python
  decoder's to explain);
- no value nests deeper than Python's parser can (:data:`MAX_BRACKETS`);
- every required field and the event time are present and non-null;
- every timestamp is an ISO form both readers take alike (:data:`ISO_TIMESTAMP`) or, for an
  event time with a unit, an integer whose microseconds stay within year 9999.

>>> reader = ArrowJsonReader.of(spec, arrow_schema)  # doctest: +SKIP
>>> columns = reader.decode(batch)  # doctest: +SKIP
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from kappaplus.codecs.spec import DecoderSpec

MAX_BRACKETS = 500
"""More ``[``/``{`` bytes than this in a value and the batch goes to Python, whose parser
stops at a nesting depth Arrow's does not (the JVM JSON decoder, :mod:`kappaplus.codecs.fastjson`,
uses the same bound)."""
_DATE = r"(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])-[0-9]{2}-[0-9]{2}"
_ZONE = r"(?:Z|[+-][0-9]{2}:[0-9]{2})"
ISO_TIMESTAMP = rf"^{_DATE}[T ][0-9]{{2}}:[0-9]{{2}}(?::[0-9]{{2}}(?:\.[0-9]{{1,6}})?)?{_ZONE}?$"
"""The ISO forms read here: ``datetime.fromisoformat`` (the Python decoder) and Arrow's cast
read them to the same instant (no zone: UTC). Any other string sends the batch to Python."""
ISO_ZONED = ISO_TIMESTAMP.replace(f"{_ZONE}?$", f"{_ZONE}$")
_ZONED = rf"{_ZONE}$"
_UTF8_BOM = b"\xef\xbb\xbf"


def _read_type(kind: pa.DataType) -> pa.DataType | None:
    """The type Arrow reads a field of output type ``kind`` as; None when not vouched for."""
    if pa.types.is_string(kind) or pa.types.is_boolean(kind) or pa.types.is_float64(kind):
        return kind
    if pa.types.is_integer(kind) and pa.types.is_signed_integer(kind):
        return kind
    if pa.types.is_timestamp(kind) and kind.unit == "us" and kind.tz is not None:
        return pa.string()
    return None


@dataclass
class ArrowJsonReader:
    """Reads a batch of JSON values into the event columns (see the module)."""

    names: list[str]
    out_types: list[pa.DataType]
    read_types: list[pa.DataType]
    required: frozenset[str]
    event_time: str
    unit_micros: int | None

    @classmethod
    def of(cls, spec: DecoderSpec, arrow_schema: pa.Schema) -> ArrowJsonReader | None:
        """The reader of ``spec``'s JSON records (``arrow_schema``: the decoded columns), or
        None when its schema has a field of a type this module does not vouch for."""
        from kappaplus.codecs.convert import EVENT_TIME_UNITS

        if spec.format != "json":
            return None
        names = [f.name for f in spec.event_schema.fields]
        out_types = [arrow_schema.field(n).type for n in names]
        read_types = []
        for name, kind in zip(names, out_types, strict=True):
            read = _read_type(kind)
            if read is None or (name == spec.event_time and not pa.types.is_timestamp(kind)):
                return None
            read_types.append(read)
        unit = spec.event_time_unit
        return cls(
            names=names,
            out_types=out_types,
            read_types=read_types,
            required=frozenset(spec.required_fields) | {spec.event_time},
            event_time=spec.event_time,
            unit_micros=None if unit is None else EVENT_TIME_UNITS[unit],
        )

    def decode(self, values: pa.Array) -> list[pa.Array] | None:
        """The event columns of ``values`` (binary JSON values), each of its output type;
        None when this batch must be decoded record by record."""
        if len(values) == 0:
            return [pa.array([], type=t) for t in self.out_types]
        text = self._text(values)
        if text is None:
            return None
        table = self._read(text, len(values), numeric_time=False)
        if table is None and self.unit_micros is not None:
            table = self._read(text, len(values), numeric_time=True)
        if table is None:
            return None
        columns = []
        for name, kind in zip(self.names, self.out_types, strict=True):
            column = table.column(name).combine_chunks()
            if name in self.required and column.null_count:
                return None
            if pa.types.is_timestamp(kind):
                column = (
                    self._epoch_micros(column, kind)
                    if pa.types.is_integer(column.type)
                    else _iso_micros(column, kind)
                )
                if column is None:
                    return None
            columns.append(column)
        return columns

    def _text(self, values: pa.Array) -> bytes | None:
        """One newline-delimited text of ``values`` (a line before the first), or None
        when a value rules it out."""
        import pyarrow.compute as pc

        if values.null_count:
            return None
        large = pa.types.is_large_binary(values.type) or pa.types.is_large_string(values.type)
        binary = pa.large_binary() if large else pa.binary()
        values = values.cast(binary)
        try:
            values.cast(pa.large_string() if large else pa.string()).validate(full=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None  # invalid UTF-8: the record-by-record decoder names the byte
        if pc.any(pc.starts_with(values, _UTF8_BOM)).as_py():  # type: ignore[arg-type]
            return None
        if pc.max(pc.binary_length(values)).as_py() >= 2 * MAX_BRACKETS:
            brackets = pc.add(pc.count_substring(values, "["), pc.count_substring(values, "{"))
            if pc.max(brackets).as_py() > MAX_BRACKETS:
                return None
        # a line before the first record too: Arrow skips a byte-order mark only at the
        # start of its input, where Python's decoder would not
        with_empty = pa.concat_arrays([pa.array([b""], binary), values])
        offsets = pa.array([0, len(with_empty)], pa.int64() if large else pa.int32())
        lists = (pa.LargeListArray if large else pa.ListArray).from_arrays(offsets, with_empty)
        text = pc.binary_join(lists, pa.scalar(b"\n", binary))[0].as_py()
        # one line per record: a line break inside a value would split it
        if text.count(b"\n") != len(values) or b"\r" in text:
            return None
        return text

    def _read(self, text: bytes, rows: int, *, numeric_time: bool) -> pa.Table | None:
        import pyarrow.json as pj

        fields = []
        for name, read in zip(self.names, self.read_types, strict=True):
            if numeric_time and name == self.event_time:
                read = pa.int64()
            fields.append(pa.field(name, read))
        parse = pj.ParseOptions(
            explicit_schema=pa.schema(fields),
            unexpected_field_behavior="ignore",
            newlines_in_values=False,
        )
        read_options = pj.ReadOptions(use_threads=False, block_size=max(len(text) + 1, 1 << 20))
        try:
            table = pj.read_json(io.BytesIO(text), read_options=read_options, parse_options=parse)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
            return None  # a record Arrow refuses: the record-by-record decoder says why
        return table if table.num_rows == rows else None

    def _epoch_micros(self, column: pa.Array, kind: pa.DataType) -> pa.Array | None:
        """An integer event time in its unit as microseconds; None when out of range."""
        import pyarrow.compute as pc

        from kappaplus.codecs.convert import MAX_MICROS

        assert self.unit_micros is not None
        try:
            micros = pc.multiply_checked(column, self.unit_micros)
        except pa.ArrowInvalid:
            return None  # overflow: out of range, the record-by-record decoder says so
        if pc.any(pc.greater(pc.abs_checked(micros), MAX_MICROS)).as_py():
            return None
        return micros.cast(kind)


def _iso_micros(column: pa.Array, kind: pa.DataType) -> pa.Array | None:
    """ISO strings as ``kind`` (UTC when they carry no zone); None unless every one is of
    the form :data:`ISO_TIMESTAMP` and a valid time."""
    import pyarrow.compute as pc

    try:
        if pc.all(pc.match_substring_regex(column, ISO_ZONED), min_count=0).as_py():
            return pc.cast(column, kind)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None  # not a valid time (2024-02-30): the record-by-record decoder says so
    if not pc.all(pc.match_substring_regex(column, ISO_TIMESTAMP), min_count=0).as_py():
        return None
    zoned = pc.match_substring_regex(column, _ZONED)
    with_zone = pc.if_else(zoned, column, pc.binary_join_element_wise(column, "Z", ""))
    try:
        return pc.cast(with_zone, kind)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None  # not a valid time: the record-by-record decoder says so
