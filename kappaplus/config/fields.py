"""Field types and validators shared by the job configuration models: durations, triggers,
table, topic and server names, event-time moments, and the strict base model."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
)

from kappaplus.core.errors import ConfigError
from kappaplus.core.kafka_conf import JAVA_ONLY_SETTINGS
from kappaplus.core.secrets import is_secret
from kappaplus.core.table import TABLE_NAME
from kappaplus.core.timeutil import Duration

AVAILABLE_NOW = "available-now"
DEFAULT_TRIGGER_INTERVAL = "10 seconds"
"""A stream's processing-time trigger when the configuration names none."""


def is_secret_key(key: str) -> bool:
    """Whether a setting carries a secret (its value is never shown): one of
    :data:`kappaplus.core.secrets.SECRET_SETTINGS`, with any prefix."""
    return is_secret(key)


def _duration(value: Any) -> Duration:
    """A config duration, parsed once into a :class:`~kappaplus.core.timeutil.Duration`."""
    if isinstance(value, Duration):
        return value
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError("expected a duration like '2 hours'")
    try:
        return Duration.parse(value)
    except ConfigError as exc:
        raise ValueError(exc.problem) from None


def _trigger(value: Any) -> str:
    if isinstance(value, str) and value.strip().lower() in ("available-now", "availablenow"):
        return AVAILABLE_NOW
    return _duration(value)


def _kafka_client_settings(value: dict[str, str]) -> dict[str, str]:
    for key in value:
        if not key.startswith("kafka."):
            raise ValueError(f"key {key!r}: Kafka client settings must start with 'kafka.'")
        way_out = JAVA_ONLY_SETTINGS.get(key.lower().removeprefix("kafka."))
        if way_out is not None:
            raise ValueError(f"key {key!r}: a Java client setting; {way_out}")
    return value


KafkaClientSettings = Annotated[dict[str, str], AfterValidator(_kafka_client_settings)]
"""``options`` of a Kafka binding: librdkafka settings, each prefixed ``kafka.``; Java-only
settings (``sasl.jaas.config``, ...) refused with the librdkafka way to say the same."""

DurationField = Annotated[Duration, PlainValidator(_duration)]
"""A duration in a job config: text as written (what Spark takes), parsed once (``.micros``)."""
TriggerInterval = Annotated[Any, AfterValidator(_trigger)]
PositiveInt = Annotated[int, Field(gt=0, strict=True)]

_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_SERVER = re.compile(r"^[A-Za-z0-9.\-_\[\]:]+:\d{1,5}$")
PARTITION_SEGMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=[^/=]+$")
STRFTIME_FIELD = re.compile(r"%[YmdHMjy]")


def _table(value: str) -> str:
    if not TABLE_NAME.match(value):
        raise ValueError("expected a Hive table name like 'db.table' or 'table'")
    return value


def _topic(value: str) -> str:
    if not _TOPIC.match(value) or value in (".", ".."):
        raise ValueError("expected a Kafka topic name (letters, digits, '.', '_', '-')")
    return value


def _servers(value: str) -> str:
    hosts = [part.strip() for part in value.split(",")]
    if not hosts or not all(_SERVER.match(host) for host in hosts):
        raise ValueError("expected 'host:port[,host:port...]'")
    return value


TableName = Annotated[str, AfterValidator(_table)]
TopicName = Annotated[str, AfterValidator(_topic)]
Servers = Annotated[str, AfterValidator(_servers)]


class StrictModel(BaseModel):
    """Base of every configuration model: unknown keys rejected, frozen. Key names: every
    key is snake_case; a key that is also an option of the source it configures (Spark's or
    a kappaplus source's) is accepted in that source's camelCase spelling too, as an alias
    (``docs/runtime.md``, "Key names"; ``tests/unit/test_config_key_names.py``)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, validate_default=True
    )


def moment_text(value: Any) -> str | None:
    from kappaplus.core.timeutil import parse_timestamp

    if value is None:
        return None
    if not isinstance(value, str):
        value = str(value)  # a TOML date or datetime
    if value.strip().lower() in ("none", "off", ""):
        return None
    try:
        parse_timestamp(value)
    except ConfigError as exc:
        raise ValueError(exc.problem) from None
    return value


def optional_duration(value: Any) -> Duration | None:
    if isinstance(value, str) and value.strip().lower() in ("none", "off", ""):
        return None
    return _duration(value)


def ahead_bound(value: Any) -> Duration | str | None:
    """``max_ahead``: ``"auto"`` (kept as the word), ``"none"``/``"off"`` or a duration."""
    from kappaplus.core.ahead import AUTO

    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    return optional_duration(value)


DEFAULT_MIN_EVENT_TIME = "1970-01-02T00:00:00"
DEFAULT_MAX_FUTURE = "1 day"
