"""One package per external system, each with its source, reader, options and sink:

- :mod:`kappaplus.connectors.hive`: a Hive table read as an event-time-ordered stream
  (``kappa_hive``), and the exactly-once Hive table sink;
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
from typing import Any

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
