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

Every error is a :class:`~kappaplus.core.errors.ConfigError` naming the key path and the value.
"""

from __future__ import annotations

from kappaplus.config.bindings import (
    DeadLetterQueue,
    DeltaInput,
    EventTimeBounds,
    HiveDeadLetters,
    HiveInput,
    IcebergInput,
    InputBinding,
    KafkaInput,
    redact,
)
from kappaplus.config.fields import (
    AVAILABLE_NOW,
    DEFAULT_MAX_FUTURE,
    DEFAULT_MIN_EVENT_TIME,
    DEFAULT_TRIGGER_INTERVAL,
    DurationField,
    PositiveInt,
    Servers,
    TableName,
    TopicName,
    TriggerInterval,
    is_secret_key,
)
from kappaplus.config.loading import (
    config_from_dict,
    expand_env,
    load_config,
    parse_config,
)
from kappaplus.config.model import (
    JobConfig,
    ModeOverride,
)
from kappaplus.config.output_bindings import (
    DeltaOutput,
    HiveOutput,
    IcebergOutput,
    KafkaOutput,
    LateRowsTarget,
    OutputBinding,
    ReconcileKeys,
)
from kappaplus.config.resolution import (
    ResolvedConfig,
    ResolvedInput,
    ResolvedOutput,
    check_job,
    resolve,
)
from kappaplus.core.modes import MODES, Mode

__all__ = [
    "Mode",
    "MODES",
    "AVAILABLE_NOW",
    "DEFAULT_TRIGGER_INTERVAL",
    "is_secret_key",
    "DurationField",
    "TriggerInterval",
    "PositiveInt",
    "TableName",
    "TopicName",
    "Servers",
    "DEFAULT_MIN_EVENT_TIME",
    "DEFAULT_MAX_FUTURE",
    "DeadLetterQueue",
    "HiveDeadLetters",
    "KafkaInput",
    "redact",
    "HiveInput",
    "DeltaInput",
    "IcebergInput",
    "EventTimeBounds",
    "InputBinding",
    "KafkaOutput",
    "LateRowsTarget",
    "HiveOutput",
    "IcebergOutput",
    "DeltaOutput",
    "ReconcileKeys",
    "OutputBinding",
    "ModeOverride",
    "JobConfig",
    "expand_env",
    "config_from_dict",
    "parse_config",
    "load_config",
    "ResolvedInput",
    "ResolvedOutput",
    "ResolvedConfig",
    "resolve",
    "check_job",
]
