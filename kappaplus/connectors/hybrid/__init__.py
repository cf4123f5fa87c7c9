"""The hybrid ("lambda") source ``kappa_hybrid``: lake history up to a cutoff, then Kafka.

- :mod:`~kappaplus.connectors.hybrid.source`: the data source and ``read_hybrid_stream``;
- :mod:`~kappaplus.connectors.hybrid.options`: typed options (``lake.*``, ``kafka.*``, cutoff);
- :mod:`~kappaplus.connectors.hybrid.reader`: the Kafka phase on executors (decode, de-duplicate).

It composes the Hive and Kafka connectors; nothing imports it but the registry.
"""

from kappaplus.connectors.hybrid.source import (
    HybridCounts,
    HybridDataSource,
    HybridSourceOptions,
    HybridStreamReader,
    hybrid_counts,
    hybrid_stream_options,
    read_hybrid_stream,
)

__all__ = [
    "HybridCounts",
    "HybridDataSource",
    "HybridSourceOptions",
    "HybridStreamReader",
    "hybrid_counts",
    "hybrid_stream_options",
    "read_hybrid_stream",
]
