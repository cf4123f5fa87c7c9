"""``kappa sql``: a newcomer looks at what a run wrote, in the commands' catalog; a
statement Spark refuses is one line and exit 2."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from catalog_notes import noted_elsewhere
from typer.testing import CliRunner

from kappaplus.cli import app


def _sql(spark: Any, monkeypatch: pytest.MonkeyPatch, *args: str) -> Any:
    """``kappa sql`` in this process, on the test session (stopping the command's own
    session would end the other tests' Spark)."""
    import kappaplus.cli.run
    import kappaplus.session

    monkeypatch.setattr(kappaplus.session, "create_session", lambda *a, **k: spark)
    monkeypatch.setattr(kappaplus.cli.run, "_stop_quietly", lambda s: None)
    return CliRunner().invoke(app, ["sql", *args])


def test_rows_of_a_table_and_a_refused_statement(  # type: ignore[no-untyped-def]
    spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = f"looked_at_{uuid.uuid4().hex[:8]}"
    spark.createDataFrame(
        [(i, f"[city-{i}]") for i in range(5)], "n bigint, city string"
    ).write.saveAsTable(table)

    shown = _sql(spark, monkeypatch, f"SELECT n, city FROM {table} ORDER BY n", "-n", "3")
    assert shown.exit_code == 0, shown.output
    assert "[city-0]" in shown.output and "[city-2]" in shown.output  # as written
    assert "[city-3]" not in shown.output and "first 3 rows" in shown.output

    rows = _sql(spark, monkeypatch, f"SELECT n FROM {table} ORDER BY n", "--json")
    assert rows.exit_code == 0, rows.output
    assert [json.loads(line) for line in rows.output.splitlines()] == [{"n": i} for i in range(5)]

    missing = _sql(spark, monkeypatch, f"SELECT * FROM {table}_nope")
    assert missing.exit_code == 2
    assert "TABLE_OR_VIEW_NOT_FOUND" in missing.output and "Traceback" not in missing.output
    bad = _sql(spark, monkeypatch, "SELEC 1")
    assert bad.exit_code == 2 and "PARSE_SYNTAX_ERROR" in bad.output


def test_a_table_of_the_other_catalog_is_named_with_the_way_out(  # type: ignore[no-untyped-def]
    spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After `kappa down` the commands use the embedded catalog: a table registered in the
    local metastore server is "not found", and the message says where it is."""
    name = f"default.stopped_{uuid.uuid4().hex[:6]}"
    with noted_elsewhere(name):
        missing = _sql(spark, monkeypatch, f"SELECT * FROM {name}")
    assert missing.exit_code == 2, missing.output
    flat = " ".join(missing.output.split())
    assert "registered in the metastore server thrift://127.0.0.1:1" in flat, flat
