"""Two queries of one run plan the same slice of a shared input at once, in one process (the
slice planner serves every query of the driver): each stores the same content-addressed
manifest. Both must succeed, and leave one readable manifest and no temporary file."""

from __future__ import annotations

import threading
from pathlib import Path

from kappaplus.slicing.manifest import ManifestStore, SliceManifest


def manifest(lo: int) -> SliceManifest:
    return SliceManifest(table="db.t", lo=lo, hi=lo + 10, entries=[], previous=None)


def test_threads_storing_the_same_manifest_at_once_all_succeed(tmp_path: Path) -> None:
    store = ManifestStore(str(tmp_path))
    threads_per_manifest, manifests = 6, 40
    failures: list[BaseException] = []

    def put(m: SliceManifest, start: threading.Barrier) -> None:
        start.wait()
        try:
            store.put(m)
        except BaseException as exc:  # noqa: BLE001 - what the test counts
            failures.append(exc)

    for lo in range(manifests):
        start = threading.Barrier(threads_per_manifest)
        threads = [
            threading.Thread(target=put, args=(manifest(lo), start))
            for _ in range(threads_per_manifest)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert failures == []
    stored = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    assert len(stored) == manifests and all(name.endswith(".json") for name in stored), stored
    assert store.get(manifest(7).digest).lo == 7
