"""Kafka as a Spark Python data source (``kappa_kafka``): streaming and batch read, and write.

Spark's JVM Kafka connector is not needed: this source speaks Kafka through ``confluent-kafka``
and produces the same schema as Spark's built-in Kafka source::

    key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp, timestampType int [, headers array<struct<key:string,value:binary>>]

Options use the names of Spark's Kafka source: ``subscribe`` / ``subscribePattern`` /
``assign``, ``startingOffsets``, ``startingTimestamp``, ``endingOffsets``,
``maxOffsetsPerTrigger``, ``minPartitions``, ``failOnDataLoss``, ``includeHeaders``,
``kafkaConsumer.pollTimeoutMs`` and ``kafka.*`` (passed to the client; secrets are never logged).

Streaming offsets are per partition, ``{"topic": {"0": 123}}``, checkpointed by Spark: with a
checkpoint and an idempotent sink each record is processed exactly once. ``Trigger.AvailableNow``
reads what exists when the query starts and stops. ``endingOffsets`` also bounds a stream.
The readers are :mod:`kappaplus.connectors.kafka.source`, the writers
:mod:`kappaplus.connectors.kafka.sink`.

>>> df = read_kafka_stream(spark, bootstrap="127.0.0.1:9092", subscribe="events",
...                        startingOffsets="earliest")           # doctest: +SKIP
>>> df.writeStream.trigger(availableNow=True).format("console").start()  # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from kappaplus.connectors.kafka.options import KafkaSourceOptions
from kappaplus.connectors.kafka.read_pass import (
    ReadPass,
    pass_options,
    read_pass_of,
    read_pass_schema,
    without_pass_options,
)
from kappaplus.connectors.kafka.reader import SCHEMA_DDL, SCHEMA_DDL_HEADERS
from kappaplus.connectors.kafka.sink import KafkaBatchWriter, KafkaStreamWriter
from kappaplus.connectors.kafka.source import (
    SHORT_NAME,
    KafkaBatchReader,
    KafkaStreamReader,
    spark_options,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class KafkaDataSource(DataSource):
    """``spark.readStream.format("kappa_kafka")`` / ``df.writeStream.format("kappa_kafka")``."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def _source_options(self, streaming: bool) -> KafkaSourceOptions:
        return KafkaSourceOptions.parse(without_pass_options(self.options), streaming=streaming)

    def _read_pass(self) -> ReadPass | None:
        return read_pass_of(self.options)

    def schema(self) -> str | StructType:
        passed = read_pass_schema(self.options)
        if passed is not None:  # the records as the pass yields them
            return passed
        opts = self._source_options(streaming=True)
        return SCHEMA_DDL_HEADERS if opts.include_headers else SCHEMA_DDL

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(self._source_options(streaming=True), self._read_pass())

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaBatchReader(self._source_options(streaming=False), self._read_pass())

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return KafkaStreamWriter(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return KafkaBatchWriter(self.options, schema)


def read_kafka_stream(
    spark: SparkSession,
    *,
    read_pass: ReadPass | None = None,
    schema: StructType | None = None,
    **options: Any,
) -> DataFrame:
    """A streaming DataFrame over Kafka; options are validated here, before Spark sees them.

    ``read_pass`` (with the ``schema`` it yields): a function over each task's record
    batches, run where the source reads them; the DataFrame holds what it yields
    (:mod:`kappaplus.connectors.kafka.read_pass`).

    >>> df = read_kafka_stream(spark, bootstrap="127.0.0.1:9092", subscribe="events",
    ...     startingOffsets="earliest", maxOffsetsPerTrigger=10_000)  # doctest: +SKIP
    """
    opts = spark_options(options)
    KafkaSourceOptions.parse(opts, streaming=True)  # raises ConfigError naming the option
    if read_pass is not None:
        if schema is None:
            raise TypeError("read_kafka_stream: read_pass needs the schema it yields")
        opts.update(pass_options(read_pass, schema))
    spark.dataSource.register(KafkaDataSource)
    return spark.readStream.format(SHORT_NAME).options(**opts).load()


def read_kafka(spark: SparkSession, **options: Any) -> DataFrame:
    """A batch DataFrame of ``[startingOffsets, endingOffsets)`` (default: everything)."""
    opts = spark_options(options)
    KafkaSourceOptions.parse(opts, streaming=False)
    spark.dataSource.register(KafkaDataSource)
    return spark.read.format(SHORT_NAME).options(**opts).load()


__all__ = ["SHORT_NAME", "KafkaDataSource", "read_kafka", "read_kafka_stream"]
