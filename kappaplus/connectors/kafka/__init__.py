"""Kafka, through ``confluent-kafka``: the ``kappa_kafka`` Spark data source.

- :mod:`~kappaplus.connectors.kafka.datasource`: the data source (read and write),
  ``read_kafka_stream``;
- :mod:`~kappaplus.connectors.kafka.options`: typed source options, Spark's option names;
- :mod:`~kappaplus.connectors.kafka.offsets`: driver-side offset arithmetic and discovery;
- :mod:`~kappaplus.connectors.kafka.source`: stream and batch readers (driver side);
- :mod:`~kappaplus.connectors.kafka.reader`: reading one offset range (executor side);
- :mod:`~kappaplus.connectors.kafka.sink`: the writers (idempotent producer).
"""

from kappaplus.connectors.kafka.datasource import (
    SHORT_NAME,
    KafkaDataSource,
    read_kafka,
    read_kafka_stream,
)

__all__ = ["SHORT_NAME", "KafkaDataSource", "read_kafka", "read_kafka_stream"]
