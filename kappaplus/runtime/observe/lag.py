"""How far a query is behind its Kafka input, from Spark's progress of one source.

A Kafka source (``kappa_kafka``) reports, per micro-batch, the offsets it read to
(``endOffset``) and the head of each partition when it planned the batch (``latestOffset``,
its ``reportLatestOffset``); the hybrid source of a bootstrap wraps both in
``{"phase": "kafka", "kafka": ...}`` once it reads Kafka. The difference is the backlog the
batch left: the records behind the head per partition. The lake phase of a bootstrap has no
offsets to compare (its progress is the event-time fraction done).

>>> offsets_behind({"endOffset": '{"t": {"0": 5, "1": 7}}',
...                 "latestOffset": '{"t": {"0": 9, "1": 7}}'})
{('t', '0'): 4, ('t', '1'): 0}
>>> offsets_behind({"endOffset": {"phase": "kafka", "kafka": {"t": {"0": 1}}},
...                 "latestOffset": {"phase": "kafka", "kafka": {"t": {"0": 3}}}})
{('t', '0'): 2}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def _offsets(value: Any) -> Any:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if isinstance(value, Mapping) and value.get("phase") == "kafka":
        return value.get("kafka")
    return value


def offsets_behind(source: Mapping[str, Any]) -> dict[tuple[str, str], int]:
    """``(topic, partition) -> latest - end`` of one source's progress; empty for a
    source without Kafka offsets."""
    latest, end = _offsets(source.get("latestOffset")), _offsets(source.get("endOffset"))
    if not isinstance(latest, Mapping) or not isinstance(end, Mapping):
        return {}
    lag: dict[tuple[str, str], int] = {}
    for topic, partitions in latest.items():
        done = end.get(topic)
        if not isinstance(partitions, Mapping) or not isinstance(done, Mapping):
            continue
        for partition, offset in partitions.items():
            if isinstance(offset, int) and isinstance(done.get(partition), int):
                lag[(str(topic), str(partition))] = max(0, offset - done[partition])
    return lag


def behind_per_topic(sources: list[Any]) -> dict[str, int]:
    """Records behind the head per topic, over every Kafka source of one progress entry."""
    out: dict[str, int] = {}
    for source in sources:
        as_map = source if isinstance(source, Mapping) else _as_mapping(source)
        for (topic, _), lag in offsets_behind(as_map).items():
            out[topic] = out.get(topic, 0) + lag
    return out


def _as_mapping(value: Any) -> Mapping[str, Any]:
    """A progress source given as a Spark ``Row``-like object or JSON-ish value."""
    if hasattr(value, "asDict"):
        return dict(value.asDict())
    try:
        return {key: value[key] for key in ("latestOffset", "endOffset")}
    except (KeyError, TypeError, IndexError):
        return {}
