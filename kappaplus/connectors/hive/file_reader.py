"""Executor side of the Hive source: one data file's row groups (Parquet) or stripes (ORC)
read with pyarrow, after checking the file is still the one the slice planned."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.fs as pafs

from kappaplus.connectors.hive.files import read_columns
from kappaplus.connectors.lake.delivery import SlicePartition
from kappaplus.connectors.lake.options import LakeSourceOptions
from kappaplus.core.errors import DataError
from kappaplus.core.timeutil import iso
from kappaplus.slicing.manifest import ManifestEntry


def check_unchanged(
    fs: pafs.FileSystem, options: LakeSourceOptions, part: SlicePartition, entry: ManifestEntry
) -> None:
    """:class:`DataError` when ``entry``'s file was removed or rewritten since its slice was
    planned (a replayed batch would not read the same rows)."""
    info = fs.get_file_info(entry.path)
    if info.type != pafs.FileType.File or info.size != entry.size:
        raise DataError(
            f"table {options.table!r}: file {entry.path!r} of slice [{iso(part.lo)}, "
            f"{iso(part.hi)}) was removed or rewritten after the slice was planned; the batch "
            "cannot be replayed exactly"
        )


def read_hive_file(
    fs: pafs.FileSystem, options: LakeSourceOptions, entry: ManifestEntry, columns: list[str]
) -> Iterator[pa.RecordBatch]:
    """The manifest entry's row groups or stripes, ``columns`` only (the slice's filter is
    the lake layer's :func:`~kappaplus.connectors.lake.delivery.deliver`)."""
    groups = sorted(set(entry.row_groups) | set(entry.route_row_groups))
    return read_columns(fs, entry.path, options.format, groups, columns)


def read_partition(options: LakeSourceOptions, part: SlicePartition) -> Iterator[pa.RecordBatch]:
    """The rows of one input partition of a Hive slice (what the source's reader yields)."""
    from kappaplus.connectors.hive.datasource import HiveStreamReader

    yield from HiveStreamReader(options).read(part)
