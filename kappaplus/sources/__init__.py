"""Spark Python data sources: Hive event-time slices, Kafka, and the hybrid lambda source."""

from __future__ import annotations

import importlib
from typing import Any

# module path, class name: imported lazily so a missing optional piece cannot break the rest.
_SOURCES = [
    ("kappaplus.sources.hive", "HiveStreamDataSource"),
    ("kappaplus.sources.kafka", "KafkaDataSource"),
    ("kappaplus.sources.hybrid", "HybridDataSource"),
]


def registered_sources() -> list[Any]:
    """The data source classes that exist in this installation."""
    found = []
    for module_name, class_name in _SOURCES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue
            raise
        found.append(getattr(module, class_name))
    return found
