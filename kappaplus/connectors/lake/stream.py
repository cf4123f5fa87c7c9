"""Opening a lake table as an event-time stream, the same way for every format: the format
(:class:`LakeFormat`) is data -- how its table's options are resolved, which Python data
source reads it, why the JVM reader cannot -- and :func:`open_lake_stream` does the rest
(the reader choice, the log line, the registration, the watermark).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kappaplus.connectors.lake.jvm_reader import (
    JVM_FORMAT,
    CountDelivered,
    LakeStream,
    choose_reader,
    load_lake_stream,
)
from kappaplus.connectors.lake.options import DEFAULT_TARGET_ROWS, LakeSourceOptions

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from kappaplus.connectors.lake.source import ListedFilesDataSource

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LakeFormat:
    """What one lake format brings to :func:`open_lake_stream`."""

    data_source: type[ListedFilesDataSource]
    """Its Python data source (``kappa_<format>``), whose reader also plans the JVM path's
    slices."""
    resolve: Callable[..., dict[str, str]]
    """``resolve(spark, table, event_time_column=..., **options)``: the data source's string
    options, validated (errors name the option)."""
    unsupported: Callable[[SparkSession, Any], str | None]
    """``unsupported(spark, parsed options)``: why the JVM reader cannot read the table, or
    None."""
    describe: Callable[[Any], str] = lambda parsed: f"table {parsed.table!r}"
    """How the log line names the table (and the snapshot or version pinned)."""
    jvm_options: Callable[[dict[str, str], Any], dict[str, str]] | None = None
    """The JVM reader's extra options for this format, from those of :func:`choose_reader`."""


def open_lake_stream(
    spark: SparkSession,
    lake: LakeFormat,
    table: str,
    *,
    event_time_column: str,
    watermark_delay: str | None = None,
    count_delivered: CountDelivered | None = None,
    **options: Any,
) -> LakeStream:
    """``table`` of format ``lake`` as a stream, one event-time slice per micro-batch, read by
    the JVM reader where it can (``reader`` = auto | jvm | python, default auto), the reason
    logged where it cannot; and whether the reader counts the rows it delivers, as
    ``count_delivered`` asks (the JVM reader does)."""
    reader = str(options.pop("reader", None) or "auto")
    span = options.get("max_event_time_per_trigger")
    resolved = lake.resolve(
        spark,
        table,
        event_time_column=event_time_column,
        watermark_delay=watermark_delay,
        **options,
    )
    parsed: LakeSourceOptions = lake.data_source.options_class.parse(resolved)
    source, extra, why_python = choose_reader(
        spark,
        parsed,
        reader,
        data_source=lake.data_source,
        unsupported=lambda: lake.unsupported(spark, parsed),
    )
    log.info(
        "streaming %s by %s slices of %s, with the %s reader%s",
        lake.describe(parsed),
        event_time_column,
        span or f"about {resolved.get('targetRowsPerTrigger', DEFAULT_TARGET_ROWS)} rows",
        "JVM" if source == JVM_FORMAT else "Python",
        f" ({why_python})" if why_python else "",
    )
    if source == lake.data_source.format_name:
        spark.dataSource.register(lake.data_source)
    elif lake.jvm_options is not None:
        extra = lake.jvm_options(extra, parsed)
    return load_lake_stream(
        spark,
        source,
        {**resolved, **extra},
        event_time_column=event_time_column,
        watermark_delay=watermark_delay,
        count_delivered=count_delivered,
    )
