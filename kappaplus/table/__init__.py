"""What the table writers (the exactly-once Hive sink, the archiver) and the table readers
(the ``kappa_hive`` source) share: the batch partition column and the commit log of
published files. Pure Python, no Spark; imports no source, sink or runtime module.
"""

from __future__ import annotations

BATCH_COLUMN = "kappa_batch"
"""The batch-id partition column the Hive sink adds in ``"batch"`` visibility (BIGINT)."""
