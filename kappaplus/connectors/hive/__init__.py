"""Hive: the Kappa+ streaming source -- a Hive table read as an unbounded, event-time-ordered
stream, one bounded slice of event time per micro-batch -- and the exactly-once table sink
(:mod:`kappaplus.connectors.hive.sink`).

Driver side: ``options``, ``catalog``, ``layout``, ``files``, ``planner``, ``sizing``,
``manifest``, ``source``. Executor side: ``reader``. The sink: ``sink``.

>>> from kappaplus.connectors.hive import read_hive_stream
>>> df = read_hive_stream(spark, "rides", event_time_column="ts",
...                       watermark_delay="5 min")  # doctest: +SKIP
"""

from kappaplus.connectors.hive.catalog import HiveTable, read_hive_stream, resolve_table
from kappaplus.connectors.hive.options import HiveSourceOptions
from kappaplus.connectors.hive.source import HiveStreamDataSource, HiveStreamReader

__all__ = [
    "HiveSourceOptions",
    "HiveStreamDataSource",
    "HiveStreamReader",
    "HiveTable",
    "read_hive_stream",
    "resolve_table",
]
