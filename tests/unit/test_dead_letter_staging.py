"""One way to stage dead letters, in one schema: a lake source's unplaceable rows, a
bootstrap's undecodable records and a stream's tapped failures are all staged by
:func:`kappaplus.dead_letters.staging.stage` in :data:`~kappaplus.codecs.DLQ_ARROW_SCHEMA`."""

from __future__ import annotations

import ast
import json
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from kappaplus.codecs import DLQ_ARROW_SCHEMA
from kappaplus.dead_letters.staging import lake_dead_letters, read_staged, stage

PACKAGE = Path(__import__("kappaplus").__file__).parent
NOW = datetime(2024, 3, 1, 12, tzinfo=UTC)


def test_lake_rows_become_dead_letters_in_the_one_schema(tmp_path: Path) -> None:
    rows = pa.table(
        {
            "id": [1, 2],
            "ts": pa.array([None, 5], pa.int64()),
            "kafka_topic": ["rides", "rides"],
            "kafka_partition": pa.array([0, 3], pa.int32()),
            "kafka_offset": pa.array([10, 11], pa.int64()),
        }
    )
    dead = lake_dead_letters(
        rows,
        ["event time is null", "outside"],
        table="lake.rides",
        source_file="/w/a.parquet",
        job="j",
        now=NOW,
    )
    assert dead.schema.equals(DLQ_ARROW_SCHEMA)
    assert [json.loads(v)["id"] for v in dead.column("value").to_pylist()] == [1, 2]
    assert dead.column("reason").to_pylist()[0] == (
        "event time is null (table lake.rides, file /w/a.parquet)"
    )
    assert dead.column("partition").to_pylist() == [0, 3]
    assert dead.column("offset").to_pylist() == [10, 11]
    assert set(dead.column("job").to_pylist()) == {"j"}

    # a replayed unit of work replaces its file whole: no duplicates
    stage(dead, str(tmp_path), "unit.parquet")
    stage(dead, str(tmp_path), "unit.parquet")
    assert pq.read_table(tmp_path / "unit.parquet").num_rows == 2
    assert read_staged(str(tmp_path)).num_rows == 2
    assert [p.name for p in tmp_path.iterdir()] == ["unit.parquet"], "no temporary file left"


def test_nothing_staged_reads_as_an_empty_table_of_the_schema(tmp_path: Path) -> None:
    assert read_staged(str(tmp_path / "none")).schema.equals(DLQ_ARROW_SCHEMA)


def test_every_stager_goes_through_the_staging_api() -> None:
    # the lake delivery, the hybrid reader and the stream's tap stage; none writes Parquet
    # of dead letters itself, and no ``_kappa_*`` staging columns are left anywhere
    stagers = [
        PACKAGE / "connectors" / "lake" / "delivery.py",
        PACKAGE / "connectors" / "hybrid" / "reader.py",
        PACKAGE / "runtime" / "side_outputs" / "dead_letter_tap.py",
    ]
    for path in stagers:
        source = path.read_text()
        called = {
            node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call)
        }
        assert "stage" in called, f"{path.name} does not stage through the staging API"
        assert "write_table" not in called, path.name
        assert "_kappa_reason" not in source
    names = [
        node.name
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and node.name == "write_dead_letters"
    ]
    assert names == ["write_dead_letters"], "one write_dead_letters (the targets' writer)"
