"""Listing a Hive table's files (no Spark): what counts as a data file and the event times
each may hold, from its partition directory."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kappaplus.connectors.hive.files import list_data_files
from kappaplus.connectors.hive.layout import PartitionTimeLayout

HOUR = 3_600_000_000
BASE = int(datetime(2024, 3, 1, tzinfo=UTC).timestamp()) * 1_000_000


def write(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": [1]}), path)


def test_hidden_directories_and_files_stray_folders_and_hour_ranges(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "t"
    kept = [
        root / "dt=2024-03-01" / f"hr={h:02d}" / f"part-{n}.parquet" for h in (0, 5) for n in (0, 1)
    ]
    for path in kept:
        write(path)
    write(root / "dt=2024-03-01" / "hr=07" / "_temporary" / "0" / "part-9.parquet")
    write(root / "dt=2024-03-01" / "hr=07" / ".part-8.parquet")
    write(root / "_kappa_commits" / "q" / "0")
    write(root / ".hive-staging_x" / "dt=2024-03-01" / "hr=09" / "part-7.parquet")
    write(root / "stray" / "part-6.parquet")
    (root / "dt=2024-03-01" / "hr=05" / "empty.parquet").write_bytes(b"")
    layout = PartitionTimeLayout("dt=%Y-%m-%d/hr=%H")
    with caplog.at_level(logging.WARNING):
        files = list_data_files(str(root), ("dt", "hr"), layout, 0, False, "t")
        again = list_data_files(str(root), ("dt", "hr"), layout, 0, False, "t")
    assert sorted(f.path for f in files) == sorted(str(p) for p in kept)
    assert again == files
    assert "stray/part-6.parquet" in caplog.text
    for f in files:
        hour = int(f.partition_values["hr"])
        assert (f.admissible_lo, f.admissible_hi) == (BASE + hour * HOUR, BASE + (hour + 1) * HOUR)
        assert f.partition_values == {"dt": "2024-03-01", "hr": f"{hour:02d}"}
    late = list_data_files(str(root), ("dt", "hr"), layout, HOUR, True, "t")
    assert {(f.admissible_lo, f.admissible_hi) for f in late} == {
        (BASE - HOUR, BASE + HOUR),
        (BASE + 4 * HOUR, BASE + 6 * HOUR),
    }, "arrival partitions admit events up to maxLateness before them"
