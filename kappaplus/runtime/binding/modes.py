"""The run modes as strategies: where a run's modes differ, one object per mode says what it
does, so the run loop and the binding never ask which mode they are in.

A mode decides how each input is read (:meth:`RunMode.read_input`), which dead letters the
output queries publish batch by batch (:meth:`RunMode.dead_letter_plans`) and what the run
publishes when it ends (:meth:`RunMode.publish_set_aside`). What a mode implies for every
layer (reads the lake or Kafka, has an end, writes the backfill targets, keeps late rows)
are the properties of :class:`kappaplus.core.modes.Mode`. A test keeps comparisons of a
mode with a name out of every other module (``tests/unit/test_modes_and_durations.py``).

- :class:`StreamMode`: Kafka, decoded, out-of-bounds records and undecodable ones tapped as
  dead letters for the output queries, mapped to the job's columns;
- :class:`BackfillMode`: the lake over ``[start, end)`` as a stream of event-time slices
  (a Hive, Iceberg or Delta binding), unplaceable rows staged and published at the end;
- :class:`BootstrapMode`: the lake up to the cutoff, then Kafka, as one source (the
  lambda source); its dead letters and counts collected at the end.

>>> run_mode("backfill").mode.has_end, type(run_mode(Mode.STREAM)).__name__
(True, 'StreamMode')
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from kappaplus.core.draining import DRAIN_OPTION
from kappaplus.core.errors import ConfigError
from kappaplus.core.modes import Mode
from kappaplus.runtime.binding import inputs as bind
from kappaplus.runtime.binding.kafka_inputs import (
    decoder_spec,
    kafka_source_options,
    read_kafka_records,
)
from kappaplus.runtime.binding.pinned_inputs import pinned_backfill, pinned_bootstrap
from kappaplus.runtime.binding.pinned_lakes import pinned_lake_of

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import DataFrame, SparkSession

    from kappaplus.config import ResolvedConfig
    from kappaplus.jobs import Job
    from kappaplus.runtime.binding.inputs import InputContext
    from kappaplus.runtime.options import RunOptions
    from kappaplus.runtime.side_outputs.dead_letter_tap import DeadLetterPlan

log = logging.getLogger(__name__)


class RunMode(ABC):
    """What one mode does at the points of a run where the modes differ."""

    mode: ClassVar[Mode]

    @abstractmethod
    def read_input(self, ctx: InputContext) -> tuple[DataFrame, str]:
        """One input's rows in the job's column names (before they are conformed to its
        declared types) and a description of where they come from."""

    def dead_letter_plans(
        self, job: Job, resolved: ResolvedConfig, mode_dir: Path
    ) -> dict[str, DeadLetterPlan]:
        """The dead letters the output queries publish batch by batch, by input."""
        return {}

    def lake_range(self, ctx: InputContext) -> tuple[int, int] | None:
        """``[start, end)`` (epoch microseconds) holding every event time this mode's reader
        delivers when it reads only the lake, counted as the ``lake`` stage; None when the
        rows come from elsewhere too or the range is open."""
        return None

    def publish_set_aside(
        self,
        spark: SparkSession,
        job: Job,
        resolved: ResolvedConfig,
        run: RunOptions,
        mode_dir: Path,
    ) -> dict[str, dict[str, Any]]:
        """Publish what the sources set aside during the run (when it ends, whatever its
        status); what was published and counted, by input, for the run record."""
        return {}


class StreamMode(RunMode):
    """Production: each input from its Kafka topic."""

    mode = Mode.STREAM

    def read_input(self, ctx: InputContext) -> tuple[DataFrame, str]:
        from kappaplus.audit.counts import observe_kafka
        from kappaplus.codecs import decode_kafka, good_events
        from kappaplus.mapping import apply_mapping, is_identity
        from kappaplus.runtime.binding.bounds import bounds_metrics_name, mark_out_of_bounds
        from kappaplus.runtime.binding.checked_decode import read_checked_kafka
        from kappaplus.runtime.binding.unify import kafka_resolution, refuse_mismatches
        from kappaplus.runtime.side_outputs.dead_letter_tap import decode_metrics_name

        spec, kafka = ctx.spec, ctx.binding.kafka
        if kafka is None:
            raise ConfigError(f"inputs.{spec.name}.kafka", None, "stream mode needs a topic")
        decoder = decoder_spec(spec, kafka)
        if decoder.json_decoder == "jvm":  # decoded in Spark: the checks' own pass after it
            records = read_kafka_records(ctx.spark, kafka, ctx.drain_file)
            decoded = mark_out_of_bounds(
                decode_kafka(records, decoder, metrics=decode_metrics_name(spec.name)),
                decoder.event_time,
                ctx.binding.bounds,
                bounds_metrics_name(spec.name),
                ctx.ahead,
                tap=ctx.dead_letters,  # the judge's Python pass is the tap as well
            )
        else:  # decoding, bounds, judge and tap in one Python pass, inside the source's read
            decoded = read_checked_kafka(
                ctx.spark,
                kafka_source_options(kafka, ctx.drain_file),
                decoder,
                ctx.binding.bounds,
                ctx.ahead,
                ctx.dead_letters,
                checkpoints=ctx.checkpoints,
                decode_metrics=decode_metrics_name(spec.name),
                bounds_metrics=bounds_metrics_name(spec.name),
            )
        decoded = observe_kafka(decoded, spec.name, decoder.event_time)
        raw = bind.with_kafka_metadata(decoded) if spec.kafka_metadata else good_events(decoded)
        resolution = kafka_resolution(ctx.spark, spec, kafka)  # the records' fields -> the job's
        refuse_mismatches(resolution)
        mapping = {c.column: c.expression for c in resolution.columns}
        if not is_identity(mapping):
            metadata = [c for c in raw.columns if c.startswith("kafka_")]
            raw = apply_mapping(raw, mapping, metadata if spec.kafka_metadata else [])
        return raw, f"kafka {kafka.topic}"

    def dead_letter_plans(
        self, job: Job, resolved: ResolvedConfig, mode_dir: Path
    ) -> dict[str, DeadLetterPlan]:
        from kappaplus.runtime.side_outputs.dead_letter_tap import stream_dead_letter_plans

        return stream_dead_letter_plans(job, resolved, mode_dir)


class BackfillMode(RunMode):
    """History: each input from its lake table, ``[start, end)`` in event-time slices."""

    mode = Mode.BACKFILL

    def lake_range(self, ctx: InputContext) -> tuple[int, int] | None:
        """The run's (else the binding's) ``[start, end)``: the slices lie within it."""
        from kappaplus.core.timeutil import parse_timestamp

        binding = ctx.binding
        lake = binding.delta or binding.iceberg or binding.hive
        if lake is None:
            return None
        start = ctx.run.start if ctx.run.start is not None else lake.start
        end = ctx.run.end if ctx.run.end is not None else lake.end
        if start is None or end is None:
            return None
        return parse_timestamp(start), parse_timestamp(end)

    def read_input(self, ctx: InputContext) -> tuple[DataFrame, str]:
        pinned = pinned_lake_of(ctx.binding)
        if pinned is not None:
            lake_format, lake = pinned
            return pinned_backfill(
                ctx.spark,
                ctx.spec,
                lake_format,
                lake,
                ctx.run,
                ctx.watermark_delay,
                ctx.source_state,
                ctx.drain_file,
            )
        return self._hive(ctx)

    @staticmethod
    def _hive(ctx: InputContext) -> tuple[DataFrame, str]:
        from kappaplus.connectors.hive.catalog import open_hive_stream
        from kappaplus.runtime.binding.unify import (
            hive_resolution,
            refuse_mismatches,
            stored_options,
        )

        spec, hive = ctx.spec, ctx.binding.hive
        if hive is None:
            raise ConfigError(f"inputs.{spec.name}.hive", None, "backfill mode needs a table")
        options = bind.hive_options(hive, ctx.run, ctx.watermark_delay)
        options.update(stored_options(hive))
        # the table's columns -> the job's, and the schemas of the files the run may read
        resolution = hive_resolution(ctx.spark, spec, hive, dict(options))
        refuse_mismatches(resolution)
        options.update(bind.unplaceable_options(spec.name, hive, ctx.dead_letter_staging))
        if ctx.source_state is not None:
            options["manifestDir"] = f"{ctx.source_state}/manifests"
        if ctx.drain_file is not None:
            options[DRAIN_OPTION] = ctx.drain_file
        # read only the columns the mapping reads from the files (conform keeps nothing else)
        options["columns"] = bind.lake_reads(spec, resolution)
        stream = open_hive_stream(
            ctx.spark,
            hive.table,
            count_delivered=bind.count_delivered(spec, resolution, hive.event_time_column),
            **options,
        )
        lake = bind.observed_lake(stream, spec, resolution)
        source = f"hive {hive.table}"
        if options["start"] or options["end"]:
            source += f" [{options['start'] or '-'}, {options['end'] or '-'})"
        return lake, source

    def publish_set_aside(
        self,
        spark: SparkSession,
        job: Job,
        resolved: ResolvedConfig,
        run: RunOptions,
        mode_dir: Path,
    ) -> dict[str, dict[str, Any]]:
        from kappaplus.runtime.side_outputs.staged_dead_letters import publish_run_dead_letters

        return publish_run_dead_letters(spark, job, resolved, run, mode_dir)


class BootstrapMode(RunMode):
    """The lambda source: each input from its lake table up to the cutoff, then from its
    Kafka topic, as one source with one watermark."""

    mode = Mode.BOOTSTRAP

    def read_input(self, ctx: InputContext) -> tuple[DataFrame, str]:
        pinned = pinned_lake_of(ctx.binding)
        if pinned is not None:
            return pinned_bootstrap(
                ctx.spark,
                ctx.spec,
                pinned[0],
                ctx.binding,
                ctx.run,
                ctx.job_name,
                ctx.source_state,
                ctx.drain_file,
                ctx.dead_letter_staging,
            )
        return self._hive(ctx)

    @staticmethod
    def _hive(ctx: InputContext) -> tuple[DataFrame, str]:
        from kappaplus.connectors.hybrid.source import read_hybrid_stream

        spec, hive, kafka = ctx.spec, ctx.binding.hive, ctx.binding.kafka
        if spec.kafka_metadata:
            raise ConfigError(
                f"inputs.{spec.name}",
                "kafka_metadata",
                "bootstrap mode cannot carry Kafka metadata (lake rows have none of their own)",
            )
        if hive is None or kafka is None:
            raise ConfigError(
                f"inputs.{spec.name}", None, "bootstrap mode needs a Hive table and a Kafka topic"
            )
        bind.check_event_time(spec, hive)
        options = bind.hybrid_options(
            spec, hive, kafka, ctx.run, ctx.job_name, ctx.dead_letter_staging
        )
        options.update(bind.hybrid_bounds(ctx.binding.bounds, ctx.ahead))
        if ctx.source_state is not None:
            options["manifestDir"] = f"{ctx.source_state}/manifests"
        if ctx.drain_file is not None:
            options[DRAIN_OPTION] = ctx.drain_file
        mapped = BootstrapMode._mapped(ctx, options)
        if mapped is not None:
            raw = bind._observe_source(mapped, spec, "source")
        else:
            raw = bind._observe_source(read_hybrid_stream(ctx.spark, **options), spec, "source")
        source = (
            f"hive {hive.table} [{options['start'] or '-'}, {options['cutoff']}) then kafka "
            f"{kafka.topic} (dead letters: {options['dead_letter_path']})"
        )
        return raw, source

    @staticmethod
    def _mapped(ctx: InputContext, options: dict[str, Any]) -> DataFrame | None:
        """The bootstrap's rows as the job's columns when the lake or the topic has a shape
        of its own (a ``columns`` mapping, a stored event time, a record schema of its own):
        each binding's mapping checked against its source as in a backfill or a stream, the
        source reading each side as it is, and the lake rows mapped by the Hive binding's
        mapping, the Kafka rows by the Kafka binding's, before the watermark. The cutoff
        applies to each side's own event time (the lake's planner converts it to the stored
        unit or format). None when neither side is mapped."""
        from kappaplus.connectors.hybrid.options import (
            KAFKA_FIELD_PREFIX,
            LAKE_FIELD_PREFIX,
            PHASE_COLUMN,
        )
        from kappaplus.connectors.hybrid.source import PHASE_LAKE, read_hybrid_stream
        from kappaplus.mapping import apply_phase_mappings
        from kappaplus.runtime.binding.unify import (
            hive_resolution,
            kafka_resolution,
            refuse_mismatches,
            stored_options,
        )

        spec, hive, kafka = ctx.spec, ctx.binding.hive, ctx.binding.kafka
        assert hive is not None and kafka is not None
        own_event = kafka.event_time is not None and kafka.event_time.column is not None
        if not (hive.columns or hive.event_time or kafka.columns or kafka.fields or own_event):
            return None
        lake_side = hive_resolution(ctx.spark, spec, hive)
        kafka_side = kafka_resolution(ctx.spark, spec, kafka)
        refuse_mismatches(lake_side)
        refuse_mismatches(kafka_side)
        lake = {c.column: c.expression for c in lake_side.columns}
        topic = {c.column: c.expression for c in kafka_side.columns}
        stored = stored_options(hive)
        options.update({f"lake.{key}": value for key, value in stored.items()})
        options["lake.columns"] = ",".join(lake_side.reads)
        raw = read_hybrid_stream(ctx.spark, mapped=True, **options)
        return apply_phase_mappings(
            raw,
            spec.struct_type(),
            lake,
            topic,
            phase=PHASE_COLUMN,
            lake_phase=PHASE_LAKE,
            lake_prefix=LAKE_FIELD_PREFIX,
            kafka_prefix=KAFKA_FIELD_PREFIX,
        )

    def publish_set_aside(
        self,
        spark: SparkSession,
        job: Job,
        resolved: ResolvedConfig,
        run: RunOptions,
        mode_dir: Path,
    ) -> dict[str, dict[str, Any]]:
        """What the Kafka phase did per input (records read, delivered, skipped as owned by
        the lake, dead letters and where they are), then its dead letters published."""
        from kappaplus.connectors.hybrid.source import hybrid_counts
        from kappaplus.runtime.side_outputs.staged_dead_letters import (
            publish_bootstrap_dead_letters,
        )

        out: dict[str, dict[str, Any]] = {}
        for spec in job.inputs:
            path = bind.bootstrap_dead_letter_path(mode_dir, spec.name)
            try:
                counts: dict[str, Any] = hybrid_counts(path, job.name).as_dict()
            except Exception as exc:  # noqa: BLE001 - counts must not hide the run's outcome
                log.warning("reading the bootstrap counts of %s: %s", spec.name, exc)
                continue
            counts["dead_letter_path"] = path
            out[spec.name] = counts
        published = publish_bootstrap_dead_letters(spark, job, resolved, mode_dir)
        for name, written in published.items():
            out.setdefault(name, {}).update(written)
        return out


_STRATEGIES: dict[Mode, RunMode] = {
    m.mode: m for m in (StreamMode(), BackfillMode(), BootstrapMode())
}


def run_mode(mode: Mode | str) -> RunMode:
    """The strategy of ``mode``."""
    return _STRATEGIES[Mode(mode)]
