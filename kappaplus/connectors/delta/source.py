"""The Spark Python data source ``kappa_delta``: a Delta table's pinned version read as an
unbounded stream, one bounded event-time slice per micro-batch.

The offsets, manifests, slice sizing, end-of-input markers and the routing of rows no slice
can place are the Hive source's (:class:`~kappaplus.connectors.hive.source.HiveStreamReader`
over the format-free planner of :mod:`kappaplus.slicing`); what differs is the file lister
(:mod:`~kappaplus.connectors.delta.lister`: the log of the pinned version) and where the
partition columns come from (the log's partition values). Use
:func:`kappaplus.connectors.delta.read_delta_stream`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from kappaplus.connectors.delta.lister import DeltaFileLister, read_delta_file
from kappaplus.connectors.delta.options import DeltaSourceOptions
from kappaplus.connectors.hive.reader import (
    SlicePartition,
    deliver,
    marker_batch,
    output_arrow_schema,
)
from kappaplus.connectors.hive.source import HiveStreamReader, source_schema
from kappaplus.slicing.planner import SlicePlanner


class DeltaStreamDataSource(DataSource):
    """``spark.readStream.format("kappa_delta")``; see :class:`DeltaSourceOptions`."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.parsed = DeltaSourceOptions.parse(options)

    @classmethod
    def name(cls) -> str:
        return "kappa_delta"

    def schema(self) -> StructType:
        return source_schema(self.parsed)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return DeltaStreamReader(self.parsed)


class DeltaStreamReader(HiveStreamReader):
    """Plans slices over the pinned version's log statistics; reads files with pyarrow."""

    options: DeltaSourceOptions

    def __init__(self, options: DeltaSourceOptions) -> None:
        super().__init__(options)

    @property
    def planner(self) -> SlicePlanner:
        if self._planner is None:
            self._planner = SlicePlanner(self.options, DeltaFileLister(self.options))
        return self._planner

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SlicePartition)
        yield from read_delta_partition(self.options, partition)


def read_delta_partition(
    options: DeltaSourceOptions, part: SlicePartition
) -> Iterator[pa.RecordBatch]:
    """The rows of one input partition of a slice, as record batches of the source schema
    (partition columns filled from the log's partition values by ``deliver``)."""
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
        batches = read_delta_file(options, entry.path, entry.size, columns, lo, hi)
        yield from deliver(options, part, entry, batches, schema)
