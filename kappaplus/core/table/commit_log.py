"""What the exactly-once Hive sink leaves for readers that list files instead of asking
the metastore (the ``kappa_hive`` streaming source): published file names that carry
(query, batch), and one commit marker per batch written after everything else.

A file-listing reader that honours these sees whole committed batches only, like a reader
through the catalog in ``"batch"`` visibility: a published file counts once the marker
``<location>/_kappa_commits/<query>/<batch>`` of its batch exists. Pure Python, no Spark,
so the source's planner process can use it.

>>> published_name("ride_counts", 7, 0, ".snappy.parquet")
'kappa-ride_counts-00000000000000000007-00000.snappy.parquet'
>>> parse_published("kappa-ride_counts-00000000000000000007-00000.snappy.parquet")
('ride_counts', 7)
>>> parse_published("part-00000-1b2c.snappy.parquet") is None
True
"""

from __future__ import annotations

import re

COMMITS_DIR = "_kappa_commits"
"""Directory under the table location holding ``<query>/<batch>`` commit markers."""

_PUBLISHED = re.compile(r"^kappa-(?P<query>[A-Za-z0-9_][A-Za-z0-9_.-]*)-(?P<batch>\d{20})-\d{5}\.")


def published_name(query: str, batch_id: int, index: int, suffix: str) -> str:
    """The name under which the sink publishes the ``index``-th file of a batch."""
    return f"kappa-{query}-{batch_id:020d}-{index:05d}{suffix}"


def parse_published(name: str) -> tuple[str, int] | None:
    """``(query, batch id)`` of a file name the sink published; None for any other name."""
    match = _PUBLISHED.match(name)
    if match is None:
        return None
    return match["query"], int(match["batch"])


def commit_marker(location: str, query: str, batch_id: int) -> str:
    """Path of the marker that commits batch ``batch_id`` of ``query`` to the table."""
    return f"{location}/{COMMITS_DIR}/{query}/{batch_id}"
