"""An Iceberg or Delta input read in a backfill or a bootstrap: the same steps for both
formats, what they differ in being data (:mod:`kappaplus.runtime.binding.pinned_lakes`); the
rest of an input's binding is :mod:`kappaplus.runtime.binding.inputs`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kappaplus.core.draining import DRAIN_OPTION
from kappaplus.core.errors import ConfigError
from kappaplus.runtime.binding.inputs import (
    _observe_source,
    budget_options,
    count_delivered,
    decoder_spec,
    lake_reads,
    lake_then_kafka,
    observed_lake,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from kappaplus.config import ResolvedInput
    from kappaplus.jobs import InputSpec
    from kappaplus.runtime.binding.pinned_lakes import PinnedBinding, PinnedLake
    from kappaplus.runtime.options import RunOptions


def pinned_lake_options(
    lake_format: PinnedLake, lake: PinnedBinding, run: RunOptions
) -> dict[str, Any]:
    """Keyword arguments of an Iceberg or Delta stream / the lake of a bootstrap (adaptive
    slices unless the binding caps them): the binding's pin, then the slicing."""
    return {
        **{name: getattr(lake, name) for name in lake_format.pin},
        "event_time_column": lake.event_time_column,
        "start": run.start if run.start is not None else lake.start,
        "end": run.end if run.end is not None else lake.end,
        "max_event_time_per_trigger": lake.max_event_time_per_trigger,
        **budget_options(lake),
    }


def pinned_backfill(
    spark: SparkSession,
    spec: InputSpec,
    lake_format: PinnedLake,
    lake: PinnedBinding,
    run: RunOptions,
    watermark_delay: str,
    source_state: str | None,
    drain_file: str | None,
) -> tuple[DataFrame, str]:
    """Backfill from an Iceberg table's snapshot or a Delta table's version, pinned at the
    first start (kept in the run's source state), its columns mapped to the job's by the
    binding (:func:`mapped_lake`)."""
    from kappaplus.runtime.binding.unify import refuse_mismatches, stored_options

    resolution = lake_format.resolution(spark, spec, lake)  # the table's columns -> the job's
    refuse_mismatches(resolution)
    options = pinned_lake_options(lake_format, lake, run)
    options.update(stored_options(lake))
    options["reader"] = lake.reader
    options["evictBetweenSlices"] = lake.evict_between_slices
    options["watermarkAhead"] = lake.watermark_ahead
    # the runtime applies the watermark; the option makes a bounded run end with markers
    options["watermarkDelay"] = watermark_delay
    options["adviceConfigPrefix"] = f"inputs.{spec.name}.{lake_format.key}"
    if source_state is not None:
        options["manifest_dir"] = f"{source_state}/manifests"
    if drain_file is not None:
        options[DRAIN_OPTION] = drain_file
    # read only the columns the mapping reads (conform keeps nothing else)
    options["columns"] = lake_reads(spec, resolution)
    counting = count_delivered(spec, resolution, lake.event_time_column)
    stream = lake_format.open_stream(spark, lake, count_delivered=counting, **options)
    raw = observed_lake(stream, spec, resolution)
    source = f"{lake_format.key} {lake_format.where(lake)}"
    if options["start"] or options["end"]:
        source += f" [{options['start'] or '-'}, {options['end'] or '-'})"
    return raw, source


def pinned_bootstrap(
    spark: SparkSession,
    spec: InputSpec,
    lake_format: PinnedLake,
    binding: ResolvedInput,
    run: RunOptions,
    job_name: str,
    source_state: str | None,
    drain_file: str | None,
    dead_letter_path: str | None = None,
) -> tuple[DataFrame, str]:
    """Bootstrap from an Iceberg table's pinned snapshot or a Delta table's pinned version
    up to the cutoff, then Kafka; ``dead_letter_path``: :func:`bootstrap_dead_letter_path`
    of the run."""
    from kappaplus.connectors.hybrid.options import DEFAULT_LATENESS

    lake, kafka = lake_format.binding(binding), binding.kafka
    assert lake is not None
    if spec.kafka_metadata:
        raise ConfigError(
            f"inputs.{spec.name}",
            "kafka_metadata",
            "bootstrap mode cannot carry Kafka metadata (lake rows have none of their own)",
        )
    if kafka is None:
        raise ConfigError(
            f"inputs.{spec.name}",
            None,
            f"bootstrap mode needs {lake_format.title} and a Kafka topic",
        )
    from kappaplus.runtime.binding.unify import refuse_mismatches

    lake_side = lake_format.resolution(spark, spec, lake)
    refuse_mismatches(lake_side)
    cutoff = run.cutoff if run.cutoff is not None else lake.end
    if cutoff is None:
        raise ConfigError(
            "cutoff",
            None,
            f"--mode bootstrap needs --cutoff (or 'end' in inputs.{spec.name}."
            f"{lake_format.key}): the lake owns event times before it, Kafka the rest",
        )
    table = lake_format.where(lake)
    slicing = pinned_lake_options(lake_format, lake, run)
    options: dict[str, Any] = {
        "table": table,
        "event_time_column": lake.event_time_column,
        "cutoff": cutoff,
        "decoder": decoder_spec(spec, kafka),
        "start": slicing.pop("start"),
        "lateness": run.lateness or lake.max_lateness or DEFAULT_LATENESS,
        "max_event_time_per_trigger": slicing.pop("max_event_time_per_trigger"),
        "watermark_delay": None,
        "dead_letter_path": dead_letter_path,
        "job_name": job_name,
        "bootstrap": kafka.bootstrap_servers,
        "subscribe": kafka.topic,
        "failOnDataLoss": str(kafka.fail_on_data_loss).lower(),
        lake_format.key: {name: slicing.pop(name) for name in lake_format.pin},
    }
    for key in ("event_time_column", "end"):
        slicing.pop(key)
    if kafka.max_offsets_per_trigger is not None:
        options["maxOffsetsPerTrigger"] = kafka.max_offsets_per_trigger
    options.update(kafka.options)
    options.update({f"lake.{k}": v for k, v in slicing.items() if v is not None})
    if source_state is not None:
        options["lake.manifestDir"] = f"{source_state}/manifests"
    if drain_file is not None:
        options[DRAIN_OPTION] = drain_file
    raw = _observe_source(
        lake_then_kafka(spark, spec, lake, lake_side, kafka, options), spec, "source"
    )
    source = (
        f"{lake_format.key} {table} [{options['start'] or '-'}, {cutoff}) then kafka "
        f"{kafka.topic} (dead letters: {options['dead_letter_path']})"
    )
    return raw, source
