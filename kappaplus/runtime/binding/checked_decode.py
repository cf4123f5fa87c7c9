"""A Kafka input's records in one Python pass: decoded, checked, dead letters staged.

A stream's records need four things done in Python or against values Python produced: the
decoding (:mod:`kappaplus.codecs`), the event-time bounds (:mod:`.bounds`), the
``max_ahead`` judge (:mod:`.outliers`) and the dead-letter tap
(:mod:`kappaplus.runtime.side_outputs.dead_letter_tap`). Each as a pass of its own, a record
crosses between the JVM and Python once per pass, carrying its raw key and value, and each
crossing costs more than the work it carries (``docs/benchmarks.md``, issue 51). Here they
are one ``mapInArrow``, in that order, with the same outcomes and words:

- the bounds are those of :func:`.bounds.out_of_bounds_reason`, compared in Arrow;
  ``max_future`` against the micro-batch's timestamp (the same when the batch is replayed),
  which the pass reads from the query's offset log (:mod:`.batch_time`) or, after any
  source, receives as a column (``current_timestamp()``);
- the judge is :func:`.outliers.judge_table` over the task's records (its peers), which
  skips the records that already failed;
- the tap stages the failed records of the publishing query as before, and every record
  leaves without its raw key and value.

A stream run gives the pass to the ``kappa_kafka`` source (:func:`read_checked_kafka`), which
runs it where it reads the records, so they cross from Python into the JVM once, decoded;
:func:`decode_and_check` runs it after any source of Kafka-shaped records (``mapInArrow``).

The pass keeps every record (failed ones carry their reason) and says which check failed
it in a column the counts read (``dead`` of the decode counts, ``out_of_bounds`` of the
bounds counts, as the separate passes counted them) before it is dropped; ``good_events``
then drops the failed records in the JVM.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pyarrow as pa

from kappaplus.core.timeutil import parse_timestamp
from kappaplus.runtime.binding.bounds import bound_words

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from kappaplus.codecs.spec import DecoderSpec
    from kappaplus.config import EventTimeBounds
    from kappaplus.core.ahead import AheadRule
    from kappaplus.runtime.binding.batch_time import MicroBatchTime
    from kappaplus.runtime.side_outputs.dead_letter_tap import DeadLetterPlan

CHECK_COL = "__kappa_failed_check"
"""Which check failed a record: 0 none (decoded, or failed decoding), 1 its bounds, 2 its
peers (``max_ahead``). Read by the counts, dropped after."""
NOW_COL = "__kappa_batch_time"
"""The micro-batch's timestamp, into the pass (``max_future`` is measured from it)."""
OUT_OF_BOUNDS, FAR_AHEAD = 1, 2
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def shown_seconds(micros: int) -> str:
    """An event time as the bounds' reasons show it (Spark's ``yyyy-MM-dd'T'HH:mm:ss'Z'``).

    >>> shown_seconds(86_400_000_001)
    '1970-01-02T00:00:00Z'
    """
    d = _EPOCH + timedelta(microseconds=micros)
    return f"{d.year:04d}-{d.month:02d}-{d.day:02d}T{d.hour:02d}:{d.minute:02d}:{d.second:02d}Z"


@dataclass(frozen=True)
class BoundsCheck:
    """The bounds of one input in microseconds, with the words of their reasons."""

    column: str
    low: int | None
    high: int | None
    ahead: int | None
    words: tuple[str | None, str | None, str | None]

    @classmethod
    def of(cls, column: str, bounds: EventTimeBounds) -> BoundsCheck | None:
        """None when no bound applies; the words are the JVM check's (:func:`.bound_words`)."""
        low = None if bounds.min is None else parse_timestamp(bounds.min, "min")
        high = None if bounds.max is None else parse_timestamp(bounds.max, "max")
        ahead = None if bounds.max_future is None else bounds.max_future.micros
        if low is None and high is None and ahead is None:
            return None
        return cls(column, low, high, ahead, bound_words(bounds))

    def reasons(self, times: pa.Array, now: int | None) -> list[str | None] | None:
        """Per record, why its event time is out of bounds (None within; a null time is
        within); None when every record is within."""
        import pyarrow.compute as pc

        micros = pc.cast(times, pa.int64())
        outside = []
        if self.low is not None:
            outside.append(pc.less(micros, self.low))
        if self.high is not None:
            outside.append(pc.greater_equal(micros, self.high))
        if self.ahead is not None and now is not None:
            outside.append(pc.greater(micros, now + self.ahead))
        if not outside:
            return None
        anywhere = outside[0]
        for mask in outside[1:]:
            anywhere = pc.or_kleene(anywhere, mask)
        if not pc.any(anywhere).as_py():
            return None
        values = micros.to_pylist()
        reasons: list[str | None] = [None] * len(values)
        for i in pc.indices_nonzero(pc.fill_null(anywhere, False)).to_pylist():
            value = values[i]
            why = self._why(value, now)
            reasons[i] = f"event time {self.column} = {shown_seconds(value)} {why}"
        return reasons

    def _why(self, micros: int, now: int | None) -> str | None:
        if self.low is not None and micros < self.low:
            return self.words[0]
        if self.high is not None and micros >= self.high:
            return self.words[1]
        return self.words[2]


