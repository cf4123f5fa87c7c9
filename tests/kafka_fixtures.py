"""Kafka fixtures: one embedded broker for the whole test session, and unique topics.

Loaded by ``tests/conftest.py`` (``pytest_plugins``). Use ``kafka_bootstrap`` for the
``host:port`` string and ``new_topic`` to create a topic no other test touches.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kappaplus.local.broker import EmbeddedBroker, create_topic, free_port

_counter = itertools.count()


def unique_topic_name(prefix: str = "t") -> str:
    """A topic name unique within this session and across sessions."""
    return f"{prefix}-{os.getpid()}-{next(_counter)}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Start one broker for the test session on a free port; yield ``127.0.0.1:PORT``."""
    home = Path(tempfile.mkdtemp(prefix="kappa-broker-"))
    broker = EmbeddedBroker(home, port=free_port())
    bootstrap = broker.start()
    try:
        yield bootstrap
    finally:
        broker.stop()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture()
def new_topic(kafka_bootstrap: str) -> Callable[..., str]:
    """A factory: ``new_topic(partitions=1, prefix="t") -> name`` creates a unique topic."""

    def make(partitions: int = 1, prefix: str = "t") -> str:
        name = unique_topic_name(prefix)
        create_topic(kafka_bootstrap, name, partitions)
        return name

    return make
