"""The event-time span of the rows a Hive sink commits: observed while a batch is written
(no second pass), or asked of a replayed batch's rows; the span a commit marker records
(:mod:`kappaplus.connectors.hive.sink`)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from kappaplus.connectors.hive.sink_options import quote_identifier

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from kappaplus.core.table.hadoop_fs import HadoopFs


def _is_timestamp(df: DataFrame, column: str) -> bool:
    from pyspark.sql.types import TimestampNTZType, TimestampType

    return column in df.columns and isinstance(
        df.schema[column].dataType, TimestampType | TimestampNTZType
    )


def observe_event_time(df: DataFrame, column: str | None) -> tuple[DataFrame, Any]:
    """``df`` observed for the min and max of its timestamp ``column`` (epoch microseconds)
    while the batch is written: no second pass over the rows. ``(df, None)`` when there is
    no such column."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    if column is None or not _is_timestamp(df, column):
        return df, None
    observation = Observation()
    micros = F.unix_micros(F.col(quote_identifier(column)).cast("timestamp"))
    observed = df.observe(observation, F.min(micros).alias("lo"), F.max(micros).alias("hi"))
    return observed, observation


def event_time_span(df: DataFrame, column: str | None) -> list[int] | None:
    """``[min, max]`` of ``df``'s timestamp ``column`` by a query of its own (a replayed
    batch, whose staging was not observed); None without rows or such a column."""
    from pyspark.sql import functions as F

    if column is None or not _is_timestamp(df, column):
        return None
    micros = F.unix_micros(F.col(quote_identifier(column)).cast("timestamp"))
    row = df.agg(F.min(micros).alias("lo"), F.max(micros).alias("hi")).collect()[0]
    return None if row["lo"] is None or row["hi"] is None else [int(row["lo"]), int(row["hi"])]


def observed_span(observation: Any) -> list[int] | None:
    """``[min, max]`` an :func:`observe_event_time` observation saw; None without rows."""
    if observation is None:
        return None
    values = observation.get
    lo, hi = values.get("lo"), values.get("hi")
    return None if lo is None or hi is None else [int(lo), int(hi)]


def widen(span: list[int] | None, other: list[int] | None) -> list[int] | None:
    """The smallest ``[min, max]`` holding both spans (None: no rows).

    >>> widen([5, 9], [2, 6]), widen(None, [2, 6]), widen([5, 9], None)
    ([2, 9], [2, 6], [5, 9])
    """
    if span is None:
        return None if other is None else list(other)
    if other is None:
        return list(span)
    return [min(span[0], other[0]), max(span[1], other[1])]


def recorded_span(fs: HadoopFs, commits: str, batch_id: int) -> list[int] | None:
    """The span the last commit marker before ``batch_id`` under ``commits`` (a query's
    marker directory) records; None without one (or one that records none)."""
    if not fs.exists(commits):
        return None
    earlier = [int(n) for n in fs.list_files(commits) if n.isdigit() and int(n) < batch_id]
    if not earlier:
        return None
    try:
        record = json.loads(fs.read_text(f"{commits}/{max(earlier)}"))
    except ValueError:
        return None
    span = record.get("span") if isinstance(record, dict) else None
    return list(span) if isinstance(span, list) and len(span) == 2 else None
