"""Kafka client settings and option parsing shared by the ``kappa_kafka`` source and sink.

Both take Spark-style options (strings, ``kafka.``-prefixed client settings); this module is
what they share, so that neither imports the other.

>>> client_conf({"kafka.bootstrap.servers": "h:9092", "subscribe": "a"})
{'bootstrap.servers': 'h:9092'}
"""

from __future__ import annotations

from collections.abc import Mapping

from kappaplus.errors import ConfigError
from kappaplus.secrets import MASK, is_secret


def client_conf(
    options: Mapping[str, str], *, forbidden: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The ``kafka.*`` options without their prefix, for the confluent-kafka client."""
    conf: dict[str, str] = {}
    for key, value in options.items():
        if not key.lower().startswith("kafka."):
            continue
        name = key[len("kafka.") :]
        if forbidden and name.lower() in forbidden:
            raise ConfigError(key, MASK if is_secret(name) else value, forbidden[name.lower()])
        conf[name] = value
    if not conf.get("bootstrap.servers", "").strip():
        raise ConfigError(
            "kafka.bootstrap.servers",
            conf.get("bootstrap.servers"),
            "required: a comma-separated list of host:port",
        )
    return conf


def parse_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    lowered = str(raw).strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ConfigError(name, raw, "expected true or false")


def parse_positive_int(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name.lower())
    if raw is None or str(raw).strip() == "":
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ConfigError(name, raw, "expected a positive integer") from None
    if value <= 0:
        raise ConfigError(name, raw, "expected a positive integer")
    return value


def parse_positive_float(options: Mapping[str, str], name: str) -> float | None:
    raw = options.get(name.lower())
    if raw is None or str(raw).strip() == "":
        return None
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise ConfigError(name, raw, "expected a positive number") from None
    if not value > 0 or value == float("inf"):
        raise ConfigError(name, raw, "expected a positive number")
    return value
