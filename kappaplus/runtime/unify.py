"""Each binding's mapping (:mod:`kappaplus.mapping`) resolved against its source's schema in
the caller's process: the Hive table's catalog schema (its stored event time delivered as a
timestamp), the Kafka records' ``fields`` (or the job's declared schema). Used by binding
(:mod:`kappaplus.runtime.inputs`), ``kappa check`` and ``kappa run``'s pre-flight."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kappaplus.errors import ConfigError
from kappaplus.mapping import Resolution, job_mapping, resolve_mapping

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from kappaplus.config import HiveInput, KafkaInput
    from kappaplus.jobs import InputSpec


def kafka_event_field(spec: InputSpec, kafka: KafkaInput) -> str:
    """The records' event-time field: ``event_time.column``, else the job's column."""
    stored = kafka.event_time
    return stored.column if stored is not None and stored.column else spec.event_time_column


def kafka_fields(spec: InputSpec, kafka: KafkaInput) -> StructType:
    """The JSON records' schema: ``fields`` when the binding gives it, else the job's."""
    from pyspark.sql.types import DataType, StructType

    if kafka.fields is None:
        return spec.struct_type()
    try:
        parsed = DataType.fromDDL(kafka.fields)
    except Exception as exc:  # noqa: BLE001 - the parser's own message
        raise ConfigError(
            f"inputs.{spec.name}.kafka.fields", kafka.fields, str(exc).splitlines()[0][:200]
        ) from None
    assert isinstance(parsed, StructType)
    return parsed


def kafka_resolution(spark: SparkSession, spec: InputSpec, kafka: KafkaInput) -> Resolution:
    """The Kafka binding's mapping checked against its records' fields."""
    binding = f"inputs.{spec.name}.kafka"
    event = kafka_event_field(spec, kafka)
    explicit = kafka.event_time is not None and kafka.event_time.column is not None
    mapping = job_mapping(spec, binding, kafka.columns, event if explicit else None)
    return resolve_mapping(spark, spec, binding, mapping, kafka_fields(spec, kafka))


def hive_source_schema(spark: SparkSession, hive: HiveInput) -> StructType:
    """The table's columns as its reader delivers them (a stored event time as timestamp)."""
    from pyspark.sql.types import StructField, StructType, TimestampType

    from kappaplus.connectors.hive import resolve_table

    table = resolve_table(spark, hive.table)
    stored = hive.event_time
    converted = stored is not None and (stored.unit is not None or stored.format is not None)
    return StructType(
        [
            StructField(f.name, TimestampType(), True)
            if converted and f.name == hive.event_time_column
            else f
            for f in table.schema.fields
        ]
    )


def hive_resolution(spark: SparkSession, spec: InputSpec, hive: HiveInput) -> Resolution:
    """The Hive binding's mapping checked against the table's schema."""
    binding = f"inputs.{spec.name}.hive"
    mapping = job_mapping(spec, binding, hive.columns, hive.event_time_column)
    return resolve_mapping(spark, spec, binding, mapping, hive_source_schema(spark, hive))


def refuse_mismatches(resolution: Resolution) -> None:
    """:class:`ConfigError` listing the binding's mismatches, one line each (exit 2)."""
    if resolution.mismatches:
        raise ConfigError(
            resolution.binding + ".columns",
            None,
            "\n  ".join(["the source does not fit the job's columns:", *resolution.mismatches]),
        )


def stored_options(hive: HiveInput) -> dict[str, str]:
    """The Hive source options of a stored event time (``eventTimeUnit|Format``)."""
    stored = hive.event_time
    if stored is None:
        return {}
    if stored.unit is not None:
        return {"eventTimeUnit": stored.unit}
    if stored.format is not None:
        return {"eventTimeFormat": stored.format}
    return {}
