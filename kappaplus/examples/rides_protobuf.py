"""The rider events as Protobuf (``rides.proto``, message ``rides.v1.RiderEvent``): what
``kappa demo --format protobuf`` produces, and the binding keys that read it.

>>> from datetime import UTC, datetime
>>> value = to_protobuf({"event_id": "e1", "rider_id": "r1", "event_type": "search",
...                      "area": "soma", "event_time": datetime(2024, 3, 1, tzinfo=UTC)})
>>> value[:8]
b'\\n\\x02e1\\x12\\x02r1'
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kappaplus import ProtobufWriter

RIDES_PROTO = Path(__file__).with_name("rides.proto")
"""The ``.proto`` file shipped with the package."""
MESSAGE = "rides.v1.RiderEvent"
FIELDS = ("event_id", "rider_id", "event_type", "area", "event_time")


def kafka_keys() -> dict[str, str]:
    """The keys of a Kafka binding (input or output) of the rider events as Protobuf."""
    return {"format": "protobuf", "schema_file": str(RIDES_PROTO), "message": MESSAGE}


@cache
def _writer() -> ProtobufWriter:
    from kappaplus import ProtobufWriter

    return ProtobufWriter(RIDES_PROTO, MESSAGE)


def to_protobuf(event: dict[str, Any]) -> bytes:
    """One Kafka record value: the event as a ``rides.v1.RiderEvent`` message."""
    return _writer().encode({k: event[k] for k in FIELDS if k in event})


__all__ = ["FIELDS", "MESSAGE", "RIDES_PROTO", "kafka_keys", "to_protobuf"]
