"""Which read path a lake stream takes: the JVM one (``kappa_hive_jvm``) or the Python one.

Both plan the same event-time slices with the same Python planner (the JVM source asks the
driver's Python process, :mod:`kappaplus.connectors.lake.planner_server`, or without it runs
a child process, :mod:`kappaplus.connectors.lake.plan_service`) and deliver the same rows; the
JVM one reads a slice's Parquet files with Spark's own vectorized reader instead of sending
Arrow batches from Python workers, which is what limits the Python path's read rate
(``docs/benchmarks.md``). ``reader`` = ``auto`` (default) takes the JVM path when it can
serve the table, ``python`` always the Python one, ``jvm`` the JVM one or a clear error.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from kappaplus.connectors.lake.delivery import unplaceable_advice
from kappaplus.connectors.lake.options import (
    MARKER_COLUMN,
    PLANNER_SOURCE,
    LakeSourceOptions,
    NullEventTimePolicy,
)
from kappaplus.core.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from kappaplus.connectors.lake.source import ListedFilesDataSource

READERS = ("auto", "jvm", "python")
JVM_SOURCE_CLASS = "org.kappaplus.hive.KappaHiveSource"
JVM_FORMAT = "kappa_hive_jvm"
"""The JVM reader's format name (its ``DataSourceRegister`` short name)."""
_PARTITION_TYPES = (
    StringType,
    IntegerType,
    LongType,
    ShortType,
    ByteType,
    DateType,
    TimestampType,
    TimestampNTZType,
    DecimalType,
    DoubleType,
    FloatType,
    BooleanType,
)


def jvm_reader_loaded(spark: SparkSession) -> bool:
    """Whether the session's JVM can load the JVM source (its jar is on the classpath)."""
    try:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        jvm.java.lang.Class.forName(JVM_SOURCE_CLASS, False, loader)
        return True
    except Exception:  # no py4j gateway (Spark Connect), or the class is not there
        return False


def jvm_has_file_system(spark: SparkSession) -> Callable[[str], bool]:
    """``reachable(scheme)``: whether the session's JVM has a Hadoop file system for a URI
    scheme (``FileSystem.getFileSystemClass``); for the Iceberg and Delta rules."""

    def reachable(scheme: str) -> bool:
        try:
            jvm: Any = spark.sparkContext._jvm
            conf = spark.sparkContext._jsc.hadoopConfiguration()
            jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, conf)
            return True
        except Exception:  # no such file system, or no py4j gateway (Spark Connect)
            return False

    return reachable


def file_scheme(path: str) -> str:
    """The URI scheme of a data file's path (``file`` for a plain local path)."""
    scheme = urlsplit(path).scheme
    return "file" if scheme in ("", "file") or len(scheme) == 1 else scheme  # 1: a drive


def lake_file_uri(path: str) -> str:
    """The Hadoop URI the JVM reader opens for a data file path as a lake format records it
    (Iceberg's manifests, the Delta lister's full paths): a URI as it is (``file:/w/t/a``
    from a Hive metastore's locations too), a plain path as a local, unencoded ``file://``
    URI (as the JVM reader opens the Hive source's: ``new Path(uri)``)."""
    return path if len(urlsplit(path).scheme) > 1 else "file://" + path


def unreachable_file_system(paths: Iterable[str], reachable: Callable[[str], bool]) -> str | None:
    """Why the JVM reader cannot open ``paths`` (the first scheme the session's JVM has no
    file system for), or None."""
    for scheme in sorted({file_scheme(p) for p in paths}):
        if not reachable(scheme):
            return (
                f"the session's JVM has no file system for {scheme}:// (on a cluster: "
                "hadoop-aws for s3a, see docs/cluster.md)"
            )
    return None


def jvm_unsupported(options: LakeSourceOptions) -> str | None:
    """Why the JVM path cannot read this table, or None when it can: the reasons of every
    format (a format adds its own, e.g. :mod:`kappaplus.connectors.iceberg.jvm_path`)."""
    if options.format != "parquet":
        return f"the table is stored as {options.format}; the JVM reader reads parquet"
    if options.storage:
        return "the event time is stored as numbers or strings, which the Python reader converts"
    if options.null_event_time_policy is not NullEventTimePolicy.FAIL:
        return "unplaceable rows go to dead letters, which only the Python reader writes"
    for f in options.output_schema.fields:
        if f.name in options.partition_columns and not isinstance(f.dataType, _PARTITION_TYPES):
            return f"partition column {f.name!r} is {f.dataType.simpleString()}"
    return None


