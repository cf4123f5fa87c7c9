"""How often the slice planner lists a table (no Spark): a bounded run plans from one
listing for ``listingInterval``, lists afresh at its end, and a stream that follows the
table lists every micro-batch. Real parquet files, written with pyarrow."""

from __future__ import annotations

from pathlib import Path

import pytest

from kappaplus.connectors.hive.planner import HiveSlicePlanner
from kappaplus.connectors.lake.options import LakeSourceOptions
from kappaplus.slicing.files import DataFile
from tests.unit.test_planning_properties import HOUR, options, write_table

MINUTE = 60 * 1_000_000


class CountingPlanner(HiveSlicePlanner):
    """The Hive planner, counting the table's listings."""

    listings = 0

    def __init__(self, opts: LakeSourceOptions) -> None:
        super().__init__(opts)
        files = self.lister.files

        def counted() -> list[DataFile]:
            self.listings += 1
            return files()

        self.lister.files = counted  # type: ignore[method-assign]


def run(planner: HiveSlicePlanner, *, before_slice: int = -1, act=None) -> list[dict]:  # type: ignore[no-untyped-def]
    """Plan every micro-batch to the end; ``act()`` runs before the ``before_slice``-th."""
    offset = planner.initial_offset()
    planned: list[dict] = []
    for _ in range(1_000):
        if len(planned) == before_slice and act is not None:
            act()
        nxt = planner.next(offset, None)
        if nxt == offset:
            return planned
        planned.append(nxt)
        offset = nxt
    raise AssertionError("the planner did not reach the end")


def hourly_table(root: Path) -> None:
    # 25 files, one per hour, 30 rows each, one row group per file: the runs read 24 hours
    # of it, and the 25th tells the planner the table is complete to their end
    write_table(root, [[h * 3600 + 120 * i for i in range(30)] for h in range(25)], 100)


def test_a_bounded_run_lists_once_and_again_at_its_end(tmp_path: Path) -> None:
    root = tmp_path / "t"
    root.mkdir()
    hourly_table(root)
    opts = options(root, tmp_path / "m", ending_timestamp=24 * HOUR)
    planner = CountingPlanner(opts)
    planned = run(planner)
    slices = [o for o in planned if o["phase"] == "data" and o.get("manifest")]
    assert len(slices) == 24  # one per hour (maxEventTimePerTrigger)
    # initial offset, the first slice's call (a listing younger than the interval is kept
    # from then on), and the end of the input
    assert planner.listings <= 3, planner.listings

    every = CountingPlanner(
        options(root, tmp_path / "m0", ending_timestamp=24 * HOUR, listing_interval=0)
    )
    assert run(every) == planned  # the same slices, listed before each
    assert every.listings >= 24


def test_a_stream_that_follows_the_table_lists_every_micro_batch(tmp_path: Path) -> None:
    root = tmp_path / "t"
    root.mkdir()
    hourly_table(root)
    planner = CountingPlanner(options(root, tmp_path / "m", ending_timestamp=None))
    planned = run(planner)
    assert len(planned) >= 23
    assert planner.listings >= len(planned)


@pytest.mark.parametrize("interval", [0, 30 * MINUTE])
def test_a_file_landing_during_a_bounded_run_is_read_or_reported_never_lost(
    tmp_path: Path, interval: int
) -> None:
    root = tmp_path / "t"
    root.mkdir()
    hourly_table(root)
    opts = options(
        root,
        tmp_path / "m",
        ending_timestamp=24 * HOUR,
        listing_interval=interval,
        watermark_delay=MINUTE,  # the run ends with marker batches, whose offsets report
    )
    planner = HiveSlicePlanner(opts)

    def land() -> None:  # 7 rows in hour 20, while the run plans hour 2
        write_table(root / "late", [[20 * 3600 + 60 * i for i in range(7)]], 100)

    (root / "late").mkdir()
    planned = run(planner, before_slice=2, act=land)
    late = [f for f in planner.listing() if "/late/" in f.path]
    assert len(late) == 1
    read = any(late[0].path in str(o) for o in planned) or any(
        late[0].path in entry.path
        for o in planned
        if o.get("manifest")
        for entry in planner.store.get(o["manifest"]).entries
    )
    reported = planned[-1]["lateRows"]
    if interval == 0:
        assert read and reported == 0  # listed before hour 20's slice: read
    else:
        assert not read and reported == 7  # planned from the kept listing: reported at the end


def test_a_manifest_is_the_same_text_as_before() -> None:
    """Manifests are named by the hash of their text: the text must not change with the
    code that writes it (a replay after an upgrade stores the same name)."""
    import json
    from dataclasses import asdict

    from kappaplus.slicing.manifest import ManifestEntry, SliceManifest

    entry = ManifestEntry("a/b.parquet", 10, 20, {"dt": "2024-03-01"}, 0, 5, [0, 2], [1])
    manifest = SliceManifest("t", 1, 2, [entry, entry], "before")
    assert manifest.to_json() == json.dumps(asdict(manifest), sort_keys=True, separators=(",", ":"))
