"""The Spark Python data source ``kappa_hive``: a Hive table read as an unbounded stream, one
event-time slice per micro-batch. The lake layer (:mod:`kappaplus.connectors.lake.source`)
does the slicing and delivery; this module names the Hive lister and file reader. Use
:func:`kappaplus.connectors.hive.read_hive_stream` rather than these classes directly: it
resolves the table through the catalog and hides the end-of-input marker.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property

import pyarrow as pa
import pyarrow.fs as pafs
from pyspark.sql.datasource import InputPartition

from kappaplus.connectors.hive.file_reader import check_unchanged, read_hive_file
from kappaplus.connectors.hive.files import file_uri
from kappaplus.connectors.hive.planner import HiveFileLister, HiveSlicePlanner
from kappaplus.connectors.lake.delivery import SlicePartition
from kappaplus.connectors.lake.filesystems import filesystem_for
from kappaplus.connectors.lake.options import LakeSourceOptions
from kappaplus.connectors.lake.source import ListedFilesDataSource, ListedFilesStreamReader
from kappaplus.slicing.manifest import ManifestEntry
from kappaplus.slicing.planner import SlicePlanner


class HiveStreamReader(ListedFilesStreamReader):
    """Plans slices over the table's partition directories and footers; reads files with
    pyarrow."""

    def file_lister(self) -> HiveFileLister:
        return HiveFileLister(self.options)

    def make_planner(self) -> SlicePlanner:
        return HiveSlicePlanner(self.options)

    @cached_property
    def filesystem(self) -> pafs.FileSystem:
        return filesystem_for(self.options.location)[0]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SlicePartition)
        for entry in partition.entries:
            check_unchanged(self.filesystem, self.options, partition, entry)
        yield from super().read(partition)

    def read_file(
        self, entry: ManifestEntry, columns: list[str], lo: int | None, hi: int | None
    ) -> Iterator[pa.RecordBatch]:
        return read_hive_file(self.filesystem, self.options, entry, columns)

    def data_file_uri(self, path: str) -> str:
        """The Hadoop URI of a manifest entry's path (what the JVM reader opens)."""
        return file_uri(self.options.location, path)


class HiveStreamDataSource(ListedFilesDataSource):
    """``spark.readStream.format("kappa_hive")``; see :class:`LakeSourceOptions` for options."""

    format_name = "kappa_hive"
    options_class = LakeSourceOptions
    reader_class = HiveStreamReader
