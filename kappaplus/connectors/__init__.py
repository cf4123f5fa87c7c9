"""One package per external system, each with its source, reader, options and sink:

- :mod:`kappaplus.connectors.lake`: what every lake format shares: a table's listed data
  files read as an event-time-ordered stream, one slice per micro-batch;
- :mod:`kappaplus.connectors.hive`, :mod:`~kappaplus.connectors.iceberg`,
  :mod:`~kappaplus.connectors.delta`: each format's lister, file reader and reasons the JVM
  reader cannot read a table (``kappa_hive``, ``kappa_iceberg``, ``kappa_delta``), and its
  exactly-once table sink;
- :mod:`kappaplus.connectors.kafka`: Kafka through confluent-kafka (``kappa_kafka``), read
  and write;
- :mod:`kappaplus.connectors.hybrid`: lake history then Kafka (``kappa_hybrid``), composed of
  the two above.

Connectors use only the shared layers (:mod:`kappaplus.core.table`, :mod:`kappaplus.codecs`, ...);
the runtime binds them to jobs. Within a connector the reading modules and the sink never
import each other; they share options and offsets.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# module path, class name: imported on registration, not when this package is imported.
_DATA_SOURCES = [
    ("kappaplus.connectors.hive", "HiveStreamDataSource"),
    ("kappaplus.connectors.kafka", "KafkaDataSource"),
    ("kappaplus.connectors.hybrid", "HybridDataSource"),
]


def registered_sources() -> list[Any]:
    """The data source classes ``create_session`` registers."""
    return [
        getattr(importlib.import_module(module_name), class_name)
        for module_name, class_name in _DATA_SOURCES
    ]


# format -> the module and function giving its LakeFormat (the lake layer imports no format)
_LAKE_FORMATS = {
    "hive": ("kappaplus.connectors.hive.catalog", "hive_format"),
    "iceberg": ("kappaplus.connectors.iceberg.catalog", "iceberg_format"),
    "delta": ("kappaplus.connectors.delta.table", "delta_format"),
}


def read_lake_stream(
    spark: SparkSession,
    lake_format: str,
    table: str,
    *,
    event_time_column: str,
    **options: Any,
) -> DataFrame:
    """Open a lake table of ``lake_format`` (``hive``, ``iceberg`` or ``delta``) as a
    streaming DataFrame, one event-time slice per micro-batch: what ``read_hive_stream``,
    ``read_iceberg_stream`` and ``read_delta_stream`` do, the format given as data. The
    options are theirs (``start``, ``end``, ``max_event_time_per_trigger``,
    ``watermark_delay``, ``reader``, ...; Iceberg's ``catalog`` and ``snapshot``, Delta's
    ``storage_options`` and ``version``).

    >>> df = read_lake_stream(spark, "iceberg", "lake.rides", event_time_column="ts",
    ...                       watermark_delay="10 minutes")      # doctest: +SKIP
    """
    from kappaplus.connectors.lake.stream import open_lake_stream
    from kappaplus.core.errors import ConfigError

    if lake_format not in _LAKE_FORMATS:
        raise ConfigError("lake_format", lake_format, f"expected one of {', '.join(_LAKE_FORMATS)}")
    module, function = _LAKE_FORMATS[lake_format]
    lake = getattr(importlib.import_module(module), function)()
    return open_lake_stream(spark, lake, table, event_time_column=event_time_column, **options).df
