"""Slice manifests: the exact files and row groups a slice reads, stored before it runs.

A slice's offset names its manifest by content hash. Replaying the slice after a crash
reads the manifest, not a new listing, so files added or removed since cannot change
what the slice delivers. Manifests chain to their predecessor so a restarted query can
recover every file it has already delivered.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from functools import cached_property

import pyarrow.fs as pafs

from kappaplus.core.errors import ReplayError
from kappaplus.core.temp_names import temporary_name
from kappaplus.slicing.files import DataFile, RowGroupStats


@dataclass(frozen=True)
class ManifestEntry:
    """One file of a slice.

    ``row_groups`` are delivered (rows with event time in the slice and in the admissible
    range); ``route_row_groups`` are scanned by the slice that *owns* the file for rows
    that no slice can deliver (null event time, event time outside the admissible range).
    """

    path: str
    size: int
    mtime_ns: int
    partition_values: dict[str, str]
    admissible_lo: int
    admissible_hi: int
    row_groups: list[int]
    route_row_groups: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class SliceManifest:
    """The files of one event-time slice ``[lo, hi)`` and the manifest before it."""

    table: str
    lo: int
    hi: int
    entries: list[ManifestEntry]
    previous: str | None

    def to_json(self) -> str:
        return self._json

    @cached_property
    def _json(self) -> str:
        # the fields as dataclasses.asdict gives them (the same text, so the same digest),
        # without its deep copy: a year's slice has hundreds of entries
        raw = {
            "table": self.table,
            "lo": self.lo,
            "hi": self.hi,
            "entries": [vars(e) for e in self.entries],
            "previous": self.previous,
        }
        return json.dumps(raw, sort_keys=True, separators=(",", ":"))

    @property
    def digest(self) -> str:
        return hashlib.sha256(self._json.encode()).hexdigest()[:32]

    @classmethod
    def from_json(cls, text: str) -> SliceManifest:
        raw = json.loads(text)
        entries = [ManifestEntry(**e) for e in raw.pop("entries")]
        return cls(entries=entries, **raw)


class ManifestStore:
    """Content-addressed manifests in a directory (local path or any pyarrow filesystem URI)."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")
        if "://" in root:
            self.fs, self.base = pafs.FileSystem.from_uri(root)
        else:
            self.fs, self.base = pafs.LocalFileSystem(), os.path.abspath(root)

    def _path(self, digest: str) -> str:
        return f"{self.base}/{digest[:2]}/{digest}.json"

    def put(self, manifest: SliceManifest) -> str:
        """Store ``manifest`` (idempotent: same content, same name) and return its digest."""
        digest = manifest.digest
        path = self._path(digest)
        if self.fs.get_file_info(path).type == pafs.FileType.File:
            return digest
        folder, name = path.rsplit("/", 1)
        self.fs.create_dir(folder, recursive=True)
        tmp = f"{folder}/{temporary_name(name)}"
        with self.fs.open_output_stream(tmp) as out:
            out.write(manifest.to_json().encode())
        self.fs.move(tmp, path)
        return digest

    def get(self, digest: str) -> SliceManifest:
        """Load a manifest; a missing one means the slice cannot be replayed exactly."""
        path = self._path(digest)
        try:
            with self.fs.open_input_stream(path) as handle:
                return SliceManifest.from_json(handle.read().decode())
        except (FileNotFoundError, OSError) as exc:
            raise ReplayError(
                f"slice manifest {digest} is missing from {self.root!r} ({exc}); the batch "
                "cannot be replayed exactly. Keep manifestDir with the checkpoint."
            ) from exc


def slice_entries(
    files: list[DataFile],
    lo: int,
    hi: int,
    origin: int,
    end: int,
    owned: Collection[str],
    stats: Callable[[DataFile], tuple[RowGroupStats, ...]],
) -> list[ManifestEntry]:
    """The manifest entries of the slice ``[lo, hi)`` of a run planned from ``origin`` to
    ``end``: each file that admits the slice with the row groups it delivers there, and,
    for a file no earlier slice owns (``owned``), the row groups holding rows no slice can
    deliver (null or unknown event times, or event times outside the file's admissible
    range but within the run), which this slice then routes."""
    entries = []
    for f in files:
        if not f.admits(lo, hi):
            continue
        a, b = max(lo, f.admissible_lo), min(hi, f.admissible_hi)
        groups = stats(f)
        deliver = [g.index for g in groups if g.may_overlap(a, b)]
        route: list[int] = []
        if f.path not in owned:  # this slice owns the file's undeliverable rows
            route = [
                g.index
                for g in groups
                if g.may_have_nulls
                or g.ts_min is None
                or g.ts_max is None
                or (g.ts_min < f.admissible_lo and g.ts_max >= origin)
                or (g.ts_max >= f.admissible_hi and g.ts_min < end)
            ]
        if deliver or route:
            entries.append(
                ManifestEntry(
                    f.path,
                    f.size,
                    f.mtime_ns,
                    f.partition_values,
                    f.admissible_lo,
                    f.admissible_hi,
                    deliver,
                    route,
                )
            )
    return entries
