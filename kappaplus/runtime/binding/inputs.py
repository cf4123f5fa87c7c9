"""Bind a job's logical inputs to streaming DataFrames for one mode.

How each mode reads an input is its strategy's (:mod:`kappaplus.runtime.binding.modes`,
with the source options built here: Kafka in ``stream``, the lake over ``[start, end)`` in
``backfill``, the lake then Kafka as one source in ``bootstrap``); what follows is the same
in every mode (:func:`bind_input`): the binding's mapping (:mod:`kappaplus.mapping`) turns
the source's fields into the job's columns, every input is conformed to the job's declared
schema and watermarked (:func:`kappaplus.core.event_time.apply_watermark`). Job code
receives exactly the declared columns and never learns the mode. Dead letters are set
aside on the way (:mod:`kappaplus.runtime.side_outputs`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kappaplus.audit.counts import (
    histogram,
    metric_name,
    row_bucket,
    same_as_lake,
    with_bucket_columns,
)
from kappaplus.core.errors import ConfigError
from kappaplus.core.event_time import MARKER_COLUMN
from kappaplus.runtime.binding.kafka_inputs import decoder_spec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from kappaplus.config import (
        EventTimeBounds,
        HiveInput,
        KafkaInput,
        ResolvedConfig,
        ResolvedInput,
    )
    from kappaplus.config.bindings import MappedLakeInput, SliceBudgets
    from kappaplus.connectors.lake.jvm_reader import CountDelivered, LakeStream
    from kappaplus.core.ahead import AheadRule
    from kappaplus.jobs import InputSpec, Job
    from kappaplus.mapping import Resolution
    from kappaplus.runtime.options import RunOptions
    from kappaplus.runtime.side_outputs.dead_letter_tap import DeadLetterPlan
    from kappaplus.runtime.side_outputs.late_rows import LateRowsPlan

log = logging.getLogger(__name__)


def input_metrics_name(input_name: str) -> str:
    """Name of the observation of an input as the job receives it: its ``rows`` and, for
    the audit, its rows per event-time bucket (``input`` of the stage ``job``)."""
    return metric_name("job", input_name)


@dataclass(frozen=True)
class BoundInput:
    """One logical input as the job sees it, plus where it comes from."""

    name: str
    df: DataFrame
    source: str


def budget_options(lake: SliceBudgets) -> dict[str, Any]:
    """A lake binding's slice budgets as its source's options (None: the source's default,
    adaptive slices of about ``targetRowsPerTrigger`` rows)."""
    return {
        "maxRowsPerTrigger": lake.max_rows_per_trigger,
        "maxBytesPerTrigger": lake.max_bytes_per_trigger,
        "targetRowsPerTrigger": lake.target_rows_per_trigger,
        "targetBytesPerTrigger": lake.target_bytes_per_trigger,
        "targetBatchDuration": lake.target_batch_duration,
        "firstSliceRows": lake.first_slice_rows,
    }


def hive_options(hive: HiveInput, run: RunOptions, watermark_delay: str) -> dict[str, Any]:
    """Keyword arguments of ``read_hive_stream`` for a Hive input binding in a backfill.

    ``watermark_delay`` stays None (the runtime applies the watermark itself, the same
    way as for Kafka) while the ``watermarkDelay`` option makes the source end a
    bounded run with the marker rows that move the watermark to the end bound.
    """
    options: dict[str, Any] = {
        "event_time_column": hive.event_time_column,
        "start": run.start if run.start is not None else hive.start,
        "end": run.end if run.end is not None else hive.end,
        # None: adaptive slices of about targetRowsPerTrigger rows (the source's default)
        "max_event_time_per_trigger": hive.max_event_time_per_trigger,
        "watermark_delay": None,
        "watermarkDelay": watermark_delay,
        **budget_options(hive),
        "partitionTimeKind": hive.partition_time,
        "maxLateness": hive.max_lateness,
        "maxEarliness": hive.max_earliness,
        "reader": hive.reader,
        "evictBetweenSlices": hive.evict_between_slices,
        "watermarkAhead": hive.watermark_ahead,
        "listingInterval": hive.listing_interval,
    }
    if hive.partition_format:
        options["partitionTimeFormat"] = hive.partition_format
    return options


def unplaceable_options(input_name: str, hive: HiveInput, staging: str | None) -> dict[str, Any]:
    """Source options routing the rows no slice can place as the binding says: the errors
    advise the binding's keys; with ``unplaceable = "dead_letter"`` the source stages the
    rows under ``staging`` and the runner moves them into the dead-letter table."""
    options: dict[str, Any] = {"adviceConfigPrefix": f"inputs.{input_name}.hive"}
    if hive.dead_letter_table is not None:
        if staging is None:
            raise ConfigError(
                f"inputs.{input_name}.hive.unplaceable", "dead_letter", "needs a staging directory"
            )
        options["nullEventTimePolicy"] = "deadLetter"
        options["deadLetterPath"] = staging
    return options


def bootstrap_dead_letter_path(mode_dir: Path, input_name: str) -> str:
    """Where a bootstrap stages the Kafka records of ``input_name`` that fail to decode:
    beside its checkpoints, as a backfill's (:func:`dead_letter_staging`). The executors
    write them and the driver publishes them, so the path must be one both see: on a
    cluster the checkpoint's is, the driver's state directory is not."""
    return dead_letter_staging(mode_dir, input_name)


def hybrid_bounds(bounds: EventTimeBounds, ahead: AheadRule | None = None) -> dict[str, Any]:
    """The event-time bounds as keywords of ``read_hybrid_stream``: its Kafka phase makes a
    record outside them (or further ahead of its peers than ``ahead`` allows,
    :func:`~kappaplus.runtime.binding.outliers.ahead_rule`) a dead letter with the reason,
    as a stream does (the lake's rows outside them are left out and counted,
    :func:`~kappaplus.runtime.binding.bounds.drop_out_of_bounds`: the lake keeps them)."""
    return {
        "event_time_min": bounds.min,
        "event_time_max": bounds.max,
        "max_future": None if bounds.max_future is None else str(bounds.max_future),
        "max_ahead": None if ahead is None else ahead.text(),
    }


def hybrid_options(
    spec: InputSpec,
    hive: HiveInput,
    kafka: KafkaInput,
    run: RunOptions,
    job_name: str,
    dead_letter_path: str | None = None,
) -> dict[str, Any]:
    """Keyword arguments of ``read_hybrid_stream`` for a bootstrap of one input;
    ``dead_letter_path``: :func:`bootstrap_dead_letter_path` of the run.

    The lake phase is sliced like a backfill (adaptive slices unless the binding caps them).
    """
    from kappaplus.connectors.hybrid.options import DEFAULT_LATENESS

    cutoff = run.cutoff if run.cutoff is not None else hive.end
    if cutoff is None:
        raise ConfigError(
            "cutoff",
            None,
            f"--mode bootstrap needs --cutoff (or 'end' in inputs.{spec.name}.hive): the lake "
            "owns event times before it, Kafka the rest",
        )
    lateness = run.lateness or hive.max_lateness or DEFAULT_LATENESS
    options: dict[str, Any] = {
        "table": hive.table,
        "event_time_column": hive.event_time_column,
        "cutoff": cutoff,
        "decoder": decoder_spec(spec, kafka),
        "start": run.start if run.start is not None else hive.start,
        "lateness": lateness,
        "max_event_time_per_trigger": hive.max_event_time_per_trigger,  # None: adaptive
        "watermark_delay": None,
        "dead_letter_path": dead_letter_path,
        "job_name": job_name,
        "bootstrap": kafka.bootstrap_servers,
        "subscribe": kafka.topic,
        "failOnDataLoss": str(kafka.fail_on_data_loss).lower(),
        "alignPartitions": str(kafka.align_partitions).lower(),
    }
    if kafka.max_offsets_per_trigger is not None:
        options["maxOffsetsPerTrigger"] = kafka.max_offsets_per_trigger
    options.update(kafka.options)
    lake = {
        "partitionTimeKind": hive.partition_time,
        "maxLateness": hive.max_lateness,
        "maxEarliness": hive.max_earliness,
        **budget_options(hive),
        "partitionTimeFormat": hive.partition_format,
        # the job's columns only: a table archived from the topic (kappa archive) also has
        # the records' Kafka coordinates, which decoded events do not
        "columns": ",".join(spec.field_names()),
    }
    options.update({f"lake.{key}": value for key, value in lake.items() if value is not None})
    return options


def conform(df: DataFrame, spec: InputSpec) -> DataFrame:
    """Exactly the declared columns, cast to the declared types (marker kept if present)."""
    from pyspark.sql import functions as F

    schema = spec.job_struct_type()
    missing = [f.name for f in schema.fields if f.name not in df.columns]
    if missing:
        raise ConfigError(
            f"inputs.{spec.name}",
            missing,
            f"the source lacks declared columns (it has {', '.join(df.columns)})",
        )
    columns = [F.col(f"`{f.name}`").cast(f.dataType).alias(f.name) for f in schema.fields]
    if MARKER_COLUMN in df.columns:
        columns.append(F.col(MARKER_COLUMN))
    return df.select(*columns)


def with_kafka_metadata(decoded: DataFrame) -> DataFrame:
    """The good records' event fields plus the Kafka metadata of each record
    (:data:`~kappaplus.jobs.KAFKA_METADATA_DDL`)."""
    from pyspark.sql import functions as F

    from kappaplus.codecs import ERROR_COL, RECORD_COL, event_field_names

    record = F.col(RECORD_COL)
    return decoded.where(F.col(ERROR_COL).isNull()).select(
        *[F.col(f"`{name}`") for name in event_field_names(decoded)],
        record["topic"].alias("kafka_topic"),
        record["partition"].alias("kafka_partition"),
        record["offset"].alias("kafka_offset"),
        record["timestamp"].alias("kafka_timestamp"),
    )


def check_event_time(spec: InputSpec, hive: HiveInput) -> None:
    """In a bootstrap the Hive binding's event-time column must be the job's (checked
    before Spark); a mapped one is refused with the bootstrap's mapping refusal."""
    if hive.columns or hive.event_time is not None:
        return
    if hive.event_time_column != spec.event_time_column:
        raise ConfigError(
            f"inputs.{spec.name}.hive.event_time_column",
            hive.event_time_column,
            f"must be the job's event-time column {spec.event_time_column!r}: the "
            "watermark is applied on the same column in every mode",
        )


