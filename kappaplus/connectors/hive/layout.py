"""Mapping Hive partition directories to event-time (or arrival-time) ranges.

A format such as ``dt=%Y-%m-%d/hr=%H`` says that ``dt=2024-01-01/hr=05`` holds the hour
``[2024-01-01T05:00Z, 2024-01-01T06:00Z)``. The finest directive sets the partition length.

>>> layout = PartitionTimeLayout("dt=%Y-%m-%d/hr=%H")
>>> [iso(t) for t in layout.range_of("dt=2024-01-01/hr=05")]
['2024-01-01T05:00:00Z', '2024-01-01T06:00:00Z']
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from urllib.parse import unquote

from kappaplus.core.errors import DataError
from kappaplus.core.timeutil import iso, to_micros  # noqa: F401  (iso is used by the doctest)

# Finest directive first: the first found sets the partition length.
_GRANULARITY = [
    ("%S", "second"),
    ("%M", "minute"),
    ("%H", "hour"),
    ("%d", "day"),
    ("%j", "day"),
    ("%m", "month"),
    ("%Y", "year"),
]
_DATE_NAMES = ("dt", "date", "ds", "day", "event_date", "date_key", "datestr")
_HOUR_NAMES = ("hr", "hour", "hh", "event_hour")


@dataclass(frozen=True)
class PartitionTimeLayout:
    """A partition path format with strftime directives, e.g. ``dt=%Y-%m-%d/hr=%H``."""

    pattern: str

    @property
    def depth(self) -> int:
        """How many directory levels the format spans."""
        return self.pattern.count("/") + 1

    @property
    def granularity(self) -> str:
        for directive, unit in _GRANULARITY:
            if directive in self.pattern:
                return unit
        raise DataError(f"partition time format {self.pattern!r} has no date/time directive")

    def range_of(self, relative_path: str) -> tuple[int, int]:
        """The half-open time range ``[lo, hi)`` in microseconds of one partition directory
        (kept: a planner asks again for every directory at every micro-batch)."""
        return _range_of(self, relative_path)

    def _compute_range(self, relative_path: str) -> tuple[int, int]:
        segments = [unquote(s) for s in relative_path.strip("/").split("/")]
        head = "/".join(segments[: self.depth])
        try:
            start = datetime.strptime(head, self.pattern).replace(tzinfo=UTC)
        except ValueError as exc:
            raise DataError(
                f"partition {relative_path!r} does not match partitionTimeFormat "
                f"{self.pattern!r}: {exc}"
            ) from exc
        return to_micros(start), to_micros(_advance(start, self.granularity))


@lru_cache(maxsize=1 << 16)
def _range_of(layout: PartitionTimeLayout, relative_path: str) -> tuple[int, int]:
    return layout._compute_range(relative_path)


def _advance(moment: datetime, unit: str) -> datetime:
    if unit == "year":
        return moment.replace(year=moment.year + 1)
    if unit == "month":
        year, month = divmod(moment.month, 12)
        return moment.replace(year=moment.year + year, month=month + 1)
    seconds = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}[unit]
    return datetime.fromtimestamp(moment.timestamp() + seconds, tz=UTC)


def infer_layout(partition_columns: list[tuple[str, str]]) -> str | None:
    """Guess a partition time format from partition column names and Spark types.

    ``[("dt", "string"), ("hr", "int")]`` gives ``dt=%Y-%m-%d/hr=%H``; anything not
    recognisable gives ``None`` (the partitions are then not mapped to time).
    """
    if not partition_columns:
        return None
    first, first_type = partition_columns[0]
    if first.lower() not in _DATE_NAMES and first_type != "date":
        return None
    pattern = f"{first}=%Y-%m-%d"
    if len(partition_columns) > 1 and partition_columns[1][0].lower() in _HOUR_NAMES:
        pattern += f"/{partition_columns[1][0]}=%H"
    return pattern


def parse_partition_values(relative_path: str) -> dict[str, str]:
    """``dt=2024-01-01/hr=05`` -> ``{"dt": "2024-01-01", "hr": "05"}`` (Hive-unescaped)."""
    values: dict[str, str] = {}
    for segment in relative_path.strip("/").split("/"):
        if "=" in segment:
            key, _, value = segment.partition("=")
            values[unquote(key)] = unquote(value)
    return values


_HIDDEN = re.compile(r"^[._]")


def is_hidden(name: str) -> bool:
    """Files and directories that readers skip: ``_SUCCESS``, ``.crc``, ``_temporary``, ..."""
    return bool(_HIDDEN.match(name))
