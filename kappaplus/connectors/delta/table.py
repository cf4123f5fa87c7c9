"""Opening a Delta table (delta-rs), pinning its version per run, and opening it as an
event-time stream.

A table is named by its location (a local path or ``s3://...`` with delta-rs storage
options) or by a name registered with ``kappa table register --delta`` (a name-to-location
map under the state directory: :mod:`kappaplus.connectors.delta.names`).

The version is pinned per run: the first start of a run records the table's current version
(or the one asked for) in the source's state directory, which lives with the run's
checkpoint; every later start of that run, a restart after a crash included, reads that
same version. Versions committed since are counted and logged, never mixed into the run:
a fresh run reads them.

What this reader cannot read right is refused in one line naming the table, version and
file, never ignored: column mapping (``delta.columnMapping.mode`` name or id: the files'
column names are not the table's), or deletion vectors delta-rs cannot read. Deletion
vectors (rows deleted without rewriting their file) are applied: a file's deleted rows are
dropped by row position.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from kappaplus.connectors.delta.log import open_delta
from kappaplus.connectors.delta.names import resolve_delta_location
from kappaplus.connectors.delta.options import DeltaSourceOptions
from kappaplus.connectors.lake.options import range_options
from kappaplus.connectors.lake.stream import LakeFormat, open_lake_stream
from kappaplus.core.errors import ConfigError, DataError
from kappaplus.core.settings import state_dir
from kappaplus.core.temp_names import temporary_name

if TYPE_CHECKING:
    from kappaplus.connectors.lake.jvm_reader import LakeStream

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PinnedVersion:
    """The version a run reads, and what was committed after it."""

    table: str
    location: str
    version: int
    newer_versions: int = 0


def _pin_path(pin_dir: str, location: str) -> Path:
    key = hashlib.sha256(location.encode()).hexdigest()[:16]
    return Path(pin_dir) / "delta-pins" / f"{key}.json"


def pin_version(
    location: str,
    storage_options: dict[str, str] | None,
    pin_dir: str,
    version: int | None = None,
    name: str | None = None,
) -> tuple[Any, PinnedVersion]:
    """The table at its version for this run: the one pinned in ``pin_dir`` by an earlier
    start of the run, else ``version``, else the current one (then pinned). Versions
    committed after the pinned one are counted (and logged), not read."""
    shown = name or location
    latest = open_delta(location, storage_options)
    current = int(latest.version())
    path = _pin_path(pin_dir, location)
    if path.exists():
        pinned = int(json.loads(path.read_text())["version"])
        if version is not None and version != pinned:
            raise ConfigError(
                "version",
                version,
                f"this run of Delta table {shown!r} is pinned to version {pinned}; start "
                "the run over (--fresh) to read another",
            )
    else:
        if version is not None and not 0 <= version <= current:
            raise ConfigError(
                "version", version, f"not a version of Delta table {shown!r} (0..{current})"
            )
        pinned = current if version is None else version
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(temporary_name(path.name))
        tmp.write_text(json.dumps({"version": pinned, "location": location}))
        tmp.replace(path)
    table = latest if pinned == current else open_delta(location, storage_options, pinned)
    pin = PinnedVersion(shown, location, pinned, current - pinned)
    if pin.newer_versions:
        log.warning(
            "Delta table %r: %d version(s) committed after the pinned version %d are not "
            "part of this run; a fresh run reads them",
            shown,
            pin.newer_versions,
            pinned,
        )
    return table, pin


def arrow_schema(table: Any) -> pa.Schema:
    """The table's schema as an Arrow schema (delta-rs hands out an arro3 schema)."""
    return pa.schema(table.schema().to_arrow())


def spark_schema(table: Any) -> StructType:
    """The table's schema as a Spark schema (via Arrow)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow_schema(table))


def table_schema(path: str, storage_options: dict[str, str] | None) -> StructType:
    """The current schema of the Delta table at ``path`` (a location or a registered name)
    as Spark sees it: for checking a binding's mapping."""
    location, _ = resolve_delta_location(path)
    if "://" not in location:
        location = os.path.abspath(location)
    return spark_schema(open_delta(location, storage_options))


def _key(storage_options: dict[str, str] | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((storage_options or {}).items()))


def has_deletion_vectors(table: Any) -> bool:
    """Whether the table's protocol has the ``deletionVectors`` reader feature."""
    return "deletionVectors" in set(table.protocol().reader_features or ())


def refuse_unreadable(
    table: Any, pin: PinnedVersion, storage_options: dict[str, str] | None = None
) -> None:
    """Column mapping (the files store physical column names) is refused in one line naming
    the table, version and a file; deletion vectors that cannot be read too."""
    from kappaplus.connectors.delta.lister import deletion_masks
    from kappaplus.connectors.delta.log import add_actions

    config = table.metadata().configuration or {}
    column_mapping = config.get("delta.columnMapping.mode", "none")
    if column_mapping != "none":
        adds = add_actions(table)
        first = adds.column("path")[0].as_py() if adds.num_rows else "-"
        raise DataError(
            f"Delta table {pin.table!r} version {pin.version}: column mapping mode "
            f"{column_mapping!r} "
            f"(file {first!r} stores physical column names) is not read by this source; "
            "rewrite the table without column mapping"
        )
    if has_deletion_vectors(table):
        deletion_masks(
            pin.table, pin.location, pin.version, _key(storage_options)
        )  # refused here if unreadable


