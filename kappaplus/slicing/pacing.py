"""Slices sized to a target micro-batch duration, from the batch times a run observes.

A rows target (``targetRowsPerTrigger``) fixes how much a micro-batch reads; how long it
takes depends on the job, the cluster and above all on the sinks. With
``targetBatchDuration`` the Hive source instead holds each micro-batch to about that long:
after each committed batch the rows target becomes the rows that batch read, times the
target duration over the time it took (from planning to commit, sink writes included), so
a backfill slows down by itself when its sinks do, and speeds up when they keep up.

Each step changes the rows target by at most :data:`MAX_STEP` either way, so one slow batch
(the first one pays for code generation and warm-up) cannot collapse the slices, and the
target never falls below ``min_rows``. The caps a user sets (``maxRowsPerTrigger``,
``maxBytesPerTrigger``, ``maxEventTimePerTrigger``) still apply on top of it. Slice
boundaries are recorded in the offsets as always, so a replay after a crash reads exactly
the slices the first attempt planned, whatever the timings are the second time.

Pure arithmetic on numbers the planner hands in (no clock of its own), so it is
property-tested without Spark.

Spark commits a source's batch only while it plans the next one (after ``latestOffset``),
so the slice planned from a commit is the one after next: pacing lags one batch, and each
planned slice is matched to its own commit by its end (``key``).

>>> pacer = BatchPacer(target_seconds=10.0, rows=1_000_000)
>>> pacer.planned("a", 1_000_000, now=0.0)
>>> pacer.planned("b", 1_000_000, now=40.0); pacer.committed("a", now=40.0)  # 4x too slow
>>> pacer.rows  # shrinks, by at most MAX_STEP per batch
500000
>>> pacer.planned("c", 500_000, now=80.0); pacer.committed("b", now=80.0)
>>> pacer.rows
250000
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

MAX_STEP = 2.0
"""The rows target changes by at most this factor per committed batch."""
MIN_ROWS = 1_000
"""The smallest rows target pacing goes down to by default."""


@dataclass
class BatchPacer:
    """The rows target of the next slice, from the duration of the last committed one.

    ``planned(key, rows, now)`` when a slice is planned (its end as ``key``, its estimated
    rows), ``committed(key, now)`` when Spark commits that batch; ``rows`` is then the
    target for the next slice planned.
    """

    target_seconds: float
    rows: int
    min_rows: int = MIN_ROWS
    max_step: float = MAX_STEP
    _planned: dict[Hashable, tuple[float, float]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.target_seconds > 0:
            raise ValueError(f"target_seconds must be positive, got {self.target_seconds}")
        self.rows = max(int(self.rows), self.min_rows)

    def planned(self, key: Hashable, rows: float, now: float) -> None:
        """A data slice ending at ``key`` of about ``rows`` rows was planned at ``now``
        (seconds)."""
        self._planned[key] = (now, float(rows))
        while len(self._planned) > 8:  # batches Spark never ran (a stop): forget them
            self._planned.pop(next(iter(self._planned)))

    def committed(self, key: Hashable, now: float) -> None:
        """The batch of the slice ending at ``key`` committed at ``now``: resize."""
        found = self._planned.pop(key, None)
        if found is None:
            return  # a marker batch, or a batch planned by an earlier run
        began, rows = found
        elapsed = now - began
        if elapsed <= 0 or rows <= 0:
            return
        wanted = rows * self.target_seconds / elapsed
        low, high = self.rows / self.max_step, self.rows * self.max_step
        self.rows = max(self.min_rows, int(min(max(wanted, low), high)))
