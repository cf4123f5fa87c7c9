"""The Spark Python data sources kappaplus registers, each joining the reading half (in
:mod:`kappaplus.sources`) and, where there is one, the writing half (in :mod:`kappaplus.sinks`).

This package is where sources and sinks meet, so that neither imports the other.
"""

from __future__ import annotations

import importlib
from typing import Any

# module path, class name: imported on registration, not when this package is imported.
_DATA_SOURCES = [
    ("kappaplus.sources.hive", "HiveStreamDataSource"),
    ("kappaplus.connectors.kafka", "KafkaDataSource"),
    ("kappaplus.sources.hybrid", "HybridDataSource"),
]


def registered_sources() -> list[Any]:
    """The data source classes ``create_session`` registers."""
    return [
        getattr(importlib.import_module(module_name), class_name)
        for module_name, class_name in _DATA_SOURCES
    ]