@dataclass(frozen=True)
class InputContext:
    """What binding one input needs, whatever the mode: the session, the job's declared
    input and its resolved binding, the run, and where the run keeps the input's state.

    ``source_state``: the source's state (slice manifests; default under the state
    directory); ``dead_letter_staging``: where a lake source stages the rows it cannot
    place; ``drain_file``: lets the run stop the source at a clean point
    (:mod:`kappaplus.core.draining`); ``late_plans``: the outputs that keep their late rows
    (:mod:`kappaplus.runtime.side_outputs.late_rows`); ``dead_letters``: where a stream's
    failed records go (:mod:`kappaplus.runtime.side_outputs.dead_letter_tap`)."""

    spark: SparkSession
    spec: InputSpec
    binding: ResolvedInput
    run: RunOptions
    watermark_delay: str
    job_name: str = "job"
    dead_letter_staging: str | None = None
    source_state: str | None = None
    drain_file: str | None = None
    late_plans: Sequence[LateRowsPlan] = ()
    dead_letters: DeadLetterPlan | None = None
    ahead: AheadRule | None = None
    """How far ahead of its peers a Kafka record may be (``max_ahead``,
    :func:`~kappaplus.runtime.binding.outliers.ahead_rule`); None: not judged."""
    checkpoints: str | None = None
    """The run's checkpoint directory (its output queries' checkpoints are in it): where a
    task finds its micro-batch's timestamp (:mod:`kappaplus.runtime.binding.batch_time`)."""


