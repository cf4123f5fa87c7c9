"""The Hive file lister and the slice planner over it.

The planner itself (:class:`kappaplus.slicing.planner.SlicePlanner`) knows no lake format;
this module feeds it a Hive table: the files under the table's location, the event-time
range each time partition admits (event or arrival partitions, widened by the maximum
lateness and earliness), and Parquet row-group / ORC stripe statistics from the footers.
"""

from __future__ import annotations

import numpy as np

from kappaplus.connectors.hive.files import event_times, file_stats, list_data_files
from kappaplus.connectors.hive.layout import PartitionTimeLayout
from kappaplus.connectors.lake.options import LakeSourceOptions, PartitionTimeKind
from kappaplus.slicing.files import DataFile, RowGroupStats
from kappaplus.slicing.manifest import ManifestEntry
from kappaplus.slicing.planner import SlicePlanner

__all__ = ["HiveFileLister", "HiveSlicePlanner"]


class HiveFileLister:
    """A Hive table's files, partition ranges and footer statistics (a
    :class:`~kappaplus.slicing.planner.FileLister`)."""

    def __init__(self, options: LakeSourceOptions) -> None:
        self.options = options
        pattern = options.partition_time_format
        self.layout = PartitionTimeLayout(pattern) if pattern else None

    def files(self) -> list[DataFile]:
        o = self.options
        return list_data_files(
            o.location,
            o.partition_columns,
            self.layout,
            o.max_lateness,
            o.partition_time_kind is PartitionTimeKind.ARRIVAL,
            o.table,
            max_earliness=o.max_earliness,
        )

    def stats(self, f: DataFile) -> tuple[RowGroupStats, ...]:
        o = self.options
        return file_stats(
            f.path, f.size, f.mtime_ns, o.format, o.event_time_column, o.location, o.storage
        )

    def stats_of_entry(self, entry: ManifestEntry) -> tuple[RowGroupStats, ...]:
        o = self.options
        return file_stats(
            entry.path,
            entry.size,
            entry.mtime_ns,
            o.format,
            o.event_time_column,
            o.location,
            o.storage,
        )

    def times(self, f: DataFile, group: int) -> np.ndarray:
        o = self.options
        return event_times(
            f.path, f.size, f.mtime_ns, o.format, o.event_time_column, o.location, group, o.storage
        )

    def partition_frontier(self, files: list[DataFile]) -> int | None:
        """The end of the newest time partition less the lateness it admits (and, for
        arrival-time partitions, the earliness); None without time partitions."""
        if self.layout is None or not files:
            return None
        o = self.options
        # Event-time partitions: admissible_hi was widened by the lateness. Arrival-time
        # partitions: events before hi - L may still arrive in the newest partition.
        # Arrival-time partitions also admit max_earliness after their end.
        newest = max(f.admissible_hi for f in files) - o.max_lateness
        if o.partition_time_kind is PartitionTimeKind.ARRIVAL:
            newest -= o.max_earliness
        return newest


class HiveSlicePlanner(SlicePlanner):
    """The slice planner over a Hive table's lister, with the table's partition-time
    layout at hand."""

    options: LakeSourceOptions

    def __init__(self, options: LakeSourceOptions) -> None:
        lister = HiveFileLister(options)
        super().__init__(options, lister)
        self.layout = lister.layout
