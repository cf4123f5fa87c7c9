"""``kappa run`` / ``kappa status`` without Spark: help, validation errors, status listing."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kappaplus.cli import app
from kappaplus.cli.run import job_path
from kappaplus.runtime.options import RunOptions, trigger_args
from kappaplus.runtime.state.records import FAILED, FINISHED, RUNNING, STOPPED, RunRecord, exit_code

runner = CliRunner()


def test_help_of_run_and_status() -> None:
    result = runner.invoke(app, ["run", "--help"])
    assert result.exit_code == 0
    for option in ("--mode", "--start", "--end", "--config", "--trigger", "--until-idle"):
        assert option in result.output
    result = runner.invoke(app, ["status", "--help"])
    assert result.exit_code == 0 and "--json" in result.output
    # `kappa run --list` as docs/concepts/modes.md writes it: no mode needed to list the jobs
    listed = runner.invoke(app, ["run", "--list"])
    assert listed.exit_code == 0, listed.output
    assert "kappaplus.examples.sessionization:JOB" in listed.output
    # a job without a mode: one line naming --mode, exit 2
    missing = runner.invoke(app, ["run", "sessionization"])
    assert missing.exit_code == 2 and "'--mode'" in missing.output, missing.output


def test_options_are_validated_once_naming_the_option() -> None:
    result = runner.invoke(app, ["run", "sessionization", "--mode", "replay"])
    assert result.exit_code == 2 and "'mode'" in result.output and "replay" in result.output
    result = runner.invoke(
        app,
        [
            "run",
            "sessionization",
            "--mode",
            "backfill",
            "--start",
            "2024-03-02",
            "--end",
            "2024-03-01",
        ],
    )
    assert result.exit_code == 2 and "'start'" in result.output
    result = runner.invoke(app, ["run", "nosuchjob", "--mode", "stream"])
    assert result.exit_code == 2 and "'JOB'" in result.output
    assert job_path("supply-demand") == "kappaplus.examples.supply_demand:JOB"
    assert trigger_args("available-now") == {"availableNow": True}
    assert RunOptions("stream", trigger="2 s").trigger == "2 s"


def test_status_lists_runs_and_flags_dead_ones(kappa_home: Path, tmp_path: Path) -> None:
    checkpoint = tmp_path / "ckpt"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    for batch, done in ((0, 0.125), (1, 0.25)):
        (checkpoint / "offsets" / str(batch)).write_text(
            'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n'
            '{"v":1,"lo":0,"hi":7200000000,"range":"[1970-01-01T00:00:00Z, '
            f'1970-01-01T02:00:00Z)","done":{done},"phase":"data"}}\n'
        )
    (checkpoint / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    record = RunRecord(
        run_id=f"cli-test-{os.getpid()}-{int(time.time())}",
        job="cli-test",
        job_path=None,
        mode="backfill",
        status=RUNNING,
        trigger="available-now",
        started_at=time.time(),
        updated_at=time.time(),
        pid=2**22 + 12345,  # no such process
        checkpoints={"out": str(checkpoint)},
    )
    record.save()
    result = runner.invoke(app, ["status", "--job", "cli-test", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    row = next(r for r in rows if r["run_id"] == record.run_id)
    assert row["status"] == "interrupted"
    # done is where its committed batches reached: batch 1, planned, is redone by a resume
    # (issue 47 item 8: it showed the planned batch's 31%, then its record's 21%)
    assert row["done"] == 0.125
    assert row["checkpoints"]["out"]["pending"] is True
    assert "slice" in row["checkpoints"]["out"]["position"]
    table = runner.invoke(app, ["status", "--job", "cli-test"], env={"COLUMNS": "250"})
    assert table.exit_code == 0 and "interrupted" in table.output


def test_an_interrupted_run_resumed_later_shows_its_own_progress(
    kappa_home: Path, tmp_path: Path
) -> None:
    """Issue 24 item 7: a run killed at 1,500 of 11,985 rows showed DONE 100% once a later
    run over the same checkpoint finished: its figure came from the checkpoint's later
    progress, not from that run."""
    checkpoint = tmp_path / "ckpt"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    (checkpoint / "offsets" / "3").write_text(
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n'
        '{"v":1,"lo":0,"hi":7200000000,"range":"[1970-01-01T00:00:00Z, 1970-01-01T02:00:00Z)",'
        '"done":1.0,"phase":"data"}\n'
    )
    (checkpoint / "commits" / "3").write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    now = time.time()
    common = dict(
        job="cli-resumed",
        job_path=None,
        mode="backfill",
        trigger="available-now",
        checkpoints={"out": str(checkpoint)},
    )
    killed = RunRecord(
        run_id=f"cli-resumed-a-{os.getpid()}",
        status=RUNNING,
        started_at=now - 60,
        updated_at=now - 50,
        pid=2**22 + 12345,  # no such process: killed
        done=0.125,
        **common,  # type: ignore[arg-type]
    )
    resumed = RunRecord(
        run_id=f"cli-resumed-b-{os.getpid()}",
        status="finished",
        started_at=now - 40,
        updated_at=now - 1,
        pid=os.getpid(),
        done=1.0,
        **common,  # type: ignore[arg-type]
    )
    killed.save()
    resumed.save()
    result = runner.invoke(app, ["status", "--job", "cli-resumed", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["run_id"]: row for row in json.loads(result.output)}
    assert rows[killed.run_id]["status"] == "interrupted"
    assert rows[killed.run_id]["done"] == 0.125
    assert rows[killed.run_id]["checkpoints_resumed_by"] == [resumed.run_id]
    assert rows[resumed.run_id]["done"] == 1.0
    assert rows[resumed.run_id]["checkpoints_resumed_by"] == []


@pytest.mark.parametrize(
    ("mode", "status", "stopped_by", "done", "code"),
    [
        ("backfill", FINISHED, None, 1.0, 0),
        ("stream", FAILED, None, None, 1),
        ("backfill", STOPPED, "ctrl-c", 0.4, 130),
        ("stream", STOPPED, "sigterm", None, 143),
        ("backfill", STOPPED, "timeout", 0.4, 124),  # a partial backfill is not a success
        ("backfill", STOPPED, "timeout", 1.0, 0),  # its whole range was done
        ("stream", STOPPED, "timeout", None, 0),  # a stream never finishes by itself
        ("bootstrap", STOPPED, "timeout", 0.2, 124),  # stopped in its lake phase: not done
        ("bootstrap", STOPPED, "timeout", None, 124),  # not one batch done
        ("bootstrap", STOPPED, "timeout", 1.0, 0),  # on the live stream: a timeout is fine
    ],
)
def test_exit_code_says_whether_the_run_did_its_work(
    mode: str, status: str, stopped_by: str | None, done: float | None, code: int
) -> None:
    record = RunRecord(
        run_id="r",
        job="j",
        job_path=None,
        mode=mode,
        status=status,
        trigger="available-now",
        started_at=0.0,
        updated_at=0.0,
        pid=1,
        done=done,
        stopped_by=stopped_by,
    )
    assert exit_code(record) == code