class SourceReader(Protocol):
    """How a run mode reads one input (:mod:`kappaplus.runtime.binding.modes`)."""

    def read_input(self, ctx: InputContext) -> tuple[DataFrame, str]:
        """The input's rows in the job's column names, before they are conformed to its
        declared types, and a description of where they come from."""
        ...

    def lake_range(self, ctx: InputContext) -> tuple[int, int] | None:
        """``[start, end)`` holding every event time read, when only the lake is read."""
        ...


def bind_input(ctx: InputContext, reader: SourceReader) -> BoundInput:
    """The watermarked, conformed streaming DataFrame of one input: ``reader`` (the run
    mode) reads it; then, the same in every mode, its rows are conformed to the job's
    declared schema, bounded, tapped for late rows where kept, and watermarked."""
    from kappaplus.core.event_time import apply_watermark
    from kappaplus.runtime.binding.bounds import (
        bounds_metrics_name,
        drop_out_of_bounds,
        range_within_bounds,
    )

    spec, mode = ctx.spec, ctx.run.mode
    raw, source = reader.read_input(ctx)
    conformed = conform(raw, spec)
    # a backfill over [start, end) within the bounds can drop no row: the job's input is
    # then the lake's delivered rows, counted once (one histogram per row less)
    span = reader.lake_range(ctx)
    lake_is_input = span is not None and range_within_bounds(ctx.binding.bounds, *span)
    if mode.reads_lake and not lake_is_input:  # a stream's are dead letters already
        conformed = drop_out_of_bounds(
            conformed, spec.event_time_column, ctx.binding.bounds, bounds_metrics_name(spec.name)
        )
    if ctx.late_plans and mode.keeps_late_rows:
        from kappaplus.runtime.side_outputs.late_rows import tap_input

        conformed = tap_input(conformed, spec.name, spec.event_time_column, list(ctx.late_plans))
    # the job's input counted per bucket for the audit in the same observation as the rows
    # (after the marker filter, so marker rows are not counted): one operator less. The
    # bucket index is a column computed below it (observe_buckets says why).
    buckets: dict[str, str] = {}
    if not lake_is_input:
        index = row_bucket(spec.event_time_column, conformed.columns)
        conformed, buckets = with_bucket_columns(conformed, {"input": index})
    watermarked = apply_watermark(
        conformed,
        spec.event_time_column,
        ctx.watermark_delay,
        observe_as=input_metrics_name(spec.name),
        also=[histogram(buckets["input"]).alias("input") if buckets else same_as_lake("input")],
    )
    if buckets:
        watermarked = watermarked.drop(*buckets.values())
    return BoundInput(spec.name, watermarked, source)


