"""Resolving a job configuration for one mode: per-mode overrides applied, backfill targets
defaulted, inputs and outputs checked against the job's declared names."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import (
    BaseModel,
)

from kappaplus.config.bindings import (
    DeltaInput,
    EventTimeBounds,
    HiveInput,
    IcebergInput,
    KafkaInput,
)
from kappaplus.config.fields import (
    AVAILABLE_NOW,
)
from kappaplus.config.model import (
    InputOverride,
    JobConfig,
    ModeOverride,
    OutputOverride,
)
from kappaplus.config.output_bindings import (
    DeltaOutput,
    HiveOutput,
    IcebergOutput,
    KafkaOutput,
    LateRowsTarget,
)
from kappaplus.core.errors import ConfigError
from kappaplus.core.modes import MODES, Mode
from kappaplus.core.timeutil import Duration

if TYPE_CHECKING:
    from kappaplus.jobs import Job


# -- resolution -------------------------------------------------------------------------


@dataclass(frozen=True)
class ResolvedInput:
    """One input as a mode runs it: the binding(s) that mode reads, overrides applied."""

    name: str
    kafka: KafkaInput | None
    hive: HiveInput | None
    bounds: EventTimeBounds = field(default_factory=EventTimeBounds)
    iceberg: IcebergInput | None = None
    delta: DeltaInput | None = None


@dataclass(frozen=True)
class ResolvedOutput:
    """One output as a mode writes it: the target(s) of that mode, overrides applied."""

    name: str
    kafka: KafkaOutput | None
    hive: HiveOutput | None
    late: LateRowsTarget | None = None
    """Stream mode only (:class:`~kappaplus.config.output_bindings.LateRowsTarget`)."""
    iceberg: IcebergOutput | None = None
    delta: DeltaOutput | None = None


@dataclass(frozen=True)
class ResolvedConfig:
    """The configuration of one mode: what the runtime needs, no per-mode tables left."""

    mode: Mode
    job: str | None
    name: str | None
    checkpoint_dir: Path | None
    watermark_delay: Duration | None
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
    run_mode = Mode(mode)
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

    inputs = {
        name: _resolve_input(
            name, binding, override.inputs.get(name, InputOverride()), run_mode, note
        )
        for name, binding in config.inputs.items()
    }
    outputs = {
        name: _resolve_output(
            name, out, override.outputs.get(name, OutputOverride()), run_mode, note
        )
        for name, out in config.outputs.items()
    }

    watermark = override.watermark_delay or config.watermark_delay
    if watermark is None and job is not None:
        watermark = Duration.parse(job.watermark_delay, f"job {job.name}.watermark_delay")
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


def _resolve_input(
    name: str,
    binding: Any,
    patch: InputOverride,
    run_mode: Mode,
    note: Callable[[str, Mapping[str, Any]], None],
) -> ResolvedInput:
    """Input ``name``'s bindings that ``run_mode`` reads, with the mode's overrides."""
    mode = run_mode.value
    kafka = binding.kafka if run_mode.reads_kafka else None
    hive = binding.hive if run_mode.reads_lake else None
    iceberg = binding.iceberg if run_mode.reads_lake else None
    delta = binding.delta if run_mode.reads_lake else None
    if run_mode.reads_kafka and kafka is None:
        raise ConfigError(
            f"inputs.{name}.kafka", None, f"{mode} mode needs a Kafka topic for input {name!r}"
        )
    if run_mode.reads_lake and hive is None and iceberg is None and delta is None:
        raise ConfigError(
            f"inputs.{name}.hive",
            None,
            f"{mode} mode needs a Hive table ([...hive]), an Iceberg table ([...iceberg]) "
            f"or a Delta table ([...delta]) for input {name!r}",
        )
    if kafka is not None and patch.kafka is not None:
        kafka = _update(kafka, dict(patch.kafka))
        note(f"mode.{mode}.inputs.{name}.kafka", dict(patch.kafka))
    if hive is not None and patch.hive is not None:
        hive = _update(hive, dict(patch.hive))
        note(f"mode.{mode}.inputs.{name}.hive", dict(patch.hive))
    return ResolvedInput(name, kafka, hive, binding.event_time_bounds, iceberg=iceberg, delta=delta)


def _resolve_output(
    name: str,
    out: Any,
    patch_out: OutputOverride,
    run_mode: Mode,
    note: Callable[[str, Mapping[str, Any]], None],
) -> ResolvedOutput:
    """Output ``name``'s targets in ``run_mode`` (the backfill targets in a backfill), with
    the mode's overrides."""
    mode = run_mode.value
    kafka_out, hive_out = out.kafka, out.hive
    if run_mode.writes_backfill_targets:
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
    iceberg_out = out.iceberg
    if run_mode.writes_backfill_targets and iceberg_out is not None:
        iceberg_out = _update(
            iceberg_out,
            {"table": iceberg_out.backfill_table or f"{iceberg_out.table}_backfill"},
        )
    delta_out = out.delta
    if run_mode.writes_backfill_targets and delta_out is not None:
        backfill = delta_out.backfill_path or delta_out.path.rstrip("/") + "_backfill"
        delta_out = _update(delta_out, {"path": backfill})
    late = out.late_target() if run_mode.keeps_late_rows else None
    return ResolvedOutput(name, kafka_out, hive_out, late, iceberg_out, delta_out)


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
        lake = binding.hive or binding.iceberg or binding.delta
        if lake is None or lake.event_time is not None or lake.columns:
            continue  # no lake, or a mapped lake binding: its event time is checked on the table
        if lake.event_time_column not in spec.field_names():
            raise ConfigError(
                f"inputs.{name}.{_lake_kind(binding)}.event_time_column",
                lake.event_time_column,
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


def _lake_kind(binding: Any) -> str:
    """The key of an input's lake binding: hive, iceberg or delta."""
    return "hive" if binding.hive else "iceberg" if binding.iceberg else "delta"
