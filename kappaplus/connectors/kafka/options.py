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

from kappaplus.core.draining import DRAIN_OPTION
from kappaplus.core.errors import ConfigError
from kappaplus.core.kafka_conf import client_conf
from kappaplus.core.options import (
    BOOL,
    POSITIVE_INT,
    POSITIVE_MICROS,
    Kind,
    Option,
    integer,
    names,
    option,
    options_class,
    read_options,
    to_options,
)

DEFAULT_ALIGNMENT_MAX_SKEW = 24 * 3600 * 1_000_000  # micros: one day

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

    def text(self) -> str:
        """The option text this spec is read from (``startingTimestamp``'s for a timestamp).

        >>> OffsetSpec("offsets", {("a", 0): 23, ("a", 1): -2}).text()
        '{"a": {"0": 23, "1": -2}}'
        """
        if self.kind == "timestamp":
            return str(self.timestamp_ms)
        if self.kind != "offsets":
            return self.kind
        topics: dict[str, dict[str, int]] = {}
        for (topic, partition), offset in sorted(self.per_partition.items()):
            topics.setdefault(topic, {})[str(partition)] = offset
        return json.dumps(topics)


STREAM_START: Literal["latest"] = "latest"
BATCH_START: Literal["earliest"] = "earliest"
"""Where a stream and a batch query start without ``startingOffsets`` (as Spark's source)."""
DEFAULT_POLL_TIMEOUT_MS = 120_000
"""How long a read waits for an offset that should exist (Spark's ``pollTimeoutMs``)."""


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


def _offsets(allow_earliest: bool) -> Kind[OffsetSpec]:
    def parse(text: str, option: str) -> OffsetSpec:
        return parse_offsets_json(option, text, allow_earliest=allow_earliest)

    return Kind("earliest, latest or offsets JSON", parse, OffsetSpec.text)


def _pattern(text: str, option: str) -> str:
    try:
        re.compile(text)
    except re.error as exc:
        raise ConfigError(option, text, f"not a valid regex: {exc}") from None
    return text


def _assign(text: str, option: str) -> tuple[tuple[str, int], ...]:
    try:
        parsed = json.loads(text)
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
        raise ConfigError(option, text, 'expected JSON like {"topicA": [0, 1], "topicB": [2]}')
    return tuple(sorted(set(pairs)))


def _assign_text(pairs: tuple[tuple[str, int], ...]) -> str:
    topics: dict[str, list[int]] = {}
    for topic, partition in pairs:
        topics.setdefault(topic, []).append(partition)
    return json.dumps(topics)


STARTING_OFFSETS = Option("startingOffsets", _offsets(allow_earliest=True))
STARTING_TIMESTAMP = Option("startingTimestamp", integer(0, what="milliseconds since the epoch"))
ENDING_OFFSETS = Option("endingOffsets", _offsets(allow_earliest=False))
"""Options read into :attr:`KafkaSourceOptions.starting` and ``ending``."""
_SUBSCRIPTIONS = ("subscribe", "subscribe_pattern", "assign")


@options_class
class KafkaSourceOptions:
    """Everything the source needs, validated.

    - one of ``subscribe`` (topics), ``subscribe_pattern`` (regex) or ``assign`` (partitions);
    - ``starting`` / ``ending`` offsets, ``max_offsets_per_trigger``, ``min_partitions``;
    - ``fail_on_data_loss``, ``include_headers``, ``poll_timeout_ms`` (bounded wait for an
      offset that should exist), ``client`` (the ``kafka.*`` settings, secrets included: never
      log it, use :func:`kappaplus.core.secrets.redact`).
    """

    client: dict[str, str]
    subscribe: tuple[str, ...] = option(
        "subscribe", names(unique=True, nonempty=True, what="topics"), default=()
    )
    subscribe_pattern: str | None = option(
        "subscribePattern", Kind("a regex", _pattern), default=None
    )
    assign: tuple[tuple[str, int], ...] = option(
        "assign", Kind("partitions JSON", _assign, _assign_text), default=()
    )
    starting: OffsetSpec = field(default_factory=lambda: OffsetSpec(STREAM_START))
    ending: OffsetSpec = field(default_factory=lambda: OffsetSpec("latest"))
    has_ending: bool = False
    max_offsets_per_trigger: int | None = option("maxOffsetsPerTrigger", POSITIVE_INT, default=None)
    min_partitions: int | None = option("minPartitions", POSITIVE_INT, default=None)
    fail_on_data_loss: bool = option("failOnDataLoss", BOOL, default=True)
    include_headers: bool = option("includeHeaders", BOOL, default=False)
    poll_timeout_ms: int = option(
        "kafkaConsumer.pollTimeoutMs", POSITIVE_INT, default=DEFAULT_POLL_TIMEOUT_MS
    )
    drain_file: str | None = option(DRAIN_OPTION, default=None)
    """Once this file exists the source admits no new data (:mod:`kappaplus.core.draining`)."""
    align_partitions: bool = option("alignPartitions", BOOL, default=True)
    """While behind by more than ``maxOffsetsPerTrigger``, end every partition's share of a
    batch at one record time (:mod:`kappaplus.connectors.kafka.alignment`)."""
    alignment_max_skew: int = option(
        "alignmentMaxSkew", POSITIVE_MICROS, default=DEFAULT_ALIGNMENT_MAX_SKEW
    )
    """A record stamped this much after its partition's previous one does not hold the
    partition back in an aligned batch."""

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
        read = read_options(cls, opts, STARTING_OFFSETS, STARTING_TIMESTAMP, ENDING_OFFSETS)
        chosen = [name for name in _SUBSCRIPTIONS if read.given(name)]
        if len(chosen) != 1:
            raise ConfigError(
                "subscribe",
                ", ".join(read.spelled(name) for name in chosen) or None,
                "exactly one of 'subscribe', 'subscribePattern' or 'assign' must be set",
            )
        topics = (read["subscribe"], read["subscribe_pattern"], read["assign"])
        if read.given("starting_timestamp"):
            starting = OffsetSpec("timestamp", timestamp_ms=read["starting_timestamp"])
        elif read.given("starting_offsets"):
            starting = read["starting_offsets"]
        else:
            starting = OffsetSpec(STREAM_START if streaming else BATCH_START)
        _check_offsets_topics(read.spelled("starting_offsets"), starting, *topics)
        has_ending = read.given("ending_offsets")
        ending = read["ending_offsets"] if has_ending else OffsetSpec("latest")
        _check_offsets_topics(read.spelled("ending_offsets"), ending, *topics)
        return cls(
            client=client,
            starting=starting,
            ending=ending,
            has_ending=has_ending,
            **read.init(cls),
        )

    def to_options(self) -> dict[str, str]:
        """The string options :meth:`parse` reads as this object (secrets included)."""
        out = {f"kafka.{key}": value for key, value in self.client.items()}
        declared = to_options(self)
        for name, key in zip(
            _SUBSCRIPTIONS, ("subscribe", "subscribePattern", "assign"), strict=True
        ):
            if not getattr(self, name):
                declared.pop(key, None)
        out.update(declared)
        if self.starting.kind == "timestamp":
            out[STARTING_TIMESTAMP.key] = self.starting.text()
        else:
            out[STARTING_OFFSETS.key] = self.starting.text()
        if self.has_ending:
            out[ENDING_OFFSETS.key] = self.ending.text()
        return out


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
