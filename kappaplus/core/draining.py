"""Draining a streaming query: the micro-batch under way finishes, no new one starts.

``StreamingQuery.stop()`` interrupts the batch under way: correct with the project's sinks
(the batch is redone by the next run and written once), but the interrupted batch dies in
the middle of whatever it was doing (a metastore transaction, a Spark job of the sink's
``foreachBatch``) and Spark logs it as a failed query with a stack trace. A run stopped by
SIGTERM or Ctrl-C therefore drains first: the runtime creates a file on the driver and
every kappaplus source (``kappa_hive``, ``kappa_kafka``, ``kappa_hybrid``), given that
file's path as option ``drainFile``, reports no new data once the file exists
(``latestOffset`` returns its start). The batch under way commits; the query then idles
(or, under an available-now trigger, ends), and stopping it interrupts nothing.

The sources' offset planning runs in Python processes the driver starts, on the driver's
host, so a local file is seen by all of them.

>>> import tempfile, os
>>> signal = DrainSignal.under(tempfile.mkdtemp())
>>> drain_requested(signal.path)
False
>>> signal.request()
>>> drain_requested(signal.path), drain_requested(None)
(True, False)
>>> signal.clear()
>>> os.path.exists(signal.path)
False
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

DRAIN_OPTION = "drainFile"
"""The source option naming the drain file (every kappaplus source accepts it)."""


def drain_requested(path: str | None) -> bool:
    """Whether the run that gave a source ``path`` asked it to admit no new data."""
    return path is not None and os.path.exists(path)


@dataclass(frozen=True)
class DrainSignal:
    """The drain file of one run: absent until :meth:`request`, removed by :meth:`clear`."""

    path: str

    @classmethod
    def under(cls, directory: str | Path) -> DrainSignal:
        """A signal whose file is unique to this run, in ``directory`` (created)."""
        Path(directory).mkdir(parents=True, exist_ok=True)
        return cls(str(Path(directory) / f"drain-{uuid.uuid4().hex}"))

    def request(self) -> None:
        Path(self.path).touch()

    def clear(self) -> None:
        Path(self.path).unlink(missing_ok=True)
