"""Typed, validated options of the hybrid (lambda) source ``kappa_hybrid``.

Spark hands the source one flat map of string options. They are routed and parsed once,
here, into :class:`HybridSourceOptions`:

- ``lake.<name>``: options of the Hive streaming source (``lake.table``, ``lake.location``,
  ``lake.schema``, ``lake.eventTimeColumn``, ``lake.startingTimestamp``,
  ``lake.maxEventTimePerTrigger``, ...). ``lake.endingTimestamp`` is the cutoff and
  ``lake.watermarkDelay`` would end the stream after the lake, so both are refused.
- ``cutoff``, ``lateness``, ``decoder``, ``deadLetterPath``, ``jobName``, ``mapped``: the
  hybrid's own.
- everything else: options of the Kafka source (``kafka.bootstrap.servers``,
  ``subscribe``, ``maxOffsetsPerTrigger``, ``failOnDataLoss``, ...). The hybrid chooses
  where Kafka starts, so ``startingOffsets`` / ``startingTimestamp`` are refused.

Every error is a :class:`~kappaplus.core.errors.ConfigError` naming the option and the value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pyspark.sql.types import DataType, StructType

from kappaplus.codecs import DecoderSpec
from kappaplus.connectors.delta.options import DeltaSourceOptions
from kappaplus.connectors.iceberg.options import IcebergSourceOptions
from kappaplus.connectors.kafka.options import (
    ENDING_OFFSETS,
    STARTING_OFFSETS,
    STARTING_TIMESTAMP,
    KafkaSourceOptions,
)
from kappaplus.connectors.lake.options import LakeSourceOptions
from kappaplus.core.ahead import AheadRule
from kappaplus.core.draining import DRAIN_OPTION
from kappaplus.core.errors import ConfigError
from kappaplus.core.options import (
    BOOL,
    MICROS,
    TIMESTAMP,
    Kind,
    option,
    option_keys,
    options_class,
    options_of,
    read_options,
    to_options,
)
from kappaplus.core.timeutil import iso

LAKE_PREFIX = "lake."
PHASE_COLUMN = "__kappa_phase"
"""In a mapped hybrid source (``mapped``): ``"lake"`` or ``"kafka"``, where the row comes from."""
LAKE_FIELD_PREFIX = "__lake__"
KAFKA_FIELD_PREFIX = "__kafka__"
"""In a mapped hybrid source each lake column ``c`` is delivered as ``__lake__c`` and each
decoded Kafka event field ``f`` as ``__kafka__f`` (null in the other phase's rows), so each
side keeps its own shape and the runtime maps each to the job's columns
(:func:`kappaplus.mapping.apply_phase_mappings`)."""
DEFAULT_LATENESS = "1 hour"
"""How far before the cutoff Kafka is read by default (records up to this late still reach
the job); the runtime's ``--lateness`` and the Hive binding's ``max_lateness`` override it."""

_REFUSED_LAKE = {
    "endingtimestamp": "the lake is read up to 'cutoff'; set 'cutoff' instead",
    "watermarkdelay": "end-of-input markers would stop the stream after the lake; "
    "apply the watermark to the hybrid stream instead (read_hybrid_stream(watermark_delay=))",
}
_REFUSED_KAFKA = {
    "startingoffsets": "the hybrid source starts Kafka at the offsets of cutoff - lateness",
    "startingtimestamp": "the hybrid source starts Kafka at the offsets of cutoff - lateness",
    "includeheaders": "Kafka records are decoded into the lake's schema; headers are not kept",
}


def decoder_to_json(spec: DecoderSpec) -> str:
    """Serialize a :class:`DecoderSpec` for the ``decoder`` option (no SparkSession needed)."""
    return json.dumps(spec.to_options(), sort_keys=True)


def decoder_from_json(text: str) -> DecoderSpec:
    """The inverse of :func:`decoder_to_json`; :class:`ConfigError` on anything else."""
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise TypeError(f"expected a JSON object, not {type(data).__name__}")
    except (ValueError, TypeError) as exc:
        raise ConfigError(
            "decoder", text[:80], f"not a decoder spec (use decoder_to_json): {exc}"
        ) from exc
    return DecoderSpec.parse(data)


def _accept_decoder(value: Any, option: str) -> DecoderSpec:
    if not isinstance(value, DecoderSpec):
        raise ConfigError(option, value, "expected a DecoderSpec")
    return value


DECODER: Kind[DecoderSpec] = Kind(
    "a decoder spec", lambda text, _: decoder_from_json(text), decoder_to_json, _accept_decoder
)
"""The ``decoder`` option: a :class:`DecoderSpec` as :func:`decoder_to_json` writes it."""


def _ahead_rule(text: str, option: str) -> AheadRule:
    rule = AheadRule.parse(text, option)
    if rule.reach.micros <= 0:
        raise ConfigError(option, text, "expected a positive duration, or 'auto <duration>'")
    return rule


def _accept_ahead_rule(value: Any, option: str) -> AheadRule:
    if isinstance(value, AheadRule):
        return value
    raise ConfigError(option, value, "expected a duration, or 'auto <duration>'")


AHEAD_RULE: Kind[AheadRule] = Kind(
    "a duration, or 'auto <duration>'", _ahead_rule, AheadRule.text, _accept_ahead_rule
)
"""The ``maxAhead`` option: an :class:`~kappaplus.core.ahead.AheadRule` as its text."""


def partition_formats(pattern: str | None) -> dict[str, str]:
    """``dt=%Y-%m-%d/hr=%H`` -> ``{"dt": "%Y-%m-%d", "hr": "%H"}``: how each time-partition
    column is derived from the event time (for Kafka events, which carry no partition)."""
    if not pattern:
        return {}
    out = {}
    for segment in pattern.strip("/").split("/"):
        name, sep, fmt = segment.partition("=")
        if sep and "%" in fmt:
            out[name] = fmt
    return out


def _arrow_castable(source: DataType, target: DataType) -> bool:
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_type

    try:
        src, dst = to_arrow_type(source, timezone="UTC"), to_arrow_type(target, timezone="UTC")
        pa.array([], type=src).cast(dst)
    except (pa.ArrowException, TypeError, ValueError, NotImplementedError):
        return False
    return True


@options_class(kw_only=True)
class HybridSourceOptions:
    """The lake's options, Kafka's options and what joins them; validated once.

    Times are integer microseconds since the epoch (UTC).
    """

    lake: LakeSourceOptions
    kafka: KafkaSourceOptions
    cutoff: int = option("cutoff", TIMESTAMP)
    lateness: int = option("lateness", MICROS, default=0)
    """Read directly (``format("kappa_hybrid")``) Kafka starts at the cutoff by default;
    :func:`~kappaplus.connectors.hybrid.source.read_hybrid_stream` passes
    :data:`DEFAULT_LATENESS`."""
    decoder: DecoderSpec = option("decoder", DECODER)
    dead_letter_path: str = option("deadLetterPath")
    job_name: str = option("jobName", required=False)
    """Default ``hybrid:<lake table>``."""
    event_time_min: int | None = option("eventTimeMin", TIMESTAMP, default=None)
    event_time_max: int | None = option("eventTimeMax", TIMESTAMP, default=None)
    max_future: int | None = option("maxFuture", MICROS, default=None)
    """The input's event-time bounds (``[inputs.<n>.event_time_bounds]``): a Kafka record
    the phase would deliver whose event time is before ``eventTimeMin``, not before
    ``eventTimeMax`` or more than ``maxFuture`` ahead of the batch's planning time is a
    dead letter with that reason, as in a stream, not a row left out."""
    max_ahead: AheadRule | None = option("maxAhead", AHEAD_RULE, default=None)
    """``max_ahead`` of the input's bounds (``"<duration>"`` or ``"auto <floor>"``,
    :meth:`~kappaplus.core.ahead.AheadRule.text`): a Kafka record the phase would deliver
    whose event time is further ahead of its peers (the median event time of the decoded
    records of its offset range: one partition, one micro-batch, as in a stream) than the
    rule allows is a dead letter with that reason instead of moving the watermark
    (:func:`kappaplus.core.event_time.far_ahead_reasons`)."""
    derived: dict[str, str]  # lake partition column -> strftime format of the event time
    drain_file: str | None = option(DRAIN_OPTION, default=None)
    """Once this file exists the source admits no new data (:mod:`kappaplus.core.draining`)."""
    mapped: bool = option("mapped", BOOL, default=False)
    """The lake and the topic have shapes of their own (a binding's ``columns`` /
    ``event_time``): rows are delivered as :func:`mapped_schema` (each side's fields as
    they are, and the phase), not conformed to the lake's schema; the cutoff still applies
    to each side's own event time (the lake's stored one converted by its planner, the
    decoder's for Kafka)."""

    @property
    def event_time_column(self) -> str:
        return self.lake.event_time_column

    @property
    def kafka_event_time_column(self) -> str:
        """The decoded events' event-time field (the lake's, unless ``mapped``)."""
        return self.decoder.event_time

    @property
    def kafka_start_ms(self) -> int:
        """The Kafka timestamp (ms) from which records are read: ``cutoff - lateness``."""
        return max(0, (self.cutoff - self.lateness) // 1000)

    def describe(self) -> str:
        return (
            f"hybrid source: table {self.lake.table!r} until {iso(self.cutoff)}, then "
            f"{self.kafka.describe()} from {iso(self.cutoff - self.lateness)}"
        )

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> HybridSourceOptions:
        """Route and validate Spark's string options (see the module docstring)."""
        own = option_keys(cls)
        lake_raw: dict[str, str] = {}
        kafka_raw: dict[str, str] = {}
        mine: dict[str, str] = {}
        for key, value in options.items():
            lowered = str(key).lower()
            if lowered.startswith(LAKE_PREFIX):
                name = str(key)[len(LAKE_PREFIX) :]
                if name.lower() in _REFUSED_LAKE:
                    raise ConfigError(str(key), value, _REFUSED_LAKE[name.lower()])
                lake_raw[name] = value
            elif lowered in own:
                mine[str(key)] = value
            else:
                if lowered in _REFUSED_KAFKA:
                    raise ConfigError(str(key), value, _REFUSED_KAFKA[lowered])
                kafka_raw[str(key)] = value

        read = read_options(cls, mine)
        cutoff, lateness = read["cutoff"], read["lateness"]
        lake_raw["endingTimestamp"] = str(cutoff)
        try:
            # an Iceberg table's pinned snapshot (kappaplus.connectors.iceberg), a Delta
            # table's pinned version (kappaplus.connectors.delta) or a Hive table
            keys = {k.lower() for k in lake_raw}
            kind: type[LakeSourceOptions] = LakeSourceOptions
            if "metadatalocation" in keys:
                kind = IcebergSourceOptions
            elif "deltaversion" in keys:
                kind = DeltaSourceOptions
            lake = kind.parse(lake_raw)
        except ConfigError as exc:  # name the option as the caller spelled it
            raise ConfigError(f"{LAKE_PREFIX}{exc.option}", exc.value, exc.problem) from exc
        if lake.starting_timestamp is not None and lake.starting_timestamp >= cutoff:
            raise ConfigError(
                "lake.startingTimestamp",
                iso(lake.starting_timestamp),
                f"must be before the cutoff {iso(cutoff)}",
            )
        kafka_raw["startingTimestamp"] = str(max(0, (cutoff - lateness) // 1000))
        kafka = KafkaSourceOptions.parse(kafka_raw, streaming=True)
        derived = {} if read["mapped"] else cls._unify(lake, read["decoder"])
        return cls(
            lake=lake,
            kafka=kafka,
            derived=derived,
            **{**read.init(cls), "job_name": read["job_name"] or f"hybrid:{lake.table}"},
        )

    def to_options(self) -> dict[str, str]:
        """The string options :meth:`parse` reads as this object (secrets included)."""
        lake = self.lake.to_options()
        out = {f"{LAKE_PREFIX}{k}": v for k, v in lake.items() if k.lower() not in _REFUSED_LAKE}
        kafka = self.kafka.to_options()
        out.update({k: v for k, v in kafka.items() if k.lower() not in _REFUSED_KAFKA})
        out.update(to_options(self))
        return out

    @staticmethod
    def _unify(lake: LakeSourceOptions, decoder: DecoderSpec) -> dict[str, str]:
        """Check that decoded Kafka events can be made into lake rows (schema unification).

        Every lake column read must be an event field of a compatible type, or a
        time-partition column derivable from the event time; extra event fields are dropped.
        """
        if decoder.event_time != lake.event_time_column:
            raise ConfigError(
                "decoder",
                decoder.event_time,
                f"the decoder's event time must be the lake's event-time column "
                f"{lake.event_time_column!r}",
            )
        events = {f.name: f.dataType for f in decoder.event_schema.fields}
        formats = partition_formats(lake.partition_time_format)
        derived: dict[str, str] = {}
        for f in lake.output_schema.fields:  # the columns it delivers (``columns``)
            if f.name in events:
                if events[f.name] != f.dataType and not _arrow_castable(events[f.name], f.dataType):
                    raise ConfigError(
                        "decoder",
                        f"{f.name} {events[f.name].simpleString()}",
                        f"cannot be converted to the lake column {f.name} "
                        f"{f.dataType.simpleString()} of table {lake.table!r}",
                    )
            elif f.name in lake.partition_columns and f.name in formats:
                derived[f.name] = formats[f.name]
            else:
                raise ConfigError(
                    "decoder",
                    f.name,
                    f"lake column {f.name!r} of table {lake.table!r} is not in the decoder's "
                    f"event schema ({', '.join(events)}) and cannot be derived from the event "
                    "time; add it to the decoder schema",
                )
        return derived


def mapped_schema(lake_schema: StructType, decoder: DecoderSpec) -> StructType:
    """The rows of a mapped hybrid source: the phase, every lake column prefixed
    :data:`LAKE_FIELD_PREFIX`, every decoded event field prefixed :data:`KAFKA_FIELD_PREFIX`
    (all nullable: a row has only its own side's)."""
    from pyspark.sql.types import StringType, StructField

    return StructType(
        [
            StructField(PHASE_COLUMN, StringType(), False),
            *[
                StructField(LAKE_FIELD_PREFIX + f.name, f.dataType, True)
                for f in lake_schema.fields
            ],
            *[
                StructField(KAFKA_FIELD_PREFIX + f.name, f.dataType, True)
                for f in decoder.event_schema.fields
            ],
        ]
    )


HYBRID_KEYS = tuple(o.key for o in options_of(HybridSourceOptions))
"""The hybrid's own options; ``lake.*`` go to the lake, the rest to Kafka."""
LAKE_ONLY_KEYS = (
    option_keys(LakeSourceOptions)
    - option_keys(KafkaSourceOptions, STARTING_OFFSETS, STARTING_TIMESTAMP, ENDING_OFFSETS)
    - option_keys(HybridSourceOptions)
)
"""Lower-cased names of the lake's options that neither Kafka nor the hybrid has: given
without the ``lake.`` prefix they can only mean the lake's."""


def safe_file_part(text: str) -> str:
    """A string usable in a file name (topics may hold dots and dashes, nothing else odd)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)
