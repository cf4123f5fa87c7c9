"""The Spark Python data source ``kappa_iceberg``: an Iceberg table's pinned snapshot read
as an unbounded stream, one bounded event-time slice per micro-batch.

The offsets, manifests, slice sizing, end-of-input markers and the routing of rows no slice
can place are the Hive source's (:class:`~kappaplus.connectors.hive.source.HiveStreamReader`
over the format-free planner of :mod:`kappaplus.slicing`); what differs is the file lister
(:mod:`~kappaplus.connectors.iceberg.lister`: manifests of the pinned snapshot) and how a
file is read: through pyiceberg's Arrow scan, which matches columns by field id and applies
position delete files. Use :func:`kappaplus.connectors.iceberg.read_iceberg_stream`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from kappaplus.connectors.hive.reader import (
    SlicePartition,
    deliver,
    marker_batch,
    output_arrow_schema,
)
from kappaplus.connectors.hive.source import HiveStreamReader, source_schema
from kappaplus.connectors.iceberg.lister import IcebergFileLister, read_task
from kappaplus.connectors.iceberg.options import IcebergSourceOptions
from kappaplus.slicing.planner import SlicePlanner


class IcebergStreamDataSource(DataSource):
    """``spark.readStream.format("kappa_iceberg")``; see :class:`IcebergSourceOptions`."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.parsed = IcebergSourceOptions.parse(options)

    @classmethod
    def name(cls) -> str:
        return "kappa_iceberg"

    def schema(self) -> StructType:
        return source_schema(self.parsed)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return IcebergStreamReader(self.parsed)


class IcebergStreamReader(HiveStreamReader):
    """Plans slices over the pinned snapshot's manifests; reads files with pyiceberg."""

    options: IcebergSourceOptions

    def __init__(self, options: IcebergSourceOptions) -> None:
        super().__init__(options)

    @property
    def planner(self) -> SlicePlanner:
        if self._planner is None:
            self._planner = SlicePlanner(self.options, IcebergFileLister(self.options))
        return self._planner

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SlicePartition)
        yield from read_iceberg_partition(self.options, partition)


def read_iceberg_partition(
    options: IcebergSourceOptions, part: SlicePartition
) -> Iterator[pa.RecordBatch]:
    """The rows of one input partition of a slice, as record batches of the source schema."""
    if part.marker_time is not None:
        yield marker_batch(options, part.marker_time)
        return
    schema = output_arrow_schema(options)
    for entry in part.entries:
        owner = bool(entry.route_row_groups)
        if owner:  # the owner also looks for rows no slice can place: the whole file
            columns, lo, hi = options.table_data_columns, None, None
        else:
            columns, lo, hi = options.data_columns, part.lo, part.hi
        batches = read_task(options, entry.path, columns, lo, hi)
        yield from deliver(options, part, entry, batches, schema)
