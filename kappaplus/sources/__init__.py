"""Spark Python data sources: Hive event-time slices, Kafka, and the hybrid lambda source."""

from __future__ import annotations

import importlib
from typing import Any

# module path, class name: imported on registration, not when this package is imported.
_SOURCES = [
    ("kappaplus.sources.hive", "HiveStreamDataSource"),
    ("kappaplus.sources.kafka", "KafkaDataSource"),
    ("kappaplus.sources.hybrid", "HybridDataSource"),
]


def registered_sources() -> list[Any]:
    """The data source classes ``create_session`` registers."""
    return [
        getattr(importlib.import_module(module_name), class_name)
        for module_name, class_name in _SOURCES
    ]
