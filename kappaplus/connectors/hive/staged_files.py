"""The files of one micro-batch as the Hive sink stages and publishes them (its manifest)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StagedFile:
    """One file of a batch's manifest: where it is staged and where it is published."""

    partition: str  # the table partition it is published to, relative to the location
    staged_dir: str  # its directory under the staging ``data`` directory
    staged: str  # its staged file name
    published: str  # its published file name

    @classmethod
    def parse(cls, entry: dict[str, str]) -> StagedFile:
        # manifests of version 1 (before batch visibility) have no staged_dir
        return cls(
            entry["partition"],
            entry.get("staged_dir", entry["partition"]),
            entry["staged"],
            entry["published"],
        )
