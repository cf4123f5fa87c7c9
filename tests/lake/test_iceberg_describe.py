"""``kappa table describe --iceberg``: snapshot, files, rows, event-time range, delete files
and the files a typical slice overlaps, from metadata only, checked against the tables as
written (tests/iceberg_tables.py)."""

from __future__ import annotations

import json
from pathlib import Path

from iceberg_tables import catalog_props, equality_delete, position_delete, write_table
from typer.testing import CliRunner

from kappaplus.cli import app
from kappaplus.lake.iceberg_describe import describe_iceberg, iceberg_lines


def test_describe_counts_files_rows_range_and_deletes(tmp_path: Path) -> None:
    props = catalog_props(tmp_path / "catalog")
    day = write_table(props, "db.by_day", "day", per_day=200)
    flat = position_delete(write_table(props, "db.flat", "none", per_day=200))
    d = describe_iceberg("db.by_day", props, "ts", slice_rows=100)
    assert d.rows == len(day.rows) and d.data_files == 6 and d.position_delete_files == 0
    assert d.ts_min == int(day.rows["ts"].min().value // 1000)
    assert d.ts_max == int(day.rows["ts"].max().value // 1000)
    f = describe_iceberg("db.flat", props, "ts", slice_rows=100)
    assert f.position_delete_files == 1 and f.data_files == 6
    # files written out of event-time order, not partitioned by time: every slice reads
    # (nearly) every file; by day, a slice reads the day's two files
    assert f.files_per_slice_median >= 5
    assert d.files_per_slice_median <= 2
    assert len(flat.rows) < f.rows  # the deleted rows are still counted in the data files
    assert f.equality_delete_files == 0


def test_describe_says_equality_deletes_are_applied(tmp_path: Path) -> None:
    props = catalog_props(tmp_path / "catalog")
    written = write_table(props, "db.eq", "none", per_day=50)
    written, _ = equality_delete(written, {"id": [1, 2, 3]})
    d = describe_iceberg("db.eq", props, "ts")
    assert d.equality_delete_files == 1 and d.position_delete_files == 0
    assert d.rows == 150 and len(written.rows) == 147
    text = "\n".join(iceberg_lines(d))
    assert "1 equality" in text and "equality deletes are applied" in text
    assert "refused" not in text


def test_cli_describe_iceberg(tmp_path: Path) -> None:
    props = catalog_props(tmp_path / "catalog")
    write_table(props, "db.cli", "bucket", per_day=50)
    runner = CliRunner()
    result = runner.invoke(
        app, ["table", "describe", "db.cli", "--iceberg", "--catalog", json.dumps(props)]
    )
    assert result.exit_code == 0, result.output
    assert "snapshot" in result.output and "a slice overlaps" in result.output
    shown = runner.invoke(
        app,
        ["table", "describe", "db.cli", "--catalog", json.dumps(props), "--json", "-e", "nope"],
    )
    assert shown.exit_code == 2 and "nope" in shown.output


def test_register_an_iceberg_table_written_elsewhere(tmp_path: Path) -> None:
    """A table another engine wrote (here: another catalog) is registered by its directory
    in a second catalog, reads the same rows there, and a name taken is refused."""
    from iceberg_tables import open_catalog

    from kappaplus.lake.iceberg_register import register_iceberg

    source = catalog_props(tmp_path / "elsewhere")
    written = write_table(source, "db.rides", "day", per_day=40)
    table = open_catalog(source).load_table("db.rides")
    directory = table.location()
    ours = catalog_props(tmp_path / "ours")
    runner = CliRunner()
    result = runner.invoke(
        app,
        ["table", "register", "lake.rides", "--iceberg", "-l", directory, "--catalog"]
        + [json.dumps(ours)],
    )
    assert result.exit_code == 0, result.output
    assert table.metadata_location in result.output.replace("\n", "")
    again = open_catalog(ours).load_table("lake.rides")
    assert again.current_snapshot().snapshot_id == table.current_snapshot().snapshot_id
    assert again.scan().to_arrow().num_rows == len(written.rows)
    d = describe_iceberg("lake.rides", ours, "ts")
    assert d.rows == len(written.rows)
    taken = runner.invoke(
        app,
        ["table", "register", "lake.rides", "--iceberg", "-l", directory, "--catalog"]
        + [json.dumps(ours)],
    )
    assert taken.exit_code != 0 and "--replace" in taken.output
    assert register_iceberg("lake.rides", table.metadata_location, ours, replace=True).replaced
    empty = runner.invoke(
        app,
        ["table", "register", "lake.none", "--iceberg", "-l", str(tmp_path), "--catalog"]
        + [json.dumps(ours)],
    )
    assert empty.exit_code == 2 and "--location" in empty.output
    assert "metadata" in empty.output
