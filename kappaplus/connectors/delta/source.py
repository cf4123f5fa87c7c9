"""The Spark Python data source ``kappa_delta``: a Delta table's pinned version read as an
unbounded stream, one bounded event-time slice per micro-batch.

The offsets, manifests, slice sizing, end-of-input markers and the routing of rows no slice
can place are the lake layer's (:class:`~kappaplus.connectors.lake.source.ListedFilesStreamReader`
over the format-free planner of :mod:`kappaplus.slicing`); what differs is the file lister
(:mod:`~kappaplus.connectors.delta.lister`: the log of the pinned version) and where the
partition columns come from (the log's partition values, filled in by ``deliver``). Use
:func:`kappaplus.connectors.delta.read_delta_stream`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from kappaplus.connectors.delta.lister import DeltaFileLister, read_delta_file
from kappaplus.connectors.delta.options import DeltaSourceOptions
from kappaplus.connectors.lake.jvm_reader import lake_file_uri
from kappaplus.connectors.lake.source import ListedFilesDataSource, ListedFilesStreamReader
from kappaplus.slicing.manifest import ManifestEntry


class DeltaStreamReader(ListedFilesStreamReader):
    """Plans slices over the pinned version's log statistics; reads files with pyarrow."""

    options: DeltaSourceOptions

    def file_lister(self) -> DeltaFileLister:
        return DeltaFileLister(self.options)

    def read_file(
        self, entry: ManifestEntry, columns: list[str], lo: int | None, hi: int | None
    ) -> Iterator[pa.RecordBatch]:
        return read_delta_file(self.options, entry.path, entry.size, columns, lo, hi)

    def data_file_uri(self, path: str) -> str:
        """The lister's full paths (log paths decoded) as Hadoop URIs."""
        return lake_file_uri(path)


class DeltaStreamDataSource(ListedFilesDataSource):
    """``spark.readStream.format("kappa_delta")``; see :class:`DeltaSourceOptions`."""

    format_name = "kappa_delta"
    options_class = DeltaSourceOptions
    reader_class = DeltaStreamReader
