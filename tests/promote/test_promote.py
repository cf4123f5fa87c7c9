"""``kappa promote`` (issue 24 item 4): a finished, reconciled backfill table becomes the
production table in front of readers, the previous one is kept as ``<table>_previous``,
``--undo`` puts it back, and a crash after any catalog step is completed (or undone) by
running the command again. User errors exit 2 in one or two lines."""

from __future__ import annotations

import json
import shlex
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from late_flights import (
    FLUSH_AT,
    JOB,
    LIMIT,
    START,
    config_toml,
    produce,
    stream_then_backfill,
    table_counts,
    truth,
)
from pyspark.sql import functions as F
from typer.testing import CliRunner

import kappaplus.promote.swap as swap
from kappaplus.config import load_config
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job


class Crash(Exception):
    """Stands for kill -9 right after a promotion step (nothing runs after it)."""


def _raise(error: Exception, step: str, at: str = "production_moved") -> None:
    if step == at:
        raise error


def _kappa(spark: Any, monkeypatch: pytest.MonkeyPatch, *args: str) -> Any:
    """A ``kappa`` command in this process, on the test session (the command's own session
    would be this one; stopping it would end the other tests' Spark)."""
    import kappaplus.session
    from kappaplus.cli import app

    monkeypatch.setattr(kappaplus.session, "create_session", lambda *a, **k: spark)
    monkeypatch.setattr(kappaplus.session, "stop_session", lambda s: None)
    return CliRunner().invoke(app, list(args))


def _one_or_two_lines(result: Any) -> str:
    text = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert result.output.count("error:") == 1 and "Traceback" not in result.output
    return text


