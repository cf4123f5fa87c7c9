"""The Kappa+ Hive streaming source: a Hive table read as an unbounded, event-time-ordered
stream, one bounded slice of event time per micro-batch.

>>> from kappaplus.sources.hive import read_hive_stream
>>> df = read_hive_stream(spark, "rides", event_time_column="ts",
...                       watermark_delay="5 min")  # doctest: +SKIP
"""

from kappaplus.sources.hive.catalog import HiveTable, read_hive_stream, resolve_table
from kappaplus.sources.hive.options import HiveSourceOptions
from kappaplus.sources.hive.source import HiveStreamDataSource, HiveStreamReader

__all__ = [
    "HiveSourceOptions",
    "HiveStreamDataSource",
    "HiveStreamReader",
    "HiveTable",
    "read_hive_stream",
    "resolve_table",
]
