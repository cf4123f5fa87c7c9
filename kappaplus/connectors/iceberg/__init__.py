"""Iceberg: an Iceberg table's pinned snapshot read as an unbounded, event-time-ordered
stream, one bounded slice of event time per micro-batch, through pyiceberg (no JVM
connector jars). Slices are planned by :mod:`kappaplus.slicing` from manifest statistics.

Driver side: ``catalog`` (catalog, snapshot pin), ``lister`` (manifests to files and
statistics; ``deletes`` plans delete files), ``source``. Executor side: ``lister.read_task``
(pyiceberg's Arrow scan, then equality deletes).

>>> from kappaplus.connectors.iceberg import read_iceberg_stream
>>> df = read_iceberg_stream(spark, "db.rides", event_time_column="ts",
...                          watermark_delay="5 min")  # doctest: +SKIP
"""

from kappaplus.connectors.iceberg.catalog import (
    PinnedSnapshot,
    default_catalog,
    load_catalog,
    pin_snapshot,
    read_iceberg_stream,
)
from kappaplus.connectors.iceberg.options import IcebergSourceOptions

__all__ = [
    "IcebergSourceOptions",
    "PinnedSnapshot",
    "default_catalog",
    "load_catalog",
    "pin_snapshot",
    "read_iceberg_stream",
]
