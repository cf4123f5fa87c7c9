"""Event-time semantics applied by the runtime, the same way for every source.

The runtime, not the job, calls :func:`apply_watermark` on each input. Sources that know
where their input ends (a bounded backfill) append marker rows whose event time moves the
watermark to the end bound, so the last windows are emitted in append mode; the filter
here removes them *after* the watermark has seen them, before any job code runs.

>>> events = apply_watermark(stream, "event_time", "10 minutes")   # doctest: +SKIP
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kappaplus.sources.hive.options import MARKER_COLUMN
from kappaplus.timeutil import format_duration, parse_duration


def apply_watermark(df: DataFrame, event_time_column: str, delay: str | int) -> DataFrame:
    """``withWatermark`` on ``event_time_column``, then drop end-of-input marker rows.

    ``delay`` is a duration string (``"10 minutes"``) or microseconds.
    """
    micros = delay if isinstance(delay, int) else parse_duration(delay, "watermarkDelay")
    watermarked = df.withWatermark(event_time_column, format_duration(micros))
    if MARKER_COLUMN not in df.columns:
        return watermarked
    return watermarked.where(not_a_marker(event_time_column)).drop(MARKER_COLUMN)


def not_a_marker(event_time_column: str) -> Column:
    """True for real rows. It references the event-time column on purpose: Spark's
    optimizer pushes filters that do not below ``withWatermark``, where they would hide
    the marker from the watermark too."""
    marker = F.col(MARKER_COLUMN)
    return marker.isNull() | ~marker | F.col(event_time_column).isNull()
