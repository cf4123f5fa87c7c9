"""Typed, validated options of the ``kappa_kafka`` source, named as in Spark's Kafka source.

Options arrive as strings (Spark lower-cases their names). They are validated once, here, into
a frozen :class:`KafkaSourceOptions`; every error names the option and the bad value.

>>> opts = KafkaSourceOptions.parse({"kafka.bootstrap.servers": "h:9092", "subscribe": "a,b"})
>>> opts.subscribe, opts.starting.kind
(('a', 'b'), 'latest')
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from kappaplus.draining import DRAIN_OPTION
from kappaplus.errors import ConfigError
from kappaplus.kafka_conf import (
    client_conf,
    parse_bool,
    parse_positive_int,
)

# Spark offsets JSON uses -2 for earliest and -1 for latest.
EARLIEST = -2
LATEST = -1

# Client settings the source controls itself (as Spark's Kafka source does).
_FORBIDDEN_CLIENT_KEYS = {
    "auto.offset.reset": "the source sets it; use 'startingOffsets'",
    "enable.auto.commit": "the source never commits offsets to Kafka; Spark's checkpoint owns them",
    "key.deserializer": "keys are always returned as binary",
    "value.deserializer": "values are always returned as binary",
    "group.instance.id": "the source never joins a consumer group",
}


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or end: ``earliest``, ``latest``, a timestamp, or per-partition offsets.

    ``per_partition`` maps ``(topic, partition)`` to an offset, ``-2`` (earliest) or ``-1``
    (latest); partitions not named default to ``default`` (``earliest`` or ``latest``).
    """

    kind: Literal["earliest", "latest", "offsets", "timestamp"]
    per_partition: dict[tuple[str, int], int] = field(default_factory=dict)
    timestamp_ms: int | None = None


def parse_offsets_json(name: str, raw: str, *, allow_earliest: bool = True) -> OffsetSpec:
    """Parse ``earliest`` / ``latest`` / ``{"topic": {"0": 23, "1": -2}}`` for option ``name``."""
    text = str(raw).strip()
    if text.lower() in ("earliest", "latest"):
        if text.lower() == "earliest" and not allow_earliest:
            raise ConfigError(name, raw, "'earliest' is not allowed here")
        return OffsetSpec(kind=text.lower())  # type: ignore[arg-type]
    try:
        parsed = json.loads(text)
    except ValueError:
        raise ConfigError(
            name, raw, 'expected earliest, latest or JSON like {"topic": {"0": 23, "1": -2}}'
        ) from None
    if not isinstance(parsed, dict) or not parsed:
        raise ConfigError(name, raw, 'expected a JSON object like {"topic": {"0": 23}}')
    offsets: dict[tuple[str, int], int] = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict):
            raise ConfigError(name, raw, f"topic {topic!r} must map partition numbers to offsets")
        for part, offset in parts.items():
            try:
                partition = int(part)
            except (TypeError, ValueError):
                raise ConfigError(
                    name, raw, f"partition {part!r} of topic {topic!r} is not an integer"
                ) from None
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                raise ConfigError(
                    name, raw, f"offset {offset!r} of {topic}-{partition} must be >= 0, -1 or -2"
                )
            if offset == EARLIEST and not allow_earliest:
                raise ConfigError(
                    name, raw, f"-2 (earliest) is not allowed for {topic}-{partition}"
                )
            offsets[(str(topic), partition)] = offset
    return OffsetSpec(kind="offsets", per_partition=offsets)


