"""The Spark Python data source ``kappa_iceberg``: an Iceberg table's pinned snapshot read
as an unbounded stream, one bounded event-time slice per micro-batch.

The offsets, manifests, slice sizing, end-of-input markers and the routing of rows no slice
can place are the lake layer's (:class:`~kappaplus.connectors.lake.source.ListedFilesStreamReader`
over the format-free planner of :mod:`kappaplus.slicing`); what differs is the file lister
(:mod:`~kappaplus.connectors.iceberg.lister`: manifests of the pinned snapshot) and how a
file is read: through pyiceberg's Arrow scan, which matches columns by field id and applies
position delete files, then equality delete files applied to its rows
(:mod:`~kappaplus.connectors.iceberg.deletes`). Where reading by name reads the same rows
(:mod:`~kappaplus.connectors.iceberg.jvm_path`), the JVM reader (``kappa_hive_jvm``) reads
the files instead, its planner being this reader's.
Use :func:`kappaplus.connectors.iceberg.read_iceberg_stream`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from kappaplus.connectors.iceberg.lister import IcebergFileLister, read_task
from kappaplus.connectors.iceberg.options import IcebergSourceOptions
from kappaplus.connectors.lake.jvm_reader import lake_file_uri
from kappaplus.connectors.lake.source import ListedFilesDataSource, ListedFilesStreamReader
from kappaplus.slicing.manifest import ManifestEntry


class IcebergStreamReader(ListedFilesStreamReader):
    """Plans slices over the pinned snapshot's manifests; reads files with pyiceberg."""

    options: IcebergSourceOptions

    def file_lister(self) -> IcebergFileLister:
        return IcebergFileLister(self.options)

    def read_file(
        self, entry: ManifestEntry, columns: list[str], lo: int | None, hi: int | None
    ) -> Iterator[pa.RecordBatch]:
        return read_task(self.options, entry.path, columns, lo, hi)

    def data_file_uri(self, path: str) -> str:
        """Iceberg records data files by URI (or an absolute local path)."""
        return lake_file_uri(path)


class IcebergStreamDataSource(ListedFilesDataSource):
    """``spark.readStream.format("kappa_iceberg")``; see :class:`IcebergSourceOptions`."""

    format_name = "kappa_iceberg"
    options_class = IcebergSourceOptions
    reader_class = IcebergStreamReader
