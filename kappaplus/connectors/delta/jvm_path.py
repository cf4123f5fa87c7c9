"""Whether a Delta table's pinned version can be read by the JVM reader (``kappa_hive_jvm``).

Without column mapping (refused anyway: :func:`~kappaplus.connectors.delta.table.refuse_unreadable`)
a Delta data file stores the table's columns under their names, so Spark's vectorized Parquet
reader, which matches columns by name, reads what the Python reader (pyarrow) reads. The
JVM path is taken when, beyond the Hive rules (the event time a timestamp, unplaceable rows
failing the run: :func:`~kappaplus.connectors.lake.jvm_reader.jvm_unsupported`):

- the table has no deletion vectors (the Python reader drops deleted rows by position) and no
  type widening (a file may hold a column in its older, narrower type);
- its files are on a file system the session's JVM has (local paths, ``hdfs://``; not
  ``s3://`` without hadoop-aws);
- its partition columns are strings, integers or dates (their values come from the log, as
  text the JVM reader parses).

Anything else is read by the Python reader, the reason said once in the log.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pyspark.sql.types import DateType, IntegerType, LongType, ShortType, StringType

from kappaplus.connectors.lake.jvm_reader import jvm_unsupported, unreachable_file_system

if TYPE_CHECKING:
    from kappaplus.connectors.delta.options import DeltaSourceOptions

_PARTITION_TYPES = (StringType, IntegerType, LongType, ShortType, DateType)


def jvm_unsupported_delta(
    options: DeltaSourceOptions, features: set[str], reachable: Callable[[str], bool]
) -> str | None:
    """Why the JVM reader cannot read this pinned version, or None when it can
    (``features``: the table protocol's reader and writer features; ``reachable(scheme)``:
    whether the session's JVM has a file system for a URI scheme)."""
    why = jvm_unsupported(options)
    if why is not None:
        return why
    if options.deletion_vectors or "deletionVectors" in features:
        return "the table has deletion vectors, which the Python reader applies"
    if {"typeWidening", "typeWidening-preview"} & features:
        return "the table allows type widening; the Python reader casts older files"
    for f in options.output_schema.fields:
        if f.name in options.partition_columns and not isinstance(f.dataType, _PARTITION_TYPES):
            return f"partition column {f.name!r} is {f.dataType.simpleString()}"
    return unreachable_file_system([options.location], reachable)