def kafka_is_mapped(spec: InputSpec, kafka: KafkaInput) -> bool:
    """Whether the Kafka binding has a shape of its own (``columns``, ``fields``, an
    ``event_time`` field other than the job's)."""
    stored = kafka.event_time
    own_event = stored is not None and stored.column not in (None, spec.event_time_column)
    return bool(kafka.columns or kafka.fields or own_event)


def lake_reads(spec: InputSpec, resolution: Resolution) -> str:
    """The ``columns`` option of a lake source: the columns the mapping reads, and the
    Kafka metadata columns of a job that receives them (an archive keeps them)."""
    extra = [n for n in spec.job_struct_type().fieldNames() if n not in spec.field_names()]
    return ",".join(dict.fromkeys([*resolution.reads, *extra]))


def count_delivered(
    spec: InputSpec, resolution: Resolution, lake_column: str
) -> CountDelivered | None:
    """What asks a lake's reader to count the lake stage's delivered rows itself (the JVM
    reader: one array increment per row instead of an observed histogram), when the job's
    event time is the lake's event-time column as it is (read by name, no expression, one
    mapping for every date range): what the reader counts per bucket of its own event
    time is then what the lake stage counts of the job's. None otherwise."""
    from kappaplus.audit.counts import BUCKET_SECONDS
    from kappaplus.connectors.lake.jvm_reader import CountDelivered
    from kappaplus.mapping import quoted

    for column in resolution.columns:
        if column.column == spec.event_time_column:
            if column.ranges or column.expression != quoted(lake_column):
                return None
            return CountDelivered(metric_name("lake", spec.name), BUCKET_SECONDS)
    return None


def observed_lake(stream: LakeStream, spec: InputSpec, resolution: Resolution) -> DataFrame:
    """A lake stream's rows as the job's columns (:func:`mapped_lake`), counted per bucket
    for the audit's lake stage unless its reader counts them itself."""
    lake = mapped_lake(stream.df, spec, resolution)
    if stream.counts_delivered:
        log.debug("input %s: the lake's reader counts the rows it delivers", spec.name)
        return lake
    return _observe_source(lake, spec, "lake")


def mapped_lake(df: DataFrame, spec: InputSpec, resolution: Resolution) -> DataFrame:
    """A lake source's rows as the job's columns by its binding's resolved mapping (as they
    are when it reads every column by its own name); the end-of-input markers and the Kafka
    metadata columns (:func:`lake_reads`) kept as they are."""
    from kappaplus.mapping import apply_mapping, is_identity

    mapping = {c.column: c.expression for c in resolution.columns}
    if is_identity(mapping):
        return df
    extra = [n for n in spec.job_struct_type().fieldNames() if n not in mapping]
    return apply_mapping(df, mapping, [*extra, MARKER_COLUMN])