@dataclass(frozen=True)
class KafkaSourceOptions:
    """Everything the source needs, validated.

    - one of ``subscribe`` (topics), ``subscribe_pattern`` (regex) or ``assign`` (partitions);
    - ``starting`` / ``ending`` offsets, ``max_offsets_per_trigger``, ``min_partitions``;
    - ``fail_on_data_loss``, ``include_headers``, ``poll_timeout_ms`` (bounded wait for an
      offset that should exist), ``client`` (the ``kafka.*`` settings, secrets included: never
      log it, use :func:`kappaplus.secrets.redact`).
    """

    client: dict[str, str]
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: tuple[tuple[str, int], ...] = ()
    starting: OffsetSpec = field(default_factory=lambda: OffsetSpec("latest"))
    ending: OffsetSpec = field(default_factory=lambda: OffsetSpec("latest"))
    has_ending: bool = False
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = 120_000
    drain_file: str | None = None
    """Once this file exists the source admits no new data (:mod:`kappaplus.draining`)."""

    @property
    def bootstrap(self) -> str:
        return self.client["bootstrap.servers"]

    def describe(self) -> str:
        """A one-line, secret-free description for logs and errors."""
        if self.subscribe:
            what = f"subscribe={','.join(self.subscribe)}"
        elif self.subscribe_pattern is not None:
            what = f"subscribePattern={self.subscribe_pattern}"
        else:
            what = "assign=" + ",".join(f"{t}-{p}" for t, p in self.assign)
        return f"kafka {self.bootstrap} {what}"

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool = True) -> KafkaSourceOptions:
        """Validate Spark-style options; ``streaming`` picks the default of startingOffsets."""
        opts = {str(k).lower(): v for k, v in options.items()}
        client = client_conf(opts, forbidden=_FORBIDDEN_CLIENT_KEYS)

        chosen = [n for n in ("subscribe", "subscribePattern", "assign") if opts.get(n.lower())]
        if len(chosen) != 1:
            raise ConfigError(
                "subscribe",
                ", ".join(chosen) or None,
                "exactly one of 'subscribe', 'subscribePattern' or 'assign' must be set",
            )
        subscribe: tuple[str, ...] = ()
        pattern: str | None = None
        assign: tuple[tuple[str, int], ...] = ()
        if chosen[0] == "subscribe":
            raw = opts["subscribe"]
            subscribe = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
            if not subscribe:
                raise ConfigError("subscribe", raw, "expected a comma-separated list of topics")
        elif chosen[0] == "subscribePattern":
            raw = opts["subscribepattern"]
            try:
                re.compile(raw)
            except re.error as exc:
                raise ConfigError("subscribePattern", raw, f"not a valid regex: {exc}") from None
            pattern = raw
        else:
            raw = opts["assign"]
            try:
                parsed = json.loads(raw)
                pairs = [
                    (str(topic), int(p))
                    for topic, parts in parsed.items()
                    for p in parts
                    if not isinstance(p, bool)
                ]
                ok = bool(pairs) and all(
                    isinstance(parts, list) and all(isinstance(p, int) and p >= 0 for p in parts)
                    for parts in parsed.values()
                )
            except (ValueError, AttributeError, TypeError):
                ok = False
            if not ok:
                raise ConfigError(
                    "assign", raw, 'expected JSON like {"topicA": [0, 1], "topicB": [2]}'
                )
            assign = tuple(sorted(set(pairs)))

        default_start = "latest" if streaming else "earliest"
        starting = OffsetSpec(default_start)  # type: ignore[arg-type]
        if opts.get("startingtimestamp") is not None:
            raw_ts = opts["startingtimestamp"]
            try:
                ts = int(str(raw_ts).strip())
            except ValueError:
                raise ConfigError(
                    "startingTimestamp", raw_ts, "expected milliseconds since the epoch"
                ) from None
            if ts < 0:
                raise ConfigError("startingTimestamp", raw_ts, "expected milliseconds >= 0")
            starting = OffsetSpec("timestamp", timestamp_ms=ts)
        elif opts.get("startingoffsets") is not None:
            starting = parse_offsets_json("startingOffsets", opts["startingoffsets"])
        _check_offsets_topics("startingOffsets", starting, subscribe, pattern, assign)

        ending = OffsetSpec("latest")
        has_ending = opts.get("endingoffsets") is not None
        if has_ending:
            ending = parse_offsets_json(
                "endingOffsets", opts["endingoffsets"], allow_earliest=False
            )
            _check_offsets_topics("endingOffsets", ending, subscribe, pattern, assign)

        poll_timeout = parse_positive_int(opts, "kafkaConsumer.pollTimeoutMs") or 120_000
        return cls(
            client=client,
            subscribe=subscribe,
            subscribe_pattern=pattern,
            assign=assign,
            starting=starting,
            ending=ending,
            has_ending=has_ending,
            max_offsets_per_trigger=parse_positive_int(opts, "maxOffsetsPerTrigger"),
            min_partitions=parse_positive_int(opts, "minPartitions"),
            fail_on_data_loss=parse_bool(opts, "failOnDataLoss", True),
            include_headers=parse_bool(opts, "includeHeaders", False),
            poll_timeout_ms=poll_timeout,
            drain_file=opts.get(DRAIN_OPTION.lower()) or None,
        )


def _check_offsets_topics(
    name: str,
    spec: OffsetSpec,
    subscribe: tuple[str, ...],
    pattern: str | None,
    assign: tuple[tuple[str, int], ...],
) -> None:
    """Per-partition offsets may only name what the subscription covers."""
    for topic, partition in spec.per_partition:
        if subscribe and topic not in subscribe:
            raise ConfigError(name, topic, f"topic {topic!r} is not in 'subscribe'")
        if pattern is not None and not re.fullmatch(pattern, topic):
            raise ConfigError(name, topic, f"topic {topic!r} does not match 'subscribePattern'")
        if assign and (topic, partition) not in assign:
            raise ConfigError(
                name, f"{topic}-{partition}", f"partition {topic}-{partition} is not in 'assign'"
            )