@dataclass(frozen=True)
class CountDelivered:
    """Ask a lake stream's JVM reader to count the rows it delivers per event-time bucket
    (``bucket_seconds``) and report them as the audit metric ``metric`` (its stream's
    source metrics, ``{io: [[bucket, rows], ...]}``): the audit's lake-stage counts without
    an observed histogram over every row."""

    metric: str
    bucket_seconds: int
    io: str = "delivered"

    def options(self) -> dict[str, str]:
        """The JVM reader's options for it."""
        return {
            "auditMetric": self.metric,
            "auditIo": self.io,
            "auditBucketSeconds": str(self.bucket_seconds),
        }


@dataclass(frozen=True)
class LakeStream:
    """A lake table opened as a stream (:func:`~kappaplus.connectors.lake.stream.open_lake_stream`):
    the DataFrame, and whether its reader counts the rows it
    delivers (:class:`CountDelivered`, the JVM reader only): the caller then observes no
    histogram of its own."""

    df: DataFrame
    counts_delivered: bool = False


def load_lake_stream(
    spark: SparkSession,
    source: str,
    options: dict[str, str],
    *,
    event_time_column: str,
    watermark_delay: str | None,
    count_delivered: CountDelivered | None,
) -> LakeStream:
    """``readStream`` of ``source`` (the format :func:`choose_reader` chose) with
    ``options``, watermarked when ``watermark_delay`` is set; the JVM reader counts what
    it delivers when ``count_delivered`` asks."""
    from kappaplus.core.event_time import apply_watermark
    from kappaplus.core.timeutil import parse_duration

    counts = count_delivered if source == JVM_FORMAT else None
    if counts is not None:
        options = {**options, **counts.options()}
    df = spark.readStream.format(source).options(**options).load()
    if watermark_delay is not None:
        df = apply_watermark(df, event_time_column, parse_duration(watermark_delay))
    return LakeStream(df, counts is not None)


def jvm_options(options: LakeSourceOptions, planner_source: str | None = None) -> dict[str, str]:
    """The options ``kappa_hive_jvm`` takes beyond those of ``kappa_hive`` (``planner_source``:
    another format's data source whose lister plans the slices, e.g. Iceberg's).

    They include the address and secret of this process's planner server
    (:mod:`~kappaplus.connectors.lake.planner_server`), started here on first use, so the
    JVM asks this process instead of spawning a planner process per query."""
    from kappaplus.connectors.lake.planner_server import in_process_options

    output: StructType = options.output_schema
    if options.emits_end_marker:
        output = StructType([*output.fields]).add(MARKER_COLUMN, BooleanType())
    read = StructType([f for f in options.output_schema.fields if f.name in options.data_columns])
    extra = {
        "outputSchema": output.json(),
        "readSchema": read.json(),
        "pythonExec": sys.executable,
        "unplaceableAdvice": unplaceable_advice(options),
    }
    if planner_source is not None:
        extra[PLANNER_SOURCE] = planner_source
    extra.update(in_process_options())
    return extra


def choose_reader(
    spark: SparkSession,
    options: LakeSourceOptions,
    reader: str,
    *,
    data_source: type[ListedFilesDataSource] | None = None,
    unsupported: Callable[[], str | None] | None = None,
) -> tuple[str, dict[str, str], str | None]:
    """``(format, extra options, why not the JVM path)`` for ``reader`` (auto | jvm | python).

    The lake format passes its Python data source (``data_source``: its format is the
    Python path, its reader plans the JVM path's slices; default the Hive source,
    ``kappa_hive``) and why the JVM reader cannot read its table (``unsupported``, asked
    only when the JVM path is wanted; default the reasons of :func:`jvm_unsupported`)."""
    python_format = "kappa_hive" if data_source is None else data_source.format_name
    planner_source = (
        None if data_source is None else f"{data_source.__module__}:{data_source.__name__}"
    )
    if reader not in READERS:
        raise ConfigError("reader", reader, f"expected one of {', '.join(READERS)}")
    if reader == "python":
        return python_format, {}, "reader = 'python'"
    why = jvm_unsupported(options) if unsupported is None else unsupported()
    if why is None and not jvm_reader_loaded(spark):
        why = (
            "the session has no kappaplus-jvm.jar (set-up builds it with javac; on a cluster "
            "add it to spark.jars)"
        )
    if why is not None:
        if reader == "jvm":
            raise ConfigError(
                "reader", reader, f"the JVM reader cannot read {options.table!r}: {why}"
            )
        return python_format, {}, why
    return JVM_FORMAT, jvm_options(options, planner_source), None