class RecordChecks:
    """The ``mapInArrow`` function: decode, bounds, judge, tap (see the module)."""

    def __init__(
        self,
        spec: DecoderSpec,
        decoded_schema: pa.Schema,
        bounds: BoundsCheck | None,
        ahead: AheadRule | None,
        tap: DeadLetterPlan | None,
        batch_time: MicroBatchTime | None = None,
    ) -> None:
        from kappaplus.runtime.side_outputs.dead_letter_tap import DeadLetterTap

        self.batch_time = batch_time
        self.spec = spec
        self.decoded_schema = decoded_schema
        self.bounds = bounds
        self.judge = None if ahead is None else (spec.event_time, ahead)
        self.tap = DeadLetterTap(tap)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from kappaplus.codecs.decoder import decode_batches

        now: list[int] = []
        if (
            self.batch_time is not None
            and self.bounds is not None
            and self.bounds.ahead is not None
        ):
            from pyspark import TaskContext

            now.append(self.batch_time.micros(TaskContext.get()))

        def inputs() -> Iterator[pa.RecordBatch]:
            for batch in batches:
                if not now and batch.num_rows and NOW_COL in batch.schema.names:
                    stamp = batch.column(NOW_COL)[0].value
                    if stamp is not None:
                        now.append(int(stamp))
                yield batch

        decoded = decode_batches(self.spec, self.decoded_schema, inputs())
        if self.judge is None:
            checked: Iterator[pa.Table] = (
                self._check(pa.Table.from_batches([b]), now) for b in decoded
            )
        else:
            held = list(decoded)  # a record's peers: every record of the task
            if not held:
                return
            checked = iter([self._check(pa.Table.from_batches(held), now)])
        yield from self.tap.batches(checked)

    def _check(self, table: pa.Table, now: list[int]) -> pa.Table:
        import pyarrow.compute as pc

        from kappaplus.codecs import ERROR_COL
        from kappaplus.runtime.binding.outliers import judge_table

        index = table.schema.get_field_index(ERROR_COL)
        errors = table.column(index).combine_chunks()
        failed_by = pa.array([0] * table.num_rows, pa.int8())
        if self.bounds is not None and table.num_rows:
            times = table.column(self.bounds.column).combine_chunks()
            reasons = self.bounds.reasons(times, now[0] if now else None)
            if reasons is not None:
                outside = pc.and_(pc.is_null(errors), pc.is_valid(pa.array(reasons)))
                errors = pc.coalesce(errors, pa.array(reasons, errors.type))
                failed_by = pc.if_else(outside, pa.scalar(OUT_OF_BOUNDS, pa.int8()), failed_by)
                table = table.set_column(index, table.field(index), errors)
        if self.judge is not None and table.num_rows:
            judged = judge_table(table, *self.judge)
            after = judged.column(index).combine_chunks()
            far = pc.and_(pc.is_null(errors), pc.is_valid(after))
            failed_by = pc.if_else(far, pa.scalar(FAR_AHEAD, pa.int8()), failed_by)
            table = judged
        return table.append_column(pa.field(CHECK_COL, pa.int8(), nullable=False), failed_by)


