"""Each option object written back as options (``to_options``) reads as the same object, and
its options are taken under their camelCase keys or field names, in any case."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from kappaplus.archive import ArchiveOptions
from kappaplus.codecs import DecoderSpec
from kappaplus.connectors.hive.sink_options import HiveSinkOptions
from kappaplus.connectors.hybrid.options import HybridSourceOptions, decoder_to_json
from kappaplus.connectors.kafka.options import KafkaSourceOptions
from kappaplus.connectors.kafka.sink import KafkaSinkOptions
from kappaplus.connectors.lake.options import LakeSourceOptions
from kappaplus.core.errors import ConfigError
from kappaplus.core.options import duration_text, from_options, options_of, to_options
from kappaplus.runtime.options import RunOptions

HOUR = 3_600_000_000
T0 = 1_709_251_200_000_000  # 2024-03-01T00:00:00Z in microseconds

IDENT = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)
PATHS = st.from_regex(r"/[a-z0-9_/]{1,20}", fullmatch=True)
MICROS = st.one_of(st.sampled_from([0, 1, 1_000, HOUR, 86_400_000_000]), st.integers(0, 10**13))
POSITIVE = st.integers(1, 10**9)
TOPIC = st.from_regex(r"t[a-z0-9._-]{0,8}", fullmatch=True)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def spelled(draw: st.DrawFn, options: dict[str, str], cls: type) -> dict[str, str]:
    """``options`` with each declared key spelled as the field name or in another case."""
    by_key = {o.key: o for o in options_of(cls)}
    out = {}
    for key, value in options.items():
        spec = by_key.get(key)
        if spec is not None:
            key = draw(st.sampled_from([key, key.lower(), spec.name, spec.name.upper()]))
        out[key] = value
    return out


# -- the Hive source -------------------------------------------------------------------------


@st.composite
def hive_source(draw: st.DrawFn, prefix: str = "") -> dict[str, str]:
    names = draw(st.lists(IDENT.filter(lambda n: n != "ts"), min_size=1, max_size=4, unique=True))
    types = [draw(st.sampled_from([StringType(), LongType(), TimestampType()])) for _ in names]
    schema = StructType(
        [StructField(n, t) for n, t in zip(names, types, strict=True)]
        + [StructField("ts", TimestampType())]
    )
    raw: dict[str, str] = {
        "location": draw(PATHS),
        "format": draw(st.sampled_from(["parquet", "orc", "PARQUET"])),
        "schema": schema.json(),
        "eventTimeColumn": "ts",
        "manifestDir": draw(PATHS),
    }
    if draw(st.booleans()):
        raw["table"] = draw(IDENT)
    partitions = draw(st.lists(st.sampled_from(names), unique=True, max_size=2))
    if partitions or draw(st.booleans()):
        raw["partitionColumns"] = ",".join(partitions)
    start = draw(st.one_of(st.none(), st.integers(T0, T0 + 100 * HOUR)))
    if start is not None:
        raw["startingTimestamp"] = draw(st.sampled_from([str(start), _iso(start)]))
    if draw(st.booleans()):
        raw["endingTimestamp"] = str((start or T0) + draw(st.integers(1, 100 * HOUR)))
    for key in ("maxLateness", "completenessDelay", "maxEarliness", "watermarkDelay"):
        if draw(st.booleans()):
            raw[key] = duration_text(draw(MICROS))
    if draw(st.booleans()):
        raw["maxEventTimePerTrigger"] = draw(st.sampled_from(["2 hours", "90 min", "1 day 6h"]))
    for key in (
        "maxRowsPerTrigger",
        "maxBytesPerTrigger",
        "targetRowsPerTrigger",
        "targetBytesPerTrigger",
        "rowsPerPartition",
    ):
        if draw(st.booleans()):
            raw[key] = str(draw(POSITIVE))
    if draw(st.booleans()):
        raw["partitionTimeFormat"] = "dt=%Y-%m-%d"
    if draw(st.booleans()):
        raw["partitionTimeKind"] = draw(st.sampled_from(["event", "arrival", "ARRIVAL"]))
    if draw(st.booleans()):
        raw["nullEventTimePolicy"] = draw(st.sampled_from(["fail", "deadLetter", "deadletter"]))
        raw["deadLetterPath"] = draw(PATHS)
    if draw(st.booleans()):
        raw["columns"] = ",".join(draw(st.lists(st.sampled_from(names), max_size=3)))
    if draw(st.booleans()):
        raw["adviceConfigPrefix"] = "inputs.x.hive"
    if draw(st.booleans()):
        raw["drainFile"] = draw(PATHS)
    if prefix:
        return raw
    return spelled(draw, raw, LakeSourceOptions)


def _iso(micros: int) -> str:
    from kappaplus.core.timeutil import iso

    return iso(micros)


@SETTINGS
@given(hive_source())
def test_hive_source_options_round_trip(raw: dict[str, str]) -> None:
    parsed = LakeSourceOptions.parse(raw)
    assert LakeSourceOptions.parse(parsed.to_options()) == parsed


def test_hive_source_defaults_and_names() -> None:
    raw = {
        "location": "/t",
        "format": "parquet",
        "schema": StructType([StructField("ts", TimestampType())]).json(),
        "event_time_column": "ts",
        "MANIFESTDIR": "/m",
    }
    parsed = LakeSourceOptions.parse(raw)
    assert (parsed.table, parsed.rows_per_partition, parsed.target_rows_per_trigger) == (
        "/t",
        1_000_000,
        2_000_000,
    )
    with pytest.raises(ConfigError, match="option 'maxLateness' = '-1': must not be negative"):
        LakeSourceOptions.parse({**raw, "maxLateness": "-1"})
    with pytest.raises(ConfigError, match="option 'max_lateness' = 'soon'"):
        LakeSourceOptions.parse({**raw, "max_lateness": "soon"})
    with pytest.raises(ConfigError, match="option 'eventTimeColumn' = None: is required"):
        LakeSourceOptions.parse({k: v for k, v in raw.items() if k != "event_time_column"})


# -- Kafka -----------------------------------------------------------------------------------


@st.composite
def kafka_source(draw: st.DrawFn, hybrid: bool = False) -> dict[str, str]:
    raw: dict[str, str] = {"kafka.bootstrap.servers": "h:9092"}
    if draw(st.booleans()):
        raw["kafka.sasl.password"] = "hunter2"
    how = draw(st.sampled_from(["subscribe", "subscribePattern", "assign"]))
    topics = draw(st.lists(TOPIC, min_size=1, max_size=3, unique=True))
    partitions = [(t, p) for t in topics for p in draw(st.lists(st.integers(0, 5), min_size=1))]
    if how == "subscribe":
        raw["subscribe"] = ",".join(topics)
    elif how == "subscribePattern":
        raw["subscribePattern"] = "t.*"
    else:
        parts: dict[str, list[int]] = {}
        for topic, partition in partitions:
            parts.setdefault(topic, []).append(partition)
        raw["assign"] = json.dumps(parts)

    def offsets(allow_earliest: bool) -> str:
        low = -2 if allow_earliest else -1
        chosen = draw(st.lists(st.sampled_from(partitions), min_size=1, unique=True))
        doc: dict[str, dict[str, int]] = {}
        for topic, partition in chosen:
            doc.setdefault(topic, {})[str(partition)] = draw(st.integers(low, 10**6))
        return json.dumps(doc)

    if not hybrid:
        start = draw(st.sampled_from(["none", "earliest", "latest", "offsets", "timestamp"]))
        if start in ("earliest", "latest"):
            raw["startingOffsets"] = start
        elif start == "offsets":
            raw["startingOffsets"] = offsets(True)
        elif start == "timestamp":
            raw["startingTimestamp"] = str(draw(st.integers(0, 2 * 10**12)))
        if draw(st.booleans()):
            raw["includeHeaders"] = draw(st.sampled_from(["true", "false", "YES", "0"]))
    if draw(st.booleans()):
        raw["endingOffsets"] = draw(st.sampled_from(["latest", offsets(False)]))
    for key in ("maxOffsetsPerTrigger", "minPartitions", "kafkaConsumer.pollTimeoutMs"):
        if draw(st.booleans()):
            raw[key] = str(draw(POSITIVE))
    if draw(st.booleans()):
        raw["failOnDataLoss"] = draw(st.sampled_from(["true", "false", "No", "1"]))
    if draw(st.booleans()) and not hybrid:
        raw["drainFile"] = draw(PATHS)
    return spelled(draw, raw, KafkaSourceOptions)


@SETTINGS
@given(kafka_source(), st.booleans())
def test_kafka_source_options_round_trip(raw: dict[str, str], streaming: bool) -> None:
    parsed = KafkaSourceOptions.parse(raw, streaming=streaming)
    assert KafkaSourceOptions.parse(parsed.to_options(), streaming=not streaming) == parsed


@SETTINGS
@given(
    st.one_of(st.none(), TOPIC),
    st.one_of(st.none(), st.floats(0.001, 1e9)),
    st.one_of(st.none(), POSITIVE),
)
def test_kafka_sink_options_round_trip(
    topic: str | None, rate: float | None, flush: int | None
) -> None:
    raw = {"kafka.bootstrap.servers": "h:1", "kafka.linger.ms": "5"}
    for key, value in (("topic", topic), ("maxRecordsPerSecond", rate), ("flushTimeoutMs", flush)):
        if value is not None:
            raw[key] = str(value)
    parsed = KafkaSinkOptions.parse(raw)
    assert KafkaSinkOptions.parse(parsed.to_options()) == parsed
    assert parsed.flush_timeout_ms == (flush or 120_000)


# -- the hybrid source and the decoder -------------------------------------------------------

EVENT = StructType([StructField("id", LongType()), StructField("ts", TimestampType())])


@st.composite
def decoder(draw: st.DrawFn) -> DecoderSpec:
    return DecoderSpec(
        format="json",
        schema=EVENT,
        event_time="ts",
        required=tuple(draw(st.lists(st.just("id"), max_size=1))),
        json_decoder=draw(st.sampled_from(["python", "jvm"])),
    )


@SETTINGS
@given(decoder())
def test_decoder_spec_round_trip(spec: DecoderSpec) -> None:
    assert DecoderSpec.parse(spec.to_options()) == spec
    assert DecoderSpec.parse(json.loads(decoder_to_json(spec))) == spec


def test_avro_decoder_spec_round_trip_and_the_older_json(tmp_path: Path) -> None:
    from kappaplus.connectors.hybrid.options import decoder_from_json

    avsc = tmp_path / "e.avsc"
    avsc.write_text(
        json.dumps(
            {
                "type": "record",
                "name": "E",
                "fields": [
                    {"name": "id", "type": "long"},
                    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
                ],
            }
        )
    )
    spec = DecoderSpec(
        format="avro", avro_schema=str(avsc), event_time="ts", schema_ids=frozenset({3, 1})
    )
    assert DecoderSpec.parse(spec.to_options()) == spec
    older = {  # what decoder_to_json wrote before the options layer
        "format": "json",
        "eventTime": "ts",
        "required": ["id"],
        "wireFormat": "auto",
        "schema": EVENT.jsonValue(),
        "schemaIds": [1, 2],
    }
    assert decoder_from_json(json.dumps(older)) == DecoderSpec(
        format="json", schema=EVENT, event_time="ts", required=("id",), schema_ids={1, 2}
    )
    with pytest.raises(ConfigError, match="option 'decoder' = '\\[1\\]': not a decoder spec"):
        decoder_from_json("[1]")


@st.composite
def hybrid_source(draw: st.DrawFn) -> dict[str, str]:
    lake = {
        "location": draw(PATHS),
        "format": "parquet",
        "schema": EVENT.json(),
        "eventTimeColumn": "ts",
        "manifestDir": draw(PATHS),
    }
    if draw(st.booleans()):
        lake["startingTimestamp"] = str(T0)
    if draw(st.booleans()):
        lake["maxLateness"] = duration_text(draw(MICROS))
    raw = {f"lake.{key}": value for key, value in lake.items()}
    raw.update(draw(kafka_source(hybrid=True)))
    raw.update(
        {
            "cutoff": draw(st.sampled_from([_iso(T0 + HOUR), str(T0 + 5 * HOUR)])),
            "decoder": decoder_to_json(draw(decoder())),
            "deadLetterPath": draw(PATHS),
        }
    )
    if draw(st.booleans()):
        raw["lateness"] = duration_text(draw(st.integers(0, 10 * HOUR)))
    if draw(st.booleans()):
        raw["jobName"] = draw(IDENT)
    if draw(st.booleans()):
        raw["drainFile"] = draw(PATHS)
    return spelled(draw, raw, HybridSourceOptions)


@SETTINGS
@given(hybrid_source())
def test_hybrid_source_options_round_trip(raw: dict[str, str]) -> None:
    parsed = HybridSourceOptions.parse(raw)
    assert HybridSourceOptions.parse(parsed.to_options()) == parsed


# -- objects built in Python: the Hive sink, a run, the archiver -----------------------------


@SETTINGS
@given(
    st.builds(
        HiveSinkOptions,
        table=st.from_regex(r"[a-z_]{1,6}(\.[a-z_]{1,6})?", fullmatch=True),
        query_name=st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,8}", fullmatch=True),
        partition_column=st.sampled_from(["dt", "day"]),
        partition_expr=st.one_of(st.none(), st.just("to_date(`ts`)")),
        event_time_column=st.one_of(st.none(), IDENT),
        create_table=st.booleans(),
        files_per_partition=st.integers(1, 64),
        visibility=st.sampled_from(["batch", "partition"]),
        extra_partitions=st.sampled_from([(), (("hr", "hour(`ts`)"),)]),
        provenance=st.one_of(
            st.none(), st.dictionaries(IDENT, st.one_of(st.integers(), IDENT), max_size=3)
        ),
    )
)
def test_hive_sink_options_round_trip(options: HiveSinkOptions) -> None:
    assert from_options(HiveSinkOptions, to_options(options)) == options


@st.composite
def run_options(draw: st.DrawFn) -> RunOptions:
    mode = draw(st.sampled_from(["stream", "backfill", "bootstrap"]))
    kwargs: dict[str, Any] = {}
    start = draw(st.integers(0, 100)) if mode != "stream" and draw(st.booleans()) else None
    if start is not None:
        kwargs["start"] = _iso(T0 + start * HOUR)
    if mode == "backfill" and draw(st.booleans()):
        kwargs["end"] = _iso(T0 + (start or 0) * HOUR + draw(st.integers(1, 50)) * HOUR)
    if mode == "bootstrap":
        kwargs["cutoff"] = _iso(T0 + 200 * HOUR)
        if draw(st.booleans()):
            kwargs["lateness"] = draw(st.sampled_from(["1 hour", "90 min", "0 seconds"]))
    for name in ("until_idle", "timeout"):
        if draw(st.booleans()):
            kwargs[name] = draw(st.floats(0.001, 1e6))
    return RunOptions(
        mode,  # type: ignore[arg-type]
        trigger=draw(st.sampled_from([None, "available-now", "once", "5 seconds"])),
        checkpoint_root=draw(st.one_of(st.none(), PATHS.map(Path))),
        fresh=draw(st.booleans()),
        progress=draw(st.booleans()),
        run_id=draw(st.one_of(st.none(), IDENT)),
        poll_seconds=draw(st.floats(0.01, 10)),
        audit=draw(st.booleans()),
        metrics_port=draw(st.one_of(st.none(), st.integers(0, 65535))),
        **kwargs,
    )


@SETTINGS
@given(run_options())
def test_run_options_round_trip(run: RunOptions) -> None:
    assert from_options(RunOptions, to_options(run)) == run


def test_run_options_check_their_kinds() -> None:
    with pytest.raises(ConfigError, match="option 'until_idle' = 0: expected a positive"):
        RunOptions("stream", until_idle=0)
    with pytest.raises(ConfigError, match="option 'metrics_port' = 70000: must be <= 65535"):
        RunOptions("stream", metrics_port=70000)
    with pytest.raises(ConfigError, match="option 'lateness' = '-1': must not be negative"):
        RunOptions("bootstrap", cutoff="2024-03-01", lateness="-1")
    assert RunOptions("bootstrap", cutoff="2024-03-01", lateness="2 h").lateness.micros == (  # type: ignore[union-attr]
        2 * HOUR
    )
    assert RunOptions("stream", trigger="Available_Now").trigger == "available-now"


@SETTINGS
@given(
    st.builds(
        ArchiveOptions,
        topic=TOPIC,
        bootstrap_servers=st.just("h:9092"),
        table=st.from_regex(r"[a-z_]{1,6}\.[a-z_]{1,6}", fullmatch=True),
        event_time_column=IDENT,
        schema=st.just("id string, event_time timestamp"),
        partition_by=st.sampled_from(["event", "arrival"]),
        hourly=st.booleans(),
        starting_offsets=st.sampled_from(["earliest", "latest"]),
        max_offsets_per_trigger=st.one_of(st.none(), POSITIVE),
        dead_letter_table=st.one_of(st.none(), st.just("lake.dead")),
        trigger_interval=st.sampled_from(["10 seconds", "1 minute"]),
        checkpoint_dir=st.one_of(st.none(), PATHS.map(Path)),
        kafka_options=st.one_of(st.none(), st.just({"kafka.linger.ms": "5"})),
    )
)
def test_archive_options_round_trip(options: ArchiveOptions) -> None:
    assert from_options(ArchiveOptions, to_options(options)) == options
