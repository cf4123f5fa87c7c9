"""Delta: a Delta table's pinned version read as an unbounded, event-time-ordered stream,
one bounded slice of event time per micro-batch, through delta-rs (``deltalake``; no JVM
connector jars). Slices are planned by :mod:`kappaplus.slicing` from the statistics the
Delta log keeps per file.

Driver side: ``table`` (open, pin the version, refuse what cannot be read right),
``lister`` (add actions to files and statistics), ``names`` (registered names), ``source``.
Executor side: ``lister.read_delta_file`` (pyarrow over the data files).

>>> from kappaplus.connectors.delta import read_delta_stream
>>> df = read_delta_stream(spark, "/lake/rides", event_time_column="ts",
...                        watermark_delay="5 min")  # doctest: +SKIP
"""

from kappaplus.connectors.delta.options import DeltaSourceOptions
from kappaplus.connectors.delta.table import (
    PinnedVersion,
    delta_lake_options,
    open_delta,
    pin_version,
    read_delta_stream,
)

__all__ = [
    "DeltaSourceOptions",
    "PinnedVersion",
    "delta_lake_options",
    "open_delta",
    "pin_version",
    "read_delta_stream",
]
