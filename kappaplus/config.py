"""Job configuration: bind a job's logical inputs and outputs to Kafka topics and Hive tables.

One TOML file per job. Each logical input binds to a Kafka topic (``stream`` mode) and/or
a Hive table (``backfill`` mode); ``bootstrap`` mode needs both. Each output writes to a
Kafka topic and/or a Hive table; backfill writes go to separate targets that default to
``<table>_backfill`` / ``<topic>_backfill``.

``[mode.backfill]``, ``[mode.stream]`` and ``[mode.bootstrap]`` may override ONLY what the
Kappa+ principles allow to differ between production and backfill: the watermark delay,
job params that are window/slice sizes, the trigger interval, per-trigger budgets and
output targets. Anything else is rejected (principle 2: no other change to the pipeline).

>>> cfg = parse_config('''
... job = "kappaplus.examples.rides:JOB"
... watermark_delay = "10 seconds"
... [params]
... window = "10 seconds"
... [inputs.rides.kafka]
... topic = "rides"
... bootstrap_servers = "localhost:9092"
... [inputs.rides.hive]
... table = "raw.rides"
... event_time_column = "event_time"
... [outputs.counts.hive]
... table = "agg.ride_counts"
... [mode.backfill]
... watermark_delay = "2 hours"
... params = { window = "2 hours" }
... ''')
>>> r = resolve(cfg, "backfill")
>>> r.watermark_delay, r.params["window"], r.outputs["counts"].hive.table
('2 hours', '2 hours', 'agg.ride_counts_backfill')

Every error is a :class:`~kappaplus.errors.ConfigError` naming the key path and the value.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from kappaplus.errors import ConfigError
from kappaplus.kafka_conf import JAVA_ONLY_SETTINGS
from kappaplus.secrets import is_secret
from kappaplus.secrets import redact as redact_secrets
from kappaplus.table import BATCH_COLUMN
from kappaplus.timeutil import parse_duration

if TYPE_CHECKING:
    from kappaplus.jobs import Job

Mode = Literal["stream", "backfill", "bootstrap"]
MODES: tuple[str, ...] = ("stream", "backfill", "bootstrap")
AVAILABLE_NOW = "available-now"


def is_secret_key(key: str) -> bool:
    """Whether a setting carries a secret (its value is never shown): one of
    :data:`kappaplus.secrets.SECRET_SETTINGS`, with any prefix."""
    return is_secret(key)


def _duration(value: Any) -> str:
    if isinstance(value, bool):
        raise ValueError("expected a duration like '2 hours'")
    if isinstance(value, int | float):
        value = f"{value} seconds"
    if not isinstance(value, str):
        raise ValueError("expected a duration like '2 hours'")
    try:
        parse_duration(value)
    except ConfigError as exc:
        raise ValueError(exc.problem) from None
    return value


def _trigger(value: Any) -> str:
    if isinstance(value, str) and value.strip().lower() in ("available-now", "availablenow"):
        return AVAILABLE_NOW
    return _duration(value)


Duration = Annotated[Any, AfterValidator(_duration)]
TriggerInterval = Annotated[Any, AfterValidator(_trigger)]
PositiveInt = Annotated[int, Field(gt=0, strict=True)]

_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_SERVER = re.compile(r"^[A-Za-z0-9.\-_\[\]:]+:\d{1,5}$")
_PARTITION_SEGMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=[^/=]+$")
_STRFTIME = re.compile(r"%[YmdHMjy]")


def _table(value: str) -> str:
    if not _TABLE.match(value):
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


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class DeadLetterTarget(_Model):
    """Where undecodable records go, with their reason: a Kafka topic or a Hive table."""

    topic: TopicName | None = None
    table: TableName | None = None

    @model_validator(mode="after")
    def _one(self) -> DeadLetterTarget:
        if (self.topic is None) == (self.table is None):
            raise ValueError("set exactly one of 'topic' or 'table'")
        return self


class HiveDeadLetters(_Model):
    """Where a backfill puts the rows of its Hive table that no slice can place."""

    table: TableName


class KafkaInput(_Model):
    """A logical input bound to a Kafka topic."""

    topic: TopicName
    bootstrap_servers: Servers
    format: Literal["json", "avro"] = "json"
    schema_file: Path | None = None
    # Avro: writer schemas by the Confluent schema id; schema_file is the reader schema
    schema_registry_url: str | None = Field(None, repr=False)
    starting_offsets: str = "latest"
    max_offsets_per_trigger: PositiveInt | None = Field(None, alias="maxOffsetsPerTrigger")
    fail_on_data_loss: bool = Field(True, alias="failOnDataLoss", strict=True)
    options: dict[str, str] = Field(default_factory=dict)
    dlq: DeadLetterTarget | None = None

    @field_validator("options")
    @classmethod
    def _kafka_prefixed(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not key.startswith("kafka."):
                raise ValueError(f"key {key!r}: Kafka client settings must start with 'kafka.'")
            way_out = JAVA_ONLY_SETTINGS.get(key.lower().removeprefix("kafka."))
            if way_out is not None:
                raise ValueError(f"key {key!r}: a Java client setting; {way_out}")
        return value

    @model_validator(mode="after")
    def _avro_schema(self) -> KafkaInput:
        if self.format == "avro" and self.schema_file is None:
            raise ValueError("format 'avro' needs 'schema_file' (an .avsc file)")
        if self.format != "avro" and self.schema_registry_url is not None:
            raise ValueError("'schema_registry_url' is for format 'avro' only")
        return self

    def __repr_args__(self):  # type: ignore[no-untyped-def]
        for key, value in super().__repr_args__():
            if key == "options":
                value = redact(value)
            yield key, value


def redact(options: Mapping[str, str]) -> dict[str, str]:
    """``options`` with secret values replaced by ``***`` (for logs and errors)."""
    return dict(redact_secrets(options))


class HiveInput(_Model):
    """A logical input bound to a Hive table read as a stream in event-time slices.

    ``partition_format`` maps a time to the table's partition path, e.g.
    ``dt=%Y-%m-%d/hr=%H``; ``partition_time`` says whether partitions hold events by event
    time or by arrival time; with ``arrival`` partitions ``max_lateness`` bounds how long
    after its event time a record can land (which partitions a slice must scan).
    ``max_earliness`` is the clock skew the other way: how far after its arrival partition
    (arrival stamps ahead of event stamps) or before its event partition an event may sit.

    Rows no slice can place (null event time, or outside what their partition admits) fail
    the run (``unplaceable = "fail"``, the default) or go with their reason to the Hive
    dead-letter table ``dlq.table`` (``unplaceable = "dead_letter"``; default table
    ``<table>_dead_letters``), the same table layout as a Kafka input's dead letters.
    """

    table: TableName
    event_time_column: str = Field(min_length=1)
    partition_format: str | None = None
    partition_time: Literal["event", "arrival"] = "event"
    max_lateness: Duration | None = None
    max_earliness: Duration | None = None
    unplaceable: Literal["fail", "dead_letter"] = "fail"
    dlq: HiveDeadLetters | None = None
    start: str | None = None
    end: str | None = None
    max_event_time_per_trigger: Duration | None = Field(None, alias="maxEventTimePerTrigger")
    max_rows_per_trigger: PositiveInt | None = Field(None, alias="maxRowsPerTrigger")
    max_bytes_per_trigger: PositiveInt | None = Field(None, alias="maxBytesPerTrigger")
    target_rows_per_trigger: PositiveInt | None = Field(None, alias="targetRowsPerTrigger")
    target_bytes_per_trigger: PositiveInt | None = Field(None, alias="targetBytesPerTrigger")

    @field_validator("partition_format")
    @classmethod
    def _format(cls, value: str | None) -> str | None:
        if value is None:
            return value
        segments = value.strip("/").split("/")
        for segment in segments:
            if not _PARTITION_SEGMENT.match(segment):
                raise ValueError(f"segment {segment!r} is not 'column=%fmt'")
        if not _STRFTIME.search(value):
            raise ValueError("no time directive (%Y, %m, %d, %H ...) in the partition format")
        return value

    @field_validator("start", "end")
    @classmethod
    def _timestamp(cls, value: str | None) -> str | None:
        from kappaplus.timeutil import parse_timestamp

        if value is not None:
            try:
                parse_timestamp(value)
            except ConfigError as exc:
                raise ValueError(exc.problem) from None
        return value

    @model_validator(mode="after")
    def _arrival(self) -> HiveInput:
        if self.partition_time == "arrival" and self.max_lateness is None:
            raise ValueError("partition_time 'arrival' needs 'max_lateness' (e.g. '2 hours')")
        if self.dlq is not None and self.unplaceable != "dead_letter":
            raise ValueError(
                "'dlq' is only used with unplaceable = \"dead_letter\" (set it, or drop 'dlq')"
            )
        return self

    @property
    def dead_letter_table(self) -> str | None:
        """The table unplaceable rows go to, or None when they fail the run."""
        if self.unplaceable != "dead_letter":
            return None
        return self.dlq.table if self.dlq is not None else f"{self.table}_dead_letters"


def _moment(value: Any) -> str | None:
    from kappaplus.timeutil import parse_timestamp

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


def _optional_duration(value: Any) -> str | None:
    if isinstance(value, str) and value.strip().lower() in ("none", "off", ""):
        return None
    return _duration(value)


DEFAULT_MIN_EVENT_TIME = "1970-01-02T00:00:00"
DEFAULT_MAX_FUTURE = "1 day"


class EventTimeBounds(_Model):
    """``[inputs.<name>.event_time_bounds]``: event times a row may plausibly carry.

    A row outside them (an event dated 9999-12-31 or 1970-01-01) would move the watermark
    to where every later row is late, forever; it goes to the dead letters instead (in
    ``stream`` mode, reason ``event time ... outside ...``), counted as ``out_of_bounds``,
    and the watermark never sees it.

    - ``min``: the earliest valid event time, inclusive (default ``1970-01-02``: epoch-zero
      placeholders are not events); ``"none"`` for no bound.
    - ``max``: the first invalid event time (exclusive); default none.
    - ``max_future``: how far ahead of processing time (the micro-batch's timestamp) an
      event time may be, Kafka inputs only (default ``1 day``; ``"none"`` for no bound).
    """

    min: Annotated[Any, AfterValidator(_moment)] = DEFAULT_MIN_EVENT_TIME
    max: Annotated[Any, AfterValidator(_moment)] = None
    max_future: Annotated[Any, AfterValidator(_optional_duration)] = DEFAULT_MAX_FUTURE

    @model_validator(mode="after")
    def _ordered(self) -> EventTimeBounds:
        from kappaplus.timeutil import parse_timestamp

        low, high = self.min, self.max
        if low is not None and high is not None and parse_timestamp(low) >= parse_timestamp(high):
            raise ValueError(f"min {self.min!r} must be before max {self.max!r}")
        return self


class InputBinding(_Model):
    """One logical input: its Kafka binding, its Hive binding, or both, and the
    :class:`EventTimeBounds` of its rows."""

    kafka: KafkaInput | None = None
    hive: HiveInput | None = None
    event_time_bounds: EventTimeBounds = Field(default_factory=EventTimeBounds)

    @model_validator(mode="after")
    def _some(self) -> InputBinding:
        if self.kafka is None and self.hive is None:
            raise ValueError(
                "bind the input to a Kafka topic ([...kafka]) or a Hive table ([...hive])"
            )
        return self


class KafkaOutput(_Model):
    """An output written to a Kafka topic (backfill writes to ``backfill_topic``)."""

    topic: TopicName
    bootstrap_servers: Servers
    format: Literal["json", "avro"] = "json"
    schema_file: Path | None = None
    backfill_topic: TopicName | None = None
    options: dict[str, str] = Field(default_factory=dict)

    @field_validator("options")
    @classmethod
    def _kafka_prefixed(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not key.startswith("kafka."):
                raise ValueError(f"key {key!r}: Kafka client settings must start with 'kafka.'")
            way_out = JAVA_ONLY_SETTINGS.get(key.lower().removeprefix("kafka."))
            if way_out is not None:
                raise ValueError(f"key {key!r}: a Java client setting; {way_out}")
        return value

    def __repr_args__(self):  # type: ignore[no-untyped-def]
        for key, value in super().__repr_args__():
            if key == "options":
                value = redact(value)
            yield key, value


_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class HiveOutput(_Model):
    """An output written to a Hive table (backfill writes to ``backfill_table``).

    - ``partition_column`` / ``partition_expr``: the date partition (default ``dt``, the
      date of the output's event-time column).
    - ``hour_partition``: when set (e.g. ``"hr"``), the table is also partitioned by the
      hour of the event-time column: ``dt=.../hr=...``.
    - ``visibility``: ``"batch"`` (default) adds a last partition column ``kappa_batch`` so
      a reader sees whole micro-batches only; ``"partition"`` partitions by time only (a
      batch spanning several dates shows one date at a time). See
      :mod:`kappaplus.sinks.hive`.
    """

    table: TableName
    backfill_table: TableName | None = None
    partition_column: str = "dt"
    partition_expr: str | None = None
    hour_partition: str | None = None
    visibility: Literal["batch", "partition"] = "batch"

    @field_validator("partition_column", "hour_partition")
    @classmethod
    def _column(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return value
        if not _IDENTIFIER.match(value):
            raise ValueError("expected a column name (letters, digits, '_')")
        if value.lower() == BATCH_COLUMN:
            raise ValueError(f"{BATCH_COLUMN!r} is reserved for the batch id partition column")
        date_column = info.data.get("partition_column")
        if (
            info.field_name == "hour_partition"
            and isinstance(date_column, str)
            and value.lower() == date_column.lower()
        ):
            raise ValueError(f"{value!r} is the partition_column already")
        return value


class ReconcileKeys(_Model):
    """How ``kappa reconcile`` compares an output's production and backfill rows.

    - ``key``: the columns identifying one window/row (e.g. ``rider_id``, ``session_start``).
    - ``window_end``: the column a row is final by: a production row whose ``window_end``
      is after the production watermark is still open there.
    - ``measure``: an optional count column (e.g. ``event_count``): its difference between
      the outputs is what the late rows must explain.
    """

    key: list[str] = Field(min_length=1)
    window_end: str | None = None
    measure: str | None = None


class OutputBinding(_Model):
    kafka: KafkaOutput | None = None
    hive: HiveOutput | None = None
    reconcile: ReconcileKeys | None = None

    @model_validator(mode="after")
    def _some(self) -> OutputBinding:
        if self.kafka is None and self.hive is None:
            raise ValueError(
                "write the output to a Kafka topic ([...kafka]) or a Hive table ([...hive])"
            )
        return self


# -- per-mode overrides: only what the principles allow ---------------------------------


class _KafkaInputOverride(_Model):
    max_offsets_per_trigger: PositiveInt | None = Field(None, alias="maxOffsetsPerTrigger")


class _HiveInputOverride(_Model):
    max_event_time_per_trigger: Duration | None = Field(None, alias="maxEventTimePerTrigger")
    max_rows_per_trigger: PositiveInt | None = Field(None, alias="maxRowsPerTrigger")
    max_bytes_per_trigger: PositiveInt | None = Field(None, alias="maxBytesPerTrigger")
    target_rows_per_trigger: PositiveInt | None = Field(None, alias="targetRowsPerTrigger")
    target_bytes_per_trigger: PositiveInt | None = Field(None, alias="targetBytesPerTrigger")


class _InputOverride(_Model):
    kafka: _KafkaInputOverride | None = None
    hive: _HiveInputOverride | None = None


class _KafkaOutputOverride(_Model):
    topic: TopicName | None = None


class _HiveOutputOverride(_Model):
    table: TableName | None = None


class _OutputOverride(_Model):
    kafka: _KafkaOutputOverride | None = None
    hive: _HiveOutputOverride | None = None


class ModeOverride(_Model):
    """What one mode may change: see the module docstring."""

    watermark_delay: Duration | None = None
    trigger_interval: TriggerInterval | None = None
    params: dict[str, Duration] = Field(default_factory=dict)
    inputs: dict[str, _InputOverride] = Field(default_factory=dict)
    outputs: dict[str, _OutputOverride] = Field(default_factory=dict)


class JobConfig(_Model):
    """A whole job configuration file, validated."""

    job: str | None = None
    name: str | None = None
    checkpoint_dir: Path | None = None
    watermark_delay: Duration | None = None
    trigger_interval: TriggerInterval = "10 seconds"
    params: dict[str, Any] = Field(default_factory=dict)
    inputs: dict[str, InputBinding]
    outputs: dict[str, OutputBinding]
    mode: dict[Mode, ModeOverride] = Field(default_factory=dict)

    @field_validator("job")
    @classmethod
    def _job_path(cls, value: str | None) -> str | None:
        if value is not None and (
            value.count(":") != 1 or value.startswith(":") or value.endswith(":")
        ):
            raise ValueError("expected a dotted path like 'package.module:JOB'")
        return value

    @field_validator("inputs", "outputs")
    @classmethod
    def _non_empty(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not value:
            raise ValueError("at least one is required")
        return value


# -- loading ----------------------------------------------------------------------------

_FORBIDDEN = (
    "overriding {key!r} per mode is not allowed (principle 2: only the watermark delay, "
    "window/slice-size params, trigger interval, per-trigger budgets and output targets may "
    "differ per mode)"
)


def _path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


def _lookup(data: Any, loc: tuple[int | str, ...]) -> Any:
    for part in loc:
        in_map = isinstance(data, Mapping) and part in data
        in_list = isinstance(data, list) and isinstance(part, int) and part < len(data)
        if in_map or in_list:
            data = data[part]
        else:
            return None
    return data


def _describe(error: Mapping[str, Any], raw: Mapping[str, Any]) -> ConfigError:
    loc = tuple(part for part in error["loc"] if not (isinstance(part, str) and "[" in part))
    path = _path(loc)
    kind = error["type"]
    value = _lookup(raw, loc) if loc else raw
    if loc and isinstance(loc[-1], str) and is_secret_key(loc[-1]):
        value = "***"
    value = _redact_deep(value)
    if kind == "extra_forbidden":
        if loc and loc[0] == "mode":
            return ConfigError(path, value, _FORBIDDEN.format(key=loc[-1]))
        return ConfigError(path, value, "unknown key")
    if kind == "missing":
        return ConfigError(path, None, "required key is missing")
    if kind == "literal_error" and len(loc) == 2 and loc[0] == "mode":
        return ConfigError(path, value, f"unknown mode; expected one of {', '.join(MODES)}")
    message = str(error["msg"])
    message = message.removeprefix("Value error, ")
    return ConfigError(path, value, message)


def _redact_deep(value: Any) -> Any:
    return redact_secrets(value)


def _errors(exc: ValidationError, raw: Mapping[str, Any]) -> ConfigError:
    errors = exc.errors()
    first = _describe(errors[0], raw)
    if len(errors) > 1:
        rest = "; ".join(str(_describe(e, raw)) for e in errors[1:4])
        more = f" (and {len(errors) - 1} more: {rest}{' ...' if len(errors) > 4 else ''})"
        err = ConfigError(first.option, first.value, first.problem + more)
        return err
    return first


def _check_references(config: JobConfig, base: Path | None) -> None:
    for mode, override in config.mode.items():
        for name, inp in override.inputs.items():
            if name not in config.inputs:
                raise ConfigError(
                    f"mode.{mode}.inputs.{name}", None, f"no input {name!r} is defined"
                )
            binding = config.inputs[name]
            if inp.kafka is not None and binding.kafka is None:
                raise ConfigError(
                    f"mode.{mode}.inputs.{name}.kafka", None, f"input {name!r} has no Kafka binding"
                )
            if inp.hive is not None and binding.hive is None:
                raise ConfigError(
                    f"mode.{mode}.inputs.{name}.hive", None, f"input {name!r} has no Hive binding"
                )
        for name, out in override.outputs.items():
            if name not in config.outputs:
                raise ConfigError(
                    f"mode.{mode}.outputs.{name}", None, f"no output {name!r} is defined"
                )
            binding_out = config.outputs[name]
            if out.kafka is not None and binding_out.kafka is None:
                raise ConfigError(
                    f"mode.{mode}.outputs.{name}.kafka",
                    None,
                    f"output {name!r} has no Kafka target",
                )
            if out.hive is not None and binding_out.hive is None:
                raise ConfigError(
                    f"mode.{mode}.outputs.{name}.hive", None, f"output {name!r} has no Hive target"
                )
    if base is None:
        return
    for name, binding in config.inputs.items():
        if binding.kafka is not None and binding.kafka.schema_file is not None:
            schema_file = binding.kafka.schema_file
            if not schema_file.is_file():
                raise ConfigError(
                    f"inputs.{name}.kafka.schema_file", str(schema_file), "file not found"
                )


def _absolutize(raw: dict[str, Any], base: Path) -> None:
    for section in ("inputs", "outputs"):
        entries = raw.get(section)
        if not isinstance(entries, dict):
            continue
        for entry in entries.values():
            kafka = entry.get("kafka") if isinstance(entry, dict) else None
            if isinstance(kafka, dict) and isinstance(kafka.get("schema_file"), str):
                kafka["schema_file"] = str((base / kafka["schema_file"]).resolve())
    if isinstance(raw.get("checkpoint_dir"), str):
        raw["checkpoint_dir"] = str((base / raw["checkpoint_dir"]).resolve())


_REFERENCE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_env(value: str, key: str, env: Mapping[str, str] | None = None) -> str:
    """``${VAR}`` and ``${VAR:-default}`` in a configuration string, from the environment
    (``$$`` is a literal ``$``). An unset variable without a default is an error naming the
    key and the variable.

    >>> expand_env("${HOST:-127.0.0.1}:${PORT}", "bootstrap_servers", {"PORT": "9093"})
    '127.0.0.1:9093'
    >>> expand_env("${PORT}", "bootstrap_servers", {})  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    kappaplus.errors.ConfigError: option 'bootstrap_servers' = '${PORT}': ...
    """
    import os

    environ = os.environ if env is None else env

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, default = match.group(1), match.group(2)
        found = environ.get(name)
        if found is not None and (found != "" or default is None):
            return found
        if default is not None:
            return default
        raise ConfigError(
            key,
            value,
            f"environment variable {name!r} is not set (export it, e.g. the values `kappa up` "
            f"prints, or give a default: ${{{name}:-value}})",
        )

    return _REFERENCE.sub(substitute, value)


def _expand_deep(value: Any, path: tuple[str, ...] = ()) -> Any:
    if isinstance(value, Mapping):
        return {k: _expand_deep(v, (*path, str(k))) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_deep(v, (*path, str(i))) for i, v in enumerate(value)]
    if isinstance(value, str) and "$" in value:
        return expand_env(value, ".".join(path))
    return value


def config_from_dict(raw: Mapping[str, Any], base: Path | None = None) -> JobConfig:
    """Validate a configuration mapping; relative file paths resolve against ``base``.

    String values may refer to environment variables: ``${VAR}`` or ``${VAR:-default}``
    (:func:`expand_env`), so one file follows e.g. the broker address ``kappa up`` prints.
    """
    data = _expand_deep(_deep_copy(raw))
    if base is not None:
        _absolutize(data, base)
    try:
        config = JobConfig.model_validate(data)
    except ValidationError as exc:
        raise _errors(exc, data) from None
    _check_references(config, base)
    return config


def _deep_copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _deep_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_deep_copy(item) for item in value]
    return value


def parse_config(text: str, base: Path | None = None) -> JobConfig:
    """Parse and validate TOML text."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("<toml>", None, f"not valid TOML: {exc}") from None
    return config_from_dict(raw, base)


def load_config(path: str | Path) -> JobConfig:
    """Load and validate a job configuration file.

    >>> load_config("/nonexistent/job.toml")  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    kappaplus.errors.ConfigError: option 'config' = '/nonexistent/job.toml': file not found
    """
    file = Path(path)
    if not file.is_file():
        raise ConfigError("config", str(path), "file not found")
    try:
        raw = tomllib.loads(file.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("config", str(path), f"not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError("config", str(path), f"not UTF-8 text: {exc}") from None
    return config_from_dict(raw, file.resolve().parent)


# -- resolution -------------------------------------------------------------------------


@dataclass(frozen=True)
class ResolvedInput:
    """One input as a mode runs it: the binding(s) that mode reads, overrides applied."""

    name: str
    kafka: KafkaInput | None
    hive: HiveInput | None
    bounds: EventTimeBounds = field(default_factory=EventTimeBounds)


@dataclass(frozen=True)
class ResolvedOutput:
    """One output as a mode writes it: the target(s) of that mode, overrides applied."""

    name: str
    kafka: KafkaOutput | None
    hive: HiveOutput | None


@dataclass(frozen=True)
class ResolvedConfig:
    """The configuration of one mode: what the runtime needs, no per-mode tables left."""

    mode: Mode
    job: str | None
    name: str | None
    checkpoint_dir: Path | None
    watermark_delay: str | None
    trigger_interval: str
    params: Mapping[str, Any]
    inputs: Mapping[str, ResolvedInput]
    outputs: Mapping[str, ResolvedOutput]
    overridden: tuple[str, ...] = field(default=())

    @property
    def trigger_available_now(self) -> bool:
        return self.trigger_interval == AVAILABLE_NOW


def _update(model: BaseModel, changes: Mapping[str, Any]) -> Any:
    values = {key: value for key, value in changes.items() if value is not None}
    return model.model_copy(update=values) if values else model


def resolve(config: JobConfig, mode: str, job: Job | None = None) -> ResolvedConfig:
    """Apply the overrides of ``mode`` (``stream``, ``backfill`` or ``bootstrap``).

    ``stream`` reads Kafka, ``backfill`` reads Hive and writes the backfill targets,
    ``bootstrap`` reads Hive then Kafka and writes the production targets. With ``job``
    the bindings are also checked against the job's declared inputs, outputs and params.
    """
    if mode not in MODES:
        raise ConfigError("mode", mode, f"expected one of {', '.join(MODES)}")
    if job is not None:
        check_job(config, job)
    override = config.mode.get(mode, ModeOverride())  # type: ignore[call-overload]
    changed: list[str] = []

    def note(prefix: str, values: Mapping[str, Any]) -> None:
        changed.extend(f"{prefix}.{key}" for key, value in values.items() if value is not None)

    params = dict(job.params) if job is not None else {}
    params.update(config.params)
    params.update(override.params)
    note(f"mode.{mode}.params", override.params)

    inputs: dict[str, ResolvedInput] = {}
    for name, binding in config.inputs.items():
        patch = override.inputs.get(name, _InputOverride())
        kafka = binding.kafka if mode in ("stream", "bootstrap") else None
        hive = binding.hive if mode in ("backfill", "bootstrap") else None
        if mode in ("stream", "bootstrap") and kafka is None:
            raise ConfigError(
                f"inputs.{name}.kafka", None, f"{mode} mode needs a Kafka topic for input {name!r}"
            )
        if mode in ("backfill", "bootstrap") and hive is None:
            raise ConfigError(
                f"inputs.{name}.hive", None, f"{mode} mode needs a Hive table for input {name!r}"
            )
        if kafka is not None and patch.kafka is not None:
            kafka = _update(kafka, dict(patch.kafka))
            note(f"mode.{mode}.inputs.{name}.kafka", dict(patch.kafka))
        if hive is not None and patch.hive is not None:
            hive = _update(hive, dict(patch.hive))
            note(f"mode.{mode}.inputs.{name}.hive", dict(patch.hive))
        inputs[name] = ResolvedInput(name, kafka, hive, binding.event_time_bounds)

    outputs: dict[str, ResolvedOutput] = {}
    for name, out in config.outputs.items():
        patch_out = override.outputs.get(name, _OutputOverride())
        kafka_out, hive_out = out.kafka, out.hive
        if mode == "backfill":
            if kafka_out is not None:
                kafka_out = _update(
                    kafka_out, {"topic": kafka_out.backfill_topic or f"{kafka_out.topic}_backfill"}
                )
            if hive_out is not None:
                hive_out = _update(
                    hive_out, {"table": hive_out.backfill_table or f"{hive_out.table}_backfill"}
                )
        if kafka_out is not None and patch_out.kafka is not None:
            kafka_out = _update(kafka_out, dict(patch_out.kafka))
            note(f"mode.{mode}.outputs.{name}.kafka", dict(patch_out.kafka))
        if hive_out is not None and patch_out.hive is not None:
            hive_out = _update(hive_out, dict(patch_out.hive))
            note(f"mode.{mode}.outputs.{name}.hive", dict(patch_out.hive))
        outputs[name] = ResolvedOutput(name, kafka_out, hive_out)

    watermark = override.watermark_delay or config.watermark_delay
    if watermark is None and job is not None:
        watermark = job.watermark_delay
    note(
        f"mode.{mode}",
        {
            "watermark_delay": override.watermark_delay,
            "trigger_interval": override.trigger_interval,
        },
    )
    from types import MappingProxyType

    return ResolvedConfig(
        mode=mode,  # type: ignore[arg-type]
        job=config.job,
        name=config.name,
        checkpoint_dir=config.checkpoint_dir,
        watermark_delay=watermark,
        trigger_interval=override.trigger_interval or config.trigger_interval,
        params=MappingProxyType(params),
        inputs=MappingProxyType(inputs),
        outputs=MappingProxyType(outputs),
        overridden=tuple(changed),
    )


def check_job(config: JobConfig, job: Job) -> None:
    """Check the configuration binds exactly the job's inputs/outputs and only its params.

    Per-mode param overrides must name params the job declares as window/slice sizes.
    """
    for name in job.input_names:
        if name not in config.inputs:
            raise ConfigError(
                f"inputs.{name}", None, f"job {job.name!r} reads input {name!r}; bind it"
            )
    for name in config.inputs:
        if name not in job.input_names:
            raise ConfigError(
                f"inputs.{name}",
                None,
                f"job {job.name!r} has no input {name!r} ({job.input_names})",
            )
    for name in job.output_names:
        if name not in config.outputs:
            raise ConfigError(
                f"outputs.{name}", None, f"job {job.name!r} writes output {name!r}; bind it"
            )
    for name in config.outputs:
        if name not in job.output_names:
            raise ConfigError(
                f"outputs.{name}",
                None,
                f"job {job.name!r} has no output {name!r} ({job.output_names})",
            )
    for key, value in config.params.items():
        if key not in job.params:
            raise ConfigError(f"params.{key}", value, f"job {job.name!r} has no such param")
    for mode, override in config.mode.items():
        for key, value in override.params.items():
            if key not in job.window_params:
                raise ConfigError(
                    f"mode.{mode}.params.{key}",
                    value,
                    f"param {key!r} is not a window/slice size of job {job.name!r} "
                    f"(window params: {list(job.window_params)}); only those may differ per mode "
                    "(principle 2)",
                )
    for name, binding in config.inputs.items():
        spec = job.input(name)
        if binding.hive is not None and binding.hive.event_time_column not in spec.field_names():
            raise ConfigError(
                f"inputs.{name}.hive.event_time_column",
                binding.hive.event_time_column,
                f"not a field of input {name!r} ({', '.join(spec.field_names())})",
            )
    for name, out in config.outputs.items():
        hour = out.hive.hour_partition if out.hive is not None else None
        if hour is not None and job.output(name).event_time_column is None:
            raise ConfigError(
                f"outputs.{name}.hive.hour_partition",
                hour,
                f"output {name!r} of job {job.name!r} declares no event_time_column to take "
                "the hour of",
            )
