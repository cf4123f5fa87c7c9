"""The statistics model the slice planner works on, whatever the lake format.

A table is a list of :class:`DataFile` (path, size, a fingerprint, the event-time range its
partition admits) and, per file, its :class:`RowGroupStats`: row count, bytes and
event-time min/max per Parquet row group or ORC stripe, or one entry for the whole file
when the format's metadata gives per-file bounds only (Iceberg manifests). A *file lister*
(:class:`~kappaplus.slicing.planner.FileLister`) per format produces them: the Hive lister
from partition directories and file footers, the Iceberg lister from manifests.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kappaplus.core.errors import DataError

UNBOUNDED_LO = -(2**62)
UNBOUNDED_HI = 2**62
TS_UTC = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True)
class DataFile:
    """One data file of the table with the time range its partition admits.

    ``admissible`` is the event-time range a row of this file must fall into to be
    delivered: the partition's range for event-time partitions, the partition's range
    widened by the maximum lateness for arrival-time partitions, unbounded otherwise (a
    table not partitioned by event time: the file's statistics place it).
    """

    path: str
    size: int
    mtime_ns: int
    partition_dir: str
    partition_values: dict[str, str] = field(hash=False, compare=False)
    admissible_lo: int = UNBOUNDED_LO
    admissible_hi: int = UNBOUNDED_HI

    @property
    def fingerprint(self) -> tuple[int, int]:
        return (self.size, self.mtime_ns)

    def admits(self, lo: int, hi: int) -> bool:
        """Whether the admissible range overlaps ``[lo, hi)``."""
        return self.admissible_lo < hi and self.admissible_hi > lo


@dataclass(frozen=True)
class RowGroupStats:
    """Row count, size and event-time statistics of one Parquet row group or ORC stripe
    (or of a whole file, where the format gives per-file statistics only)."""

    index: int
    num_rows: int
    num_bytes: int
    ts_min: int | None  # None: no statistics, the range is unknown
    ts_max: int | None
    null_count: int | None

    def may_overlap(self, lo: int, hi: int) -> bool:
        if self.ts_min is None or self.ts_max is None:
            return self.num_rows > 0
        return self.ts_min < hi and self.ts_max >= lo

    @property
    def may_have_nulls(self) -> bool:
        return self.null_count is None or self.null_count > 0


def to_micros_array(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Event times as int64 microseconds (UTC); nulls are removed."""
    column = column.drop_null()
    if not pa.types.is_timestamp(column.type):
        raise DataError(f"event-time values have type {column.type}, expected a timestamp")
    as_us = pc.cast(column, pa.timestamp("us", tz=column.type.tz), safe=False)
    return np.asarray(as_us.cast(pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)
