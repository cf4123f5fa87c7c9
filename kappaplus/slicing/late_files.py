"""The files a query's slices have delivered, and those that appear later in ranges already
delivered: counted and logged by name, never mixed into a later slice.

The planner includes each file it slices (:meth:`DeliveredFiles.include`); after a restart
it recovers them from the manifest chain (:meth:`DeliveredFiles.seed`); before each slice
it audits the table's listing (:meth:`DeliveredFiles.audit`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from kappaplus.core.timeutil import iso
from kappaplus.slicing.files import DataFile
from kappaplus.slicing.manifest import ManifestStore

log = logging.getLogger(__name__)


class DeliveredFiles:
    """What one query's slices have delivered, by file, and the late files reported.

    ``rows_in(file, lo, hi)`` counts a file's rows with event time in ``[lo, hi)``.
    """

    def __init__(
        self, table: str, store: ManifestStore, rows_in: Callable[[DataFile, int, int], int]
    ) -> None:
        self.table = table
        self.store = store
        self.rows_in = rows_in
        self.owned: set[str] = set()  # files some manifest has included
        self._reported: set[tuple[str, int, int]] = set()  # late files already reported
        self._seeded = False
        self._audited: list[DataFile] | None = None  # the listing last audited

    def include(self, paths: Iterable[str]) -> None:
        """Files a slice's manifest includes."""
        self.owned.update(paths)

    def seed(self, digest: str | None) -> None:
        """After a restart, recover the files earlier slices included from the manifest
        chain ending at ``digest`` (once per query)."""
        if self._seeded:
            return
        self._seeded = True
        while digest:
            manifest = self.store.get(digest)
            self.owned.update(e.path for e in manifest.entries)
            digest = manifest.previous

    def audit(self, files: list[DataFile], origin: int, hi: int) -> tuple[int, int]:
        """Count (and log) files with rows in ``[origin, hi)`` that no slice delivered.

        A listing already audited finds nothing new: the range delivered since was planned
        from that same listing, so every file of it with rows there is in a manifest."""
        if files is self._audited:
            return 0, 0
        self._audited = files
        found_files = found_rows = 0
        for f in files:
            key = (f.path, f.size, f.mtime_ns)
            if f.path in self.owned or key in self._reported or not f.admits(origin, hi):
                continue
            rows = self.rows_in(f, origin, hi)
            if rows:
                self._reported.add(key)
                found_files += 1
                found_rows += rows
                log.warning(
                    "table %r: file %s appeared after its event-time range was delivered; "
                    "%d rows before %s are not part of this run (re-run that range to include them)",  # noqa: E501
                    self.table,
                    f.path,
                    rows,
                    iso(hi),
                )
        return found_files, found_rows