def test_promote_refuses_before_spark_without_a_backfill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = config_toml(
        tmp_path, topic="t", bootstrap="127.0.0.1:1", lake="l_x", out="counts_x", late="late_x"
    )
    import kappaplus.session

    def no_spark(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("Spark started")

    monkeypatch.setattr(kappaplus.session, "create_session", no_spark)
    from kappaplus.cli import app

    result = CliRunner().invoke(app, ["promote", "late_flights:JOB", "--config", str(file)])
    text = _one_or_two_lines(result)
    assert "counts_x_backfill" in text and "--mode backfill" in text
    result = CliRunner().invoke(app, ["promote", "late_flights:JOB", "-c", str(file), "--undo"])
    assert "no promotion into counts_x to undo" in _one_or_two_lines(result)


@pytest.mark.slow  # about 3 minutes under load: a stream, a backfill, a dozen promotions
@pytest.mark.timeout(1200)
def test_promote_undo_and_recovery_from_a_crash_at_every_step(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = new_topic(prefix="promote-flights")
    file, out, _, rows, _, backfill = stream_then_backfill(spark, kafka_bootstrap, topic, scratch)
    backfilled, production = table_counts(spark, f"{out}_backfill"), table_counts(spark, out)
    assert backfilled == truth(rows) and production != backfilled
    promote = ["promote", "late_flights:JOB", "--config", str(file)]

    def tables() -> tuple[Any, Any, Any]:
        exists = spark.catalog.tableExists
        return tuple(
            table_counts(spark, t) if exists(t) else None
            for t in (out, f"{out}_backfill", f"{out}_previous")
        )

    # -- a backfill that did not finish: its last batch planned, not committed (kill -9)
    query = Path(backfill.record.checkpoints["counts"])
    last = max(int(p.name) for p in (query / "commits").iterdir() if p.name.isdigit())
    commit = (query / "commits" / str(last)).read_bytes()
    (query / "commits" / str(last)).unlink()
    text = _one_or_two_lines(_kappa(spark, monkeypatch, *promote))
    assert f"{out}_backfill" in text and "did not finish" in text and "again" in text
    (query / "commits" / str(last)).write_bytes(commit)

    # -- promote: readers of the production name see the backfill; the old table is kept
    promoted = _kappa(spark, monkeypatch, *promote)
    assert promoted.exit_code == 0, promoted.output
    assert tables() == (backfilled, None, production)
    journal = json.loads(_kappa(spark, monkeypatch, *promote, "--status").output)
    assert journal["status"] == "done" and journal["backfill_run"] == backfill.record.run_id
    assert journal["backfill_range"]["start"].startswith(START.date().isoformat())
    assert journal["checks"]["reconcile_explained"] is True
    assert [s["step"] for s in journal["steps"]] == ["marked", "production_moved", "backfill_moved"]
    props = {r[0]: r[1] for r in spark.sql(f"SHOW TBLPROPERTIES {out}").collect()}
    assert props["kappa.promote.id"] == journal["id"]
    assert props["kappa.promote.run"] == backfill.record.run_id

    # -- promoting again: no backfill table left, and _previous is taken
    assert f"{out}_backfill does not exist" in _one_or_two_lines(
        _kappa(spark, monkeypatch, *promote)
    )

    # -- undo: the command the promotion printed, run as printed (issue 47 item 5: it left
    # out --config, and as printed exited 2 "no config given")
    printed = [line for line in promoted.output.splitlines() if line.startswith("undo: ")]
    assert len(printed) == 1, promoted.output
    words = shlex.split(printed[0].removeprefix("undo: "))
    assert words[0] == "kappa", printed
    result = _kappa(spark, monkeypatch, *words[1:])
    assert result.exit_code == 0, result.output
    assert tables() == (production, backfilled, None)

    # -- a crash after each step of a promotion, then of its undo: the command run again
    # completes it; the production name always holds one whole table (or, between the two
    # renames, none)
    for step, undo_step in [
        ("marked", "undo_backfill_moved"),
        ("production_moved", "undo_production_moved"),
        ("backfill_moved", "undo_backfill_moved"),
    ]:

        def crash(name: str, at: str = step) -> None:
            if name == at:
                raise Crash(name)

        monkeypatch.setattr(swap, "after_step", crash)
        result = _kappa(spark, monkeypatch, *promote)
        assert isinstance(result.exception, Crash), result.output
        seen = tables()
        assert seen[0] in (production, backfilled, None)
        assert seen[0] is not None or step == "production_moved"
        assert sum(t is not None for t in seen) == 2, "no table lost"
        monkeypatch.setattr(swap, "after_step", lambda name: None)
        result = _kappa(spark, monkeypatch, *promote)
        assert result.exit_code == 0 and "resuming promotion" in result.output, result.output
        assert tables() == (backfilled, None, production), step

        def crash_undo(name: str, at: str = undo_step) -> None:
            if name == at:
                raise Crash(name)

        monkeypatch.setattr(swap, "after_step", crash_undo)
        result = _kappa(spark, monkeypatch, *promote, "--undo")
        assert isinstance(result.exception, Crash), result.output
        assert "--undo" in _one_or_two_lines(_kappa(spark, monkeypatch, *promote)), (
            "a half-undone promotion is finished with --undo"
        )
        monkeypatch.setattr(swap, "after_step", lambda name: None)
        result = _kappa(spark, monkeypatch, *promote, "--undo")
        assert result.exit_code == 0, result.output
        assert tables() == (production, backfilled, None), undo_step

    history = json.loads(_kappa(spark, monkeypatch, *promote, "--status").output)["history"]
    assert [h["status"] for h in history] == ["undone"] * 3

    # -- a promotion that crashed between its renames is taken back by --undo as well
    monkeypatch.setattr(swap, "after_step", lambda name: _raise(Crash(name), name))
    result = _kappa(spark, monkeypatch, *promote)
    assert isinstance(result.exception, Crash) and tables()[0] is None
    monkeypatch.setattr(swap, "after_step", lambda name: None)
    result = _kappa(spark, monkeypatch, *promote, "--undo")
    assert result.exit_code == 0, result.output
    assert tables() == (production, backfilled, None)

    # -- a difference the late rows do not explain: refused, named; --force promotes
    extra = (
        spark.table(f"{out}_backfill")
        .where(F.col("origin") == "JFK")
        .limit(1)
        .withColumn("origin", F.lit("ZZZ"))
    )
    extra.write.insertInto(f"{out}_backfill")
    text = _one_or_two_lines(_kappa(spark, monkeypatch, *promote))
    assert "kappa reconcile" in text and "not late rows" in text and "--force" in text
    result = _kappa(spark, monkeypatch, *promote, "--force")
    assert result.exit_code == 0, result.output
    promoted = table_counts(spark, out)
    assert len(promoted) == len(backfilled) + 1

    # -- the production stream, started again, goes on from its checkpoint into the
    # promoted table: later flush records close the first flush's window, emitted once
    produce(kafka_bootstrap, topic, [], flush_at=FLUSH_AT + timedelta(hours=2))
    again = run_job(spark, JOB, load_config(file), RunOptions("stream", trigger="available-now"))
    assert again.status == "finished"
    flushed = (int(FLUSH_AT.timestamp()), "JFK")
    assert table_counts(spark, out) == {**promoted, flushed: 2 * LIMIT}

    # -- undo would hide what the stream wrote since: refused, named; --force undoes
    text = _one_or_two_lines(_kappa(spark, monkeypatch, *promote, "--undo"))
    assert "stream" in text and "--force" in text and f"{out}_backfill" in text
    result = _kappa(spark, monkeypatch, *promote, "--undo", "--force")
    assert result.exit_code == 0, result.output
    assert table_counts(spark, out) == production

    # -- production rows outside the backfill's range would leave readers' sight: refused,
    # with their span (here the window the stream emitted into the promoted table, now in
    # the backfill table, put into production by hand)
    outside = spark.table(f"{out}_backfill").where(F.col("start") >= F.lit(FLUSH_AT))
    assert outside.count() == 1
    outside.write.insertInto(out)
    text = _one_or_two_lines(_kappa(spark, monkeypatch, *promote))
    assert "1 rows outside the backfill's range" in text and "2024-06-02 01:00:00" in text