def delta_stream_options(
    table: Any,
    pin: PinnedVersion,
    *,
    event_time_column: str,
    storage_options: dict[str, str] | None = None,
    start: Any = None,
    end: Any = None,
    max_event_time_per_trigger: str | None = None,
    watermark_delay: str | None = None,
    manifest_dir: str,
    **options: Any,
) -> dict[str, str]:
    """The string options for ``format("kappa_delta")``, validated."""
    partitions = list(table.metadata().partition_columns)
    resolved: dict[str, str] = {
        "table": pin.table,
        "location": pin.location,
        "format": "parquet",
        "schema": json.dumps(spark_schema(table).jsonValue()),
        "partitionColumns": ",".join(partitions),
        "eventTimeColumn": event_time_column,
        "manifestDir": manifest_dir,
        "deltaVersion": str(pin.version),
        "storageOptions": json.dumps(storage_options or {}),
        "deletionVectors": str(has_deletion_vectors(table)).lower(),
    }
    resolved.update(range_options(start, end, max_event_time_per_trigger, watermark_delay))
    resolved.update({k: str(v) for k, v in options.items() if v is not None})
    DeltaSourceOptions.parse(resolved)  # fail here, in the caller, with a clear message
    return resolved


def delta_lake_options(
    path: str,
    storage_options: dict[str, str] | None,
    version: int | None,
    *,
    event_time_column: str,
    **options: Any,
) -> dict[str, str]:
    """Open the Delta table at ``path`` (a location or a registered name), pin its version
    in the source's state (``manifestDir``, default under the state directory), refuse what
    cannot be read right, and return the validated options of ``kappa_delta`` (also the lake
    options of a bootstrap)."""
    location, name = resolve_delta_location(path)
    if "://" not in location:
        location = os.path.abspath(location)
    manifests = str(options.pop("manifestDir", None) or state_dir() / "delta-source" / "manifests")
    table, pin = pin_version(location, storage_options, manifests, version, name)
    refuse_unreadable(table, pin, storage_options)
    return delta_stream_options(
        table,
        pin,
        event_time_column=event_time_column,
        storage_options=storage_options,
        manifest_dir=manifests,
        **options,
    )


def read_delta_stream(
    spark: SparkSession,
    path: str,
    *,
    event_time_column: str,
    **options: Any,
) -> DataFrame:
    """Open a Delta table's pinned version as a streaming DataFrame, one event-time slice
    per micro-batch (the slicing options and the watermark are every lake format's:
    :class:`~kappaplus.connectors.lake.options.LakeSourceOptions`).

    ``path``: the table's location (local path, ``s3://...``) or a name registered with
    ``kappa table register --delta``; ``storage_options``: delta-rs storage options;
    ``version``: the version to pin on the first start (default the current one);
    ``manifest_dir``: the source's state (slice manifests and the pin): keep it with the
    checkpoint, a new one starts a new run; ``reader``: ``auto`` (default: the JVM reader where
    it reads the same rows, see :mod:`kappaplus.connectors.delta.jvm_path`; else the Python
    one, the reason logged), ``jvm`` (or a one-line error saying why not) or ``python``.

    >>> df = read_delta_stream(spark, "/lake/rides", event_time_column="ts",
    ...                        watermark_delay="10 minutes")      # doctest: +SKIP
    """
    return open_delta_stream(
        spark,
        path,
        event_time_column=event_time_column,
        **options,
    ).df


def open_delta_stream(spark: SparkSession, path: str, **options: Any) -> LakeStream:
    """:func:`read_delta_stream`, and whether the reader counts the rows it delivers, as
    ``count_delivered`` asks (the JVM reader does)."""
    return open_lake_stream(spark, delta_format(), path, **options)


def _resolve(
    spark: SparkSession,
    path: str,
    *,
    storage_options: dict[str, str] | None = None,
    version: int | None = None,
    manifest_dir: str | None = None,
    **options: Any,
) -> dict[str, str]:
    return delta_lake_options(path, storage_options, version, manifestDir=manifest_dir, **options)


def _unsupported(spark: SparkSession, parsed: DeltaSourceOptions) -> str | None:
    from kappaplus.connectors.delta.jvm_path import jvm_unsupported_delta
    from kappaplus.connectors.lake.jvm_reader import jvm_has_file_system

    protocol = open_delta(parsed.location, parsed.storage_options, parsed.delta_version).protocol()
    features = set(protocol.reader_features or ()) | set(protocol.writer_features or ())
    return jvm_unsupported_delta(parsed, features, jvm_has_file_system(spark))


def delta_format() -> LakeFormat:
    """The Delta format of :func:`~kappaplus.connectors.lake.stream.open_lake_stream` (made
    on use: the sink, which shares this module's log access, needs no reader)."""
    from kappaplus.connectors.delta.source import DeltaStreamDataSource

    return LakeFormat(
        data_source=DeltaStreamDataSource,
        resolve=_resolve,
        unsupported=_unsupported,
        describe=lambda parsed: (
            f"Delta table {parsed.table!r} version {parsed.delta_version} (statistics from the log)"
        ),
    )
