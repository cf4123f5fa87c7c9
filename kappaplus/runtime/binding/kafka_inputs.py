"""A logical input bound to a Kafka topic: its decoder, its source options, the check that
its brokers answer and its topic exists (before Spark starts), and its records read as a
stream (:mod:`kappaplus.runtime.binding.inputs` binds them to the job)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kappaplus.core.draining import DRAIN_OPTION
from kappaplus.core.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from kappaplus.codecs import DecoderSpec
    from kappaplus.config import KafkaInput, ResolvedConfig
    from kappaplus.jobs import InputSpec, Job


def decoder_spec(spec: InputSpec, kafka: KafkaInput) -> DecoderSpec:
    """How the input's Kafka records decode into the job's declared events."""
    from kappaplus.codecs import DecoderSpec
    from kappaplus.runtime.binding.unify import kafka_event_field, kafka_fields

    event = kafka_event_field(spec, kafka)
    if kafka.format == "avro":
        avro = DecoderSpec(
            format="avro",
            avro_schema=str(kafka.schema_file),
            event_time=event,
            schema_registry_url=kafka.schema_registry_url,
        )
        required = required_fields(spec, kafka, avro.event_schema)
        return avro if not required else replace(avro, required=required)
    unit = kafka.event_time.unit if kafka.event_time is not None else None
    if kafka.format == "protobuf":
        proto = DecoderSpec(
            format="protobuf",
            proto_schema=str(kafka.schema_file),
            message=kafka.message,
            event_time=event,
            event_time_unit=unit,
            schema_registry_url=kafka.schema_registry_url,
        )
        required = required_fields(spec, kafka, proto.event_schema)
        return proto if not required else replace(proto, required=required)
    fields = kafka_fields(spec, kafka)
    return DecoderSpec(
        format="json",
        schema=fields,
        event_time=event,
        event_time_unit=unit,
        required=required_fields(spec, kafka, fields),
    )


def required_fields(spec: InputSpec, kafka: KafkaInput, fields: StructType) -> tuple[str, ...]:
    """The records' fields that must be present and non-null (besides the event time and
    the ``NOT NULL`` fields of ``fields``): those the binding lists (``required``) and the
    job's ``NOT NULL`` columns the records carry under their own name (a column mapped by
    an expression is the expression's business: list its fields in ``required``)."""
    names = fields.fieldNames()
    for name in kafka.required:
        if name not in names:
            raise ConfigError(
                f"inputs.{spec.name}.kafka.required",
                name,
                f"not a field of the records ({', '.join(names)})",
            )
    mapped = set(kafka.columns)
    by_name = [
        f.name
        for f in spec.struct_type().fields
        if not f.nullable and f.name in names and f.name not in mapped
    ]
    return tuple(dict.fromkeys([*kafka.required, *by_name]))


def kafka_options(kafka: KafkaInput) -> dict[str, Any]:
    """Options of ``read_kafka_stream`` for a Kafka input binding."""
    options: dict[str, Any] = {
        "bootstrap": kafka.bootstrap_servers,
        "subscribe": kafka.topic,
        "startingOffsets": kafka.starting_offsets,
        "maxOffsetsPerTrigger": kafka.max_offsets_per_trigger,
        "failOnDataLoss": kafka.fail_on_data_loss,
        "alignPartitions": kafka.align_partitions,
    }
    options.update(kafka.options)
    return options


def check_kafka_reachable(input_name: str, kafka: KafkaInput, timeout: float = 10.0) -> None:
    """Ask the binding's brokers for the topic's metadata before Spark starts, so a wrong or
    unreachable ``bootstrap_servers`` (or refused credentials) is one line naming the key
    in seconds, not a failed query a minute later, and a topic that does not exist is
    refused (:class:`TopicNotFound`, exit 2) naming it, the broker and ``kappa topic
    create``. Uses the binding's client settings."""
    from confluent_kafka import Consumer

    from kappaplus.core.errors import KafkaError, TopicNotFound
    from kappaplus.core.kafka_conf import client_conf
    from kappaplus.core.secrets import mask_url

    key = f"inputs.{input_name}.kafka.bootstrap_servers"
    settings = {**kafka.options, "kafka.bootstrap.servers": kafka.bootstrap_servers}
    conf: dict[str, Any] = dict(client_conf(settings))
    conf.update(
        {
            "group.id": "kappaplus-preflight",
            "enable.auto.commit": False,
            "log_level": 0,
            "error_cb": lambda error: None,  # reported below as one line
        }
    )
    consumer = Consumer(conf)
    try:
        metadata = consumer.list_topics(kafka.topic, timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - KafkaException: transport, auth, timeout
        raise KafkaError(
            f"{key}: cannot reach Kafka at {mask_url(kafka.bootstrap_servers)} within "
            f"{timeout:.0f} s ({_reason(exc)}): is the broker up (`kappa up --print-env` "
            "prints the local one)? are the kafka.* client settings right?"
        ) from None
    finally:
        consumer.close()
    topic = metadata.topics.get(kafka.topic)
    unknown = topic is None or (topic.error is not None and topic.error.code() == 3)
    if not unknown and topic.error is not None:  # authorization, a leader missing...
        raise KafkaError(f"inputs.{input_name}.kafka.topic: {kafka.topic}: {topic.error.str()}")
    if unknown or not topic.partitions:
        # a stream subscribed to it would wait for ever, and exit 0 having read nothing
        broker = mask_url(kafka.bootstrap_servers)
        raise TopicNotFound(
            f"inputs.{input_name}.kafka.topic: topic {kafka.topic!r} does not exist at "
            f"{broker}: create it (kappa topic create {kafka.topic} --bootstrap {broker} "
            "--partitions N) or fix the name"
        )


def check_kafka_inputs(job: Job, resolved: ResolvedConfig) -> None:
    """:func:`check_kafka_reachable` for every input the run reads from Kafka (a stream, the
    Kafka phase of a bootstrap): before Spark starts (``kappa run``) and again before a
    query starts or a target is made (``run_job``)."""
    for spec in job.inputs:
        kafka = resolved.inputs[spec.name].kafka
        if kafka is not None:
            check_kafka_reachable(spec.name, kafka)


def _reason(exc: BaseException) -> str:
    """librdkafka's own words (``Local: Broker transport failure``), else the first line."""
    error: Any = exc.args[0] if exc.args else None
    text = str(error.str()) if hasattr(error, "str") else str(exc).strip()
    return text.splitlines()[0][:160] if text else type(exc).__name__


def read_kafka_records(
    spark: SparkSession, kafka: KafkaInput, drain_file: str | None = None
) -> DataFrame:
    """The raw Kafka records of an input binding (Spark's Kafka schema); ``drain_file``:
    see :mod:`kappaplus.core.draining`."""
    from kappaplus.connectors.kafka import read_kafka_stream

    return read_kafka_stream(spark, **kafka_source_options(kafka, drain_file))


def kafka_source_options(kafka: KafkaInput, drain_file: str | None = None) -> dict[str, Any]:
    """:func:`kafka_options` and, with ``drain_file``, the source's drain option."""
    options = kafka_options(kafka)
    if drain_file is not None:
        options[DRAIN_OPTION] = drain_file
    return options
