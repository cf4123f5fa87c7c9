"""Hive: a Hive table read as an unbounded, event-time-ordered stream (its lister, file reader
and the catalog lookup over the lake layer, :mod:`kappaplus.connectors.lake`) and the
exactly-once table sink (:mod:`kappaplus.connectors.hive.sink`).

>>> from kappaplus.connectors.hive import read_hive_stream
>>> df = read_hive_stream(spark, "rides", event_time_column="ts",
...                       watermark_delay="5 min")  # doctest: +SKIP
"""

from kappaplus.connectors.hive.catalog import HiveTable, read_hive_stream, resolve_table
from kappaplus.connectors.hive.datasource import HiveStreamDataSource, HiveStreamReader
from kappaplus.connectors.lake.options import LakeSourceOptions

HiveSourceOptions = LakeSourceOptions
"""The Hive source's options: the lake layer's (the name kept for callers)."""

__all__ = [
    "HiveSourceOptions",
    "HiveStreamDataSource",
    "HiveStreamReader",
    "HiveTable",
    "read_hive_stream",
    "resolve_table",
]
