"""``kappa table describe --delta`` and ``kappa table register --delta``: version, files,
rows, event-time range, deletion vectors and the files a typical slice overlaps, from the
log only, checked against the tables as written (tests/delta_tables.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from delta_tables import add_deletion_vector, write_delta
from typer.testing import CliRunner

from kappaplus.cli import app
from kappaplus.lake.delta_describe import describe_delta


def test_describe_counts_files_rows_range_and_deletion_vectors(tmp_path: Path) -> None:
    day = write_delta(tmp_path / "a", "day", per_day=200)
    flat = write_delta(
        tmp_path / "b",
        "none",
        per_day=200,
        configuration={"delta.enableDeletionVectors": "true"},
    )
    add_deletion_vector(flat, (0, 3, 5))
    truth = day.truth()
    d = describe_delta(day.path, None, "ts", slice_rows=100)
    assert d.rows == len(truth) and d.data_files == 6 and d.partition_columns == ["day"]
    assert d.ts_min == int(truth["ts"].min().value // 1000) // 1000 * 1000  # milliseconds
    assert d.ts_max == int(truth["ts"].max().value // 1000) // 1000 * 1000
    f = describe_delta(flat.path, None, slice_rows=100)  # the one timestamp column
    assert f.files_with_deletion_vectors == 1 and f.deleted_rows == 3
    assert f.rows == len(flat.truth()) and f.version == flat.version()
    # files written out of event-time order, not partitioned by time: every slice reads
    # (nearly) every file; by day, a slice reads the day's two files
    assert f.files_per_slice_median >= 5
    assert d.files_per_slice_median <= 2


def test_cli_register_and_describe_delta(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAPPA_HOME", str(tmp_path / "home"))
    written = write_delta(tmp_path / "lake", "none", per_day=50)
    runner = CliRunner()
    registered = runner.invoke(
        app, ["table", "register", "lake.rides", "--delta", "--location", written.path]
    )
    assert registered.exit_code == 0, registered.output
    result = runner.invoke(app, ["table", "describe", "lake.rides", "--delta"])
    assert result.exit_code == 0, result.output
    assert "version" in result.output and "a slice overlaps" in result.output
    shown = runner.invoke(app, ["table", "describe", "lake.rides", "--delta", "--json"])
    assert json.loads(shown.output)["rows"] == len(written.truth())
    bad = runner.invoke(app, ["table", "describe", "lake.rides", "--delta", "-e", "nope"])
    assert bad.exit_code == 2 and "nope" in bad.output
    missing = runner.invoke(app, ["table", "describe", str(tmp_path / "none"), "--delta"])
    assert missing.exit_code == 2 and "no Delta table" in missing.output
    other = write_delta(tmp_path / "other", "none", per_day=10)
    taken = runner.invoke(
        app, ["table", "register", "lake.rides", "--delta", "--location", other.path]
    )
    assert taken.exit_code == 2 and "--replace" in taken.output


def test_describe_an_output_table_the_delta_sink_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 22: ``kappa table describe --delta`` of a job's Delta output, named by the name
    registered for the output (its backfill table: the location + ``_backfill``): rows and
    event-time range from the log equal those of the batches written."""
    from datetime import UTC, datetime, timedelta

    import pyarrow as pa

    from kappaplus.connectors.delta.sink import DeltaTableSink

    monkeypatch.setenv("KAPPA_HOME", str(tmp_path / "home"))
    runner = CliRunner()
    location = str(tmp_path / "lake" / "sessions")
    t0 = datetime(2024, 3, 1, tzinfo=UTC)
    first = pa.table(
        {"rider_id": ["r"], "session_start": pa.array([t0], pa.timestamp("us", "UTC"))}
    )
    DeltaTableSink(location, None, query="q-0").write_arrow(first, 0)  # the production table
    registered = runner.invoke(
        app, ["table", "register", "lake.sessions", "--delta", "--location", location]
    )
    assert registered.exit_code == 0, registered.output
    assert DeltaTableSink("lake.sessions", None, query="q-0").committed_batch() == 0
    sink = DeltaTableSink("lake.sessions_backfill", None, query="q-1")
    assert sink.location == location + "_backfill"
    starts = []
    for batch_id in range(3):
        times = [t0 + timedelta(hours=batch_id, minutes=7 * i) for i in range(5)]
        starts += times
        rows = pa.table(
            {
                "rider_id": [f"r{i}" for i in range(5)],
                "session_start": pa.array(times, pa.timestamp("us", tz="UTC")),
                "session_end": pa.array(
                    [t + timedelta(minutes=30) for t in times], pa.timestamp("us", tz="UTC")
                ),
            }
        )
        assert sink.write_arrow(rows, batch_id) is True
    d = describe_delta(sink.location, None, "session_start", slice_rows=100)
    assert d.rows == 15 and d.data_files == 3 and d.version == 3
    assert d.ts_min == int(min(starts).timestamp() * 1_000_000)
    assert d.ts_max == int(max(starts).timestamp() * 1_000_000)
    shown = runner.invoke(
        app, ["table", "describe", location + "_backfill", "--delta", "-e", "session_start"]
    )
    assert shown.exit_code == 0 and "15 rows" in shown.output, shown.output
    ambiguous = runner.invoke(app, ["table", "describe", location + "_backfill", "--delta"])
    assert ambiguous.exit_code == 2 and "session_start, session_end" in ambiguous.output
    unregistered = DeltaTableSink.__new__(DeltaTableSink)
    with pytest.raises(Exception, match="not a registered Delta table name"):
        unregistered.__init__("lake.nope", None, query="q")  # type: ignore[misc]
