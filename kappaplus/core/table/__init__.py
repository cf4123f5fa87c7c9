"""What sources and sinks share about tables, and tables users already have.

- The batch partition column and the commit log of published files
  (:mod:`kappaplus.core.table.commit_log`), shared by the table writers (the exactly-once Hive
  sink, the archiver) and the table reader (the ``kappa_hive`` source).
- Which catalog a table lives in (:mod:`kappaplus.core.table.catalogs`); what a table name is
  (:data:`TABLE_NAME`); a table's storage through Hadoop's FileSystem
  (:mod:`kappaplus.core.table.hadoop_fs`).

Registering and describing a user's own tables is one layer up, in :mod:`kappaplus.lake`.

Imports no source, sink or runtime module.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")
"""A table name every command accepts: ``table`` or ``database.table`` (letters, digits, ``_``)."""

BATCH_COLUMN = "kappa_batch"
"""The batch-id partition column the Hive sink adds in ``"batch"`` visibility (BIGINT)."""

DEFAULT_PARTITION_COLUMN = "dt"
"""The (date) time partition column of a table the Hive sink writes, unless one is named."""

HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
"""The directory value Hive gives a partition whose column is NULL."""

Visibility = Literal["batch", "partition"]
"""What a reader of a table the Hive sink writes sees: whole batches (a ``kappa_batch``
partition column) or one time partition at a time."""
VISIBILITIES: tuple[str, ...] = get_args(Visibility)
DEFAULT_VISIBILITY: Visibility = "batch"
