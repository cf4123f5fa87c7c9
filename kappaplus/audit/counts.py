"""Per-bucket row counts observed on the queries a run already executes.

A stage's counts are one ``DataFrame.observe`` whose aggregates are
``histogram_numeric(bucket, BINS)`` over the bucket index of each row (``floor(event
time / bucket)``). Spark's numeric histogram keeps one bin per distinct value until it
holds more than ``BINS`` bins; with fewer distinct buckets in a micro-batch than that the
histogram *is* the exact count per bucket (partial histograms of the same bucket are
summed here). A batch spanning more buckets than that (``BINS`` x 10 minutes is about
14 days of event time per batch by default) is reported as inexact rather than silently
approximated (:class:`StageCounts`). The bucket index is a column computed in a projection
below the observation and dropped above it (:func:`observe_buckets`): Spark would otherwise
evaluate it row by row, interpreted, inside the observation.

Rows without an event time (undecodable Kafka records, null event times) land in the
bucket ``None`` ("no time"), which every audit range includes.

A source that counts its delivered rows itself (the JVM lake reader: one array increment
per row instead of an observed histogram) reports them in its progress entry's
``metrics`` instead (:func:`reported_counts`); they are exact at any span.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: Default bucket: 10 minutes of event time, as Chaperone's.
BUCKET_SECONDS = 600
#: Bins of each histogram; more distinct buckets in one batch make the counts inexact.
BINS = 2048
#: Prefix of every observed audit metric: ``kappa_audit.<stage>.<name>``.
PREFIX = "kappa_audit"
#: The bucket index of rows without any time.
NO_TIME = -1
#: A flag observed beside a stage's other metrics instead of a histogram: this stage's
#: counts are those of the lake stage of the same name (``lake.<name>.delivered``), observed
#: upstream in the same micro-batch, because nothing between the two can drop or add a row.
SAME_AS_LAKE = "same_as_lake"


def metric_name(stage: str, name: str) -> str:
    """Name of the observed metric of ``stage`` for input/output ``name``."""
    return f"{PREFIX}.{stage}.{name}"


def parse_metric_name(metric: str) -> tuple[str, str] | None:
    """``(stage, name)`` of an audit metric name, None for any other metric."""
    parts = metric.split(".", 2)
    if len(parts) != 3 or parts[0] != PREFIX:
        return None
    return parts[1], parts[2]


def bucket_index(column: Column, bucket_seconds: int = BUCKET_SECONDS) -> Column:
    """``floor(unix seconds / bucket)`` of a timestamp column (null stays null)."""
    from pyspark.sql import functions as F

    return F.floor(F.unix_seconds(column) / F.lit(bucket_seconds)).cast("bigint")


def histogram(index: Column | str) -> Column:
    """The per-bucket count aggregate of one stage (nulls are not counted) over a bucket
    index, or the name of a column holding it."""
    from pyspark.sql import functions as F

    if isinstance(index, str):
        index = F.col(f"`{index}`")
    return F.histogram_numeric(index, F.lit(BINS))


def observe_buckets(
    df: DataFrame,
    metric: str,
    columns: Mapping[str, Column],
) -> DataFrame:
    """``df`` observed under ``metric``: one histogram per ``io`` -> bucket-index column.

    Each bucket index is computed in a projection below the observation and dropped above
    it, so the observation's histograms read a column. Spark evaluates an observed
    aggregate's input expression interpreted, row by row (``floor``, ``coalesce``, ``when``
    and the division's checks were a quarter of a backfill's task time in a JFR profile);
    in a projection it is compiled with the rest of the stage.
    """
    indexed, names = with_bucket_columns(df, columns)
    observed = indexed.observe(metric, *[histogram(names[io]).alias(io) for io in columns])
    return observed.drop(*names.values())


def with_bucket_columns(
    df: DataFrame, columns: Mapping[str, Column]
) -> tuple[DataFrame, dict[str, str]]:
    """``df`` with one more column per ``io`` -> bucket index, named so as not to shadow
    any of ``df``'s (``__kappa_bucket_<n>``); those names by ``io``. The caller observes
    :func:`histogram` of them and drops them above the observation."""
    taken = set(df.columns)
    names: dict[str, str] = {}
    for number, io in enumerate(columns):
        name = f"__kappa_bucket_{number}"
        while name in taken:
            name = "_" + name
        names[io] = name
    return df.select("*", *[col.alias(names[io]) for io, col in columns.items()]), names


def row_bucket(
    event_time_column: str | None,
    columns: Sequence[str],
    bucket_seconds: int = BUCKET_SECONDS,
    where: Column | None = None,
) -> Column:
    """The bucket index each row (matching ``where``, else null) is counted under: of
    ``event_time_column``, :data:`NO_TIME` without one."""
    from pyspark.sql import functions as F

    if event_time_column is None or event_time_column not in columns:
        index = F.lit(NO_TIME).cast("bigint")
    else:
        index = F.coalesce(
            bucket_index(F.col(f"`{event_time_column}`"), bucket_seconds), F.lit(NO_TIME)
        )
    if where is not None:
        index = F.when(where, index)
    return index


def observe_rows(
    df: DataFrame,
    stage: str,
    name: str,
    io: str,
    event_time_column: str | None,
    bucket_seconds: int = BUCKET_SECONDS,
    where: Column | None = None,
) -> DataFrame:
    """Count the rows of ``df`` (those matching ``where``) per bucket of
    ``event_time_column`` as ``stage.io``."""
    index = row_bucket(event_time_column, df.columns, bucket_seconds, where)
    return observe_buckets(df, metric_name(stage, name), {io: index})


def observe_kafka(
    decoded: DataFrame, name: str, event_time_column: str, bucket_seconds: int = BUCKET_SECONDS
) -> DataFrame:
    """Count a :func:`~kappaplus.codecs.decode_kafka` result as ``kafka.read``,
    ``kafka.decoded`` and ``kafka.dead`` per bucket (dead records have no event time)."""
    from pyspark.sql import functions as F

    from kappaplus.codecs import ERROR_COL

    failed = F.col(ERROR_COL).isNotNull()
    by_event = bucket_index(F.col(f"`{event_time_column}`"), bucket_seconds)
    index = F.coalesce(F.when(~failed, by_event), F.lit(NO_TIME))
    return observe_buckets(
        decoded,
        metric_name("kafka", name),
        {
            "read": index,
            "decoded": F.when(~failed, index),
            "dead": F.when(failed, index),
        },
    )


@dataclass(frozen=True)
class StageCounts:
    """Counts of one stage in one micro-batch: ``rows[bucket index]``; ``exact`` is False
    when the batch spanned more buckets than the histogram holds."""

    stage: str
    name: str
    io: str
    rows: dict[int, int]
    exact: bool = True


def _field(row: Any, key: str) -> Any:
    if hasattr(row, "asDict"):
        return row.asDict().get(key)
    if isinstance(row, Mapping):
        return row.get(key)
    return getattr(row, key, None)


def fold_histogram(bins: Iterable[Any] | None) -> tuple[dict[int, int], bool]:
    """Sum the bins of one histogram per bucket index; ``exact`` unless it was full."""
    counts: dict[int, int] = {}
    items = list(bins or [])
    for item in items:
        x, y = _field(item, "x"), _field(item, "y")
        if x is None or y is None:
            continue
        key = int(round(float(x)))
        counts[key] = counts.get(key, 0) + int(round(float(y)))
    return counts, len(items) < BINS


def same_as_lake(io: str) -> Column:
    """What a stage observes instead of its histogram ``io`` when its rows are exactly the
    lake stage's (:data:`SAME_AS_LAKE`): one histogram per row less.

    >>> from kappaplus.audit.counts import SAME_AS_LAKE
    >>> stage_counts({"kappa_audit.lake.e": {"delivered": [{"x": 5.0, "y": 2.0}]},
    ...               "kappa_audit.job.e": {"rows": 2, SAME_AS_LAKE: "input"}})[-1]
    StageCounts(stage='job', name='e', io='input', rows={5: 2}, exact=True)
    """
    from pyspark.sql import functions as F

    return F.lit(io).alias(SAME_AS_LAKE)


def reported_counts(sources: Iterable[Any]) -> list[StageCounts]:
    """The audit counts sources reported in a progress entry's ``sources[].metrics``: per
    metric :func:`metric_name`, a JSON object ``{io: [[bucket index, rows], ...]}``.

    >>> reported_counts([{"metrics": {"kappa_audit.lake.e": '{"delivered": [[5, 2]]}',
    ...                               "other": "1"}}])
    [StageCounts(stage='lake', name='e', io='delivered', rows={5: 2}, exact=True)]
    """
    out: list[StageCounts] = []
    for source in sources or []:
        metrics = _field(source, "metrics") or {}
        for metric, text in dict(metrics).items():
            parsed = parse_metric_name(str(metric))
            if parsed is None:
                continue
            for io, pairs in json.loads(text).items():
                rows: dict[int, int] = {}
                for bucket, n in pairs:
                    rows[int(bucket)] = rows.get(int(bucket), 0) + int(n)
                out.append(StageCounts(parsed[0], parsed[1], io, rows))
    return out


def stage_counts(observed: Mapping[str, Any], sources: Iterable[Any] = ()) -> list[StageCounts]:
    """Every audit stage in a progress entry's ``observedMetrics`` and its ``sources``'
    reported counts (:func:`reported_counts`); a stage observed as :data:`SAME_AS_LAKE`
    gets the counts of the lake stage of its name."""
    out: list[StageCounts] = reported_counts(sources)
    same: list[tuple[str, str, str]] = []
    for metric, row in observed.items():
        parsed = parse_metric_name(metric)
        if parsed is None:
            continue
        stage, name = parsed
        values = row.asDict() if hasattr(row, "asDict") else dict(row)
        for io, bins in values.items():
            if io == SAME_AS_LAKE:
                same.append((stage, name, str(bins)))
                continue
            if isinstance(bins, int | float):
                continue  # a plain count observed beside the histograms (``rows``)
            rows, exact = fold_histogram(bins)
            out.append(StageCounts(stage, name, io, rows, exact))
    lake = {c.name: c for c in out if (c.stage, c.io) == ("lake", "delivered")}
    for stage, name, io in same:
        found = lake.get(name)
        if found is not None:
            out.append(StageCounts(stage, name, io, dict(found.rows), found.exact))
    return out
