"""The job configuration model: bindings, parameters and the per-mode overrides the Kappa+
principles allow (watermark delay, window/slice parameters, trigger, budgets, targets)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import (
    Field,
    field_validator,
)

from kappaplus.config.bindings import (
    InputBinding,
    SliceBudgets,
)
from kappaplus.config.fields import (
    DEFAULT_TRIGGER_INTERVAL,
    DurationField,
    PositiveInt,
    StrictModel,
    TableName,
    TopicName,
    TriggerInterval,
)
from kappaplus.config.output_bindings import (
    OutputBinding,
)
from kappaplus.core.modes import Mode

# -- per-mode overrides: only what the principles allow ---------------------------------


class _KafkaInputOverride(StrictModel):
    max_offsets_per_trigger: PositiveInt | None = Field(None, alias="maxOffsetsPerTrigger")


class _HiveInputOverride(SliceBudgets):
    """A mode's slices of a Hive binding (the budgets only: principle 2)."""


class InputOverride(StrictModel):
    kafka: _KafkaInputOverride | None = None
    hive: _HiveInputOverride | None = None


class _KafkaOutputOverride(StrictModel):
    topic: TopicName | None = None


class _HiveOutputOverride(StrictModel):
    table: TableName | None = None


class OutputOverride(StrictModel):
    kafka: _KafkaOutputOverride | None = None
    hive: _HiveOutputOverride | None = None


class ModeOverride(StrictModel):
    """What one mode may change: see the module docstring."""

    watermark_delay: DurationField | None = None
    trigger_interval: TriggerInterval | None = None
    params: dict[str, DurationField] = Field(default_factory=dict)
    inputs: dict[str, InputOverride] = Field(default_factory=dict)
    outputs: dict[str, OutputOverride] = Field(default_factory=dict)


class JobConfig(StrictModel):
    """A whole job configuration file, validated."""

    job: str | None = None
    name: str | None = None
    checkpoint_dir: Path | None = None
    watermark_delay: DurationField | None = None
    trigger_interval: TriggerInterval = DEFAULT_TRIGGER_INTERVAL
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