def lake_then_kafka(
    spark: SparkSession,
    spec: InputSpec,
    lake: MappedLakeInput,
    lake_side: Resolution,
    kafka: KafkaInput,
    options: dict[str, Any],
) -> DataFrame:
    """The hybrid source of an Iceberg or Delta bootstrap. When the lake or the topic has
    a shape of its own (the lake binding's ``columns``, ``mappings``, stored event time;
    the Kafka binding's ``columns``, ``fields``, event-time field), each side is read as it
    is and mapped by its own binding's mapping before the watermark
    (:func:`kappaplus.mapping.apply_phase_mappings`): the lake rows by ``lake_side``, the
    Kafka records by the Kafka binding's. The cutoff applies to each side's own event time
    (the lake's reader converts it to the stored unit or format). Else as before: Kafka's
    events conformed to the lake's columns by name."""
    from kappaplus.connectors.hybrid.options import (
        KAFKA_FIELD_PREFIX,
        LAKE_FIELD_PREFIX,
        PHASE_COLUMN,
    )
    from kappaplus.connectors.hybrid.source import PHASE_LAKE, read_hybrid_stream
    from kappaplus.mapping import apply_phase_mappings, is_identity
    from kappaplus.runtime.binding.unify import (
        kafka_resolution,
        refuse_mismatches,
        stored_options,
    )

    lake_mapping = {c.column: c.expression for c in lake_side.columns}
    if not kafka_is_mapped(spec, kafka) and not lake.is_mapped and is_identity(lake_mapping):
        return read_hybrid_stream(spark, **options)
    resolution = kafka_resolution(spark, spec, kafka)
    refuse_mismatches(resolution)
    options.update({f"lake.{key}": value for key, value in stored_options(lake).items()})
    options["lake.columns"] = ",".join(lake_side.reads)
    return apply_phase_mappings(
        read_hybrid_stream(spark, mapped=True, **options),
        spec.struct_type(),
        lake_mapping,
        {c.column: c.expression for c in resolution.columns},
        phase=PHASE_COLUMN,
        lake_phase=PHASE_LAKE,
        lake_prefix=LAKE_FIELD_PREFIX,
        kafka_prefix=KAFKA_FIELD_PREFIX,
    )


def _observe_source(df: DataFrame, spec: InputSpec, stage: str, io: str = "delivered") -> DataFrame:
    """Count the rows of ``df`` per event-time bucket for the audit (markers excluded)."""
    from pyspark.sql import functions as F

    from kappaplus.audit.counts import observe_rows

    real = ~F.coalesce(F.col(MARKER_COLUMN), F.lit(False)) if MARKER_COLUMN in df.columns else None
    return observe_rows(df, stage, spec.name, io, spec.event_time_column, where=real)


def bind_inputs(
    spark: SparkSession,
    job: Job,
    resolved: ResolvedConfig,
    run: RunOptions,
    reader: SourceReader,
    mode_dir: Path | None = None,
    drain_file: str | None = None,
    late_plans: Sequence[LateRowsPlan] = (),
    dead_letters: Mapping[str, DeadLetterPlan] | None = None,
) -> dict[str, BoundInput]:
    """Every input of ``job`` bound for ``run.mode``, read by ``reader`` (the mode's
    strategy; see the module docstring); ``dead_letters``: the stream's dead-letter plans by
    input.

    ``mode_dir``: the run's checkpoint directory. The sources keep their state under it
    (slice manifests, and a lake's staged unplaceable rows: :func:`source_state_dir`,
    :func:`dead_letter_staging`), so ``--fresh`` or a new identity starts all of it over and
    a checkpoint moved elsewhere takes it along.
    """
    from kappaplus.runtime.binding.outliers import ahead_rule, state_ahead_rule

    delay = resolved.watermark_delay or job.watermark_delay
    trigger = run.effective_trigger(resolved.trigger_interval)
    ahead = {
        spec.name: ahead_rule(resolved.inputs[spec.name].bounds, delay, trigger)
        for spec in job.inputs
    }
    if run.mode.reads_kafka:
        for spec in job.inputs:
            state_ahead_rule(spec.name, ahead[spec.name])
    return {
        spec.name: bind_input(
            InputContext(
                spark,
                spec,
                resolved.inputs[spec.name],
                run,
                delay,
                job_name=job.name,
                dead_letter_staging=None
                if mode_dir is None or not run.mode.reads_lake
                else dead_letter_staging(mode_dir, spec.name),
                source_state=None if mode_dir is None else source_state_dir(mode_dir, spec.name),
                drain_file=drain_file,
                late_plans=late_plans,
                dead_letters=(dead_letters or {}).get(spec.name),
                ahead=ahead[spec.name],
                checkpoints=None if mode_dir is None else str(mode_dir),
            ),
            reader,
        )
        for spec in job.inputs
    }


def source_state_dir(mode_dir: Path, input_name: str) -> str:
    """Where the source of ``input_name`` keeps its state (slice manifests) for this run."""
    return str(mode_dir / "_sources" / input_name)


def dead_letter_staging(mode_dir: Path, input_name: str) -> str:
    """Where a backfill stages the unplaceable rows of ``input_name`` before they go to the
    dead-letter table: beside its checkpoints, so ``--fresh`` starts it over too."""
    return str(mode_dir / "_dead_letters" / input_name)