def read_checked_kafka(
    spark: SparkSession,
    options: dict[str, object],
    spec: DecoderSpec,
    bounds: EventTimeBounds,
    ahead: AheadRule | None,
    tap: DeadLetterPlan | None,
    *,
    checkpoints: str | None,
    decode_metrics: str,
    bounds_metrics: str,
) -> DataFrame:
    """A Kafka topic read as a stream (``options`` of
    :func:`~kappaplus.connectors.kafka.read_kafka_stream`) with the pass inside the
    source's read: what :func:`decode_and_check` returns, with one crossing of each record
    from Python into the JVM. ``checkpoints``: the run's directory, where ``max_future``
    finds the micro-batch's timestamp (:class:`.batch_time.MicroBatchTime`); None only when
    no ``max_future`` applies.

    >>> events = good_events(read_checked_kafka(spark, kafka_options(binding), spec, bounds,
    ...     rule, plan, checkpoints=str(mode_dir), decode_metrics="kappa_decode_trips",
    ...     bounds_metrics="kappa_bounds_trips"))  # doctest: +SKIP
    """
    from kappaplus.connectors.kafka import read_kafka_stream
    from kappaplus.runtime.binding.batch_time import MicroBatchTime

    checks = BoundsCheck.of(spec.event_time, bounds)
    needs_time = checks is not None and checks.ahead is not None
    if needs_time and checkpoints is None:
        raise ValueError("read_checked_kafka: max_future needs the run's checkpoints")
    batch_time = MicroBatchTime(checkpoints) if needs_time and checkpoints else None
    record_checks, out_type = _record_checks(spec, checks, ahead, tap, batch_time)
    checked = read_kafka_stream(spark, read_pass=record_checks, schema=out_type, **options)
    return _counted(checked, spec, checks, ahead, decode_metrics, bounds_metrics)


def decode_and_check(
    df: DataFrame,
    spec: DecoderSpec,
    bounds: EventTimeBounds,
    ahead: AheadRule | None,
    tap: DeadLetterPlan | None,
    *,
    decode_metrics: str,
    bounds_metrics: str,
) -> DataFrame:
    """Spark's Kafka records ``df`` decoded with ``spec`` and checked (see the module): a
    :func:`~kappaplus.codecs.decode_kafka` result (every record; the failed ones with their
    reason), counted under ``decode_metrics`` (``records``, ``good``, ``dead``) and, when a
    bound or ``ahead`` applies, ``bounds_metrics`` (``out_of_bounds``), as
    ``decode_kafka`` and :func:`.bounds.mark_out_of_bounds` count them.

    >>> events = good_events(decode_and_check(kafka_df, spec, bounds, rule, plan,
    ...     decode_metrics="kappa_decode_trips", bounds_metrics="kappa_bounds_trips"))
    ... # doctest: +SKIP
    """
    from pyspark.sql import functions as F

    from kappaplus.codecs.frames import check_kafka_schema, kafka_record_columns

    check_kafka_schema(df)
    checks = BoundsCheck.of(spec.event_time, bounds)
    columns = kafka_record_columns()
    if checks is not None and checks.ahead is not None:
        columns.append(F.current_timestamp().alias(NOW_COL))
    record_checks, out_type = _record_checks(spec, checks, ahead, tap, None)
    checked = df.select(*columns).mapInArrow(record_checks, out_type)
    return _counted(checked, spec, checks, ahead, decode_metrics, bounds_metrics)


def _record_checks(
    spec: DecoderSpec,
    checks: BoundsCheck | None,
    ahead: AheadRule | None,
    tap: DeadLetterPlan | None,
    batch_time: MicroBatchTime | None,
) -> tuple[RecordChecks, StructType]:
    """The pass and the Spark schema of what it yields."""
    from pyspark.sql.types import ByteType, StructField, StructType

    from kappaplus.codecs.frames import decoded_arrow_schema

    decoded_type = spec.decoded_schema()
    out_type = StructType([*decoded_type.fields, StructField(CHECK_COL, ByteType(), False)])
    record_checks = RecordChecks(spec, decoded_arrow_schema(spec), checks, ahead, tap, batch_time)
    return record_checks, out_type


def _counted(
    checked: DataFrame,
    spec: DecoderSpec,
    checks: BoundsCheck | None,
    ahead: AheadRule | None,
    decode_metrics: str,
    bounds_metrics: str,
) -> DataFrame:
    """The pass's records with the error column's metadata, counted, without the check."""
    from pyspark.sql import functions as F

    from kappaplus.codecs.schema import ERROR_COL

    metadata = spec.decoded_schema()[ERROR_COL].metadata
    error = F.col(ERROR_COL).alias(ERROR_COL, metadata=metadata)
    checked = checked.select(
        *[error if c == ERROR_COL else F.col(f"`{c}`") for c in checked.columns]
    )
    failed, by = F.col(ERROR_COL).isNotNull(), F.col(CHECK_COL)
    checked = checked.observe(
        decode_metrics,
        F.count(F.lit(1)).alias("records"),
        F.count(F.when(~failed | (by > 0), 1)).alias("good"),
        F.count(F.when(failed & (by == 0), 1)).alias("dead"),
    )
    if checks is not None or ahead is not None:
        checked = checked.observe(bounds_metrics, F.count(F.when(by > 0, 1)).alias("out_of_bounds"))
    return checked.drop(CHECK_COL)
