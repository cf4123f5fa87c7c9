"""Run identity: a checkpoint is never silently reused by another config of the same job,
and a lost (or ``--fresh``) checkpoint never writes a table's rows a second time."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from runtime_helpers import example_config, sessions_by_hand, table_rows, uid
from typer.testing import CliRunner

from kappaplus.cli import app
from kappaplus.config import resolve
from kappaplus.examples import sessionization
from kappaplus.examples.generate import RIDER_EVENT_DDL, rider_events, write_table
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job
from kappaplus.runtime.state.checkpoints import (
    check_before_spark,
    checkpoint_root,
    discard_set_aside,
    set_aside_path,
)
from kappaplus.runtime.state.identity import (
    IDENTITY_FILE,
    IdentityError,
    check_identity,
    run_dir,
    run_identity,
)

START, END = "2024-03-01T00:00:00", "2024-03-01T06:00:00"
COLUMNS = ["rider_id", "session_start", "session_end", "event_count", "event_types"]


def _config(scratch: Path, table: str, out: str):  # type: ignore[no-untyped-def]
    return example_config(
        "sessionization",
        {
            "inputs": {"rider_events": {"hive": {"table": table}}},
            "outputs": {"sessions": {"hive": {"table": out}}},
            "mode": {
                "backfill": {
                    "watermark_delay": "1 hour",
                    "inputs": {"rider_events": {"hive": {"maxEventTimePerTrigger": "3 hours"}}},
                }
            },
        },
        scratch,
    )


def test_identity_differences_are_named_before_spark(scratch: Path) -> None:
    """Pure Python: another table, output or range is refused naming each difference."""
    job = sessionization.JOB
    first = _config(scratch, "events_a", "sessions_a")
    run = RunOptions("backfill", START, END)
    directory = check_before_spark(job, first, run)
    assert (directory / IDENTITY_FILE).is_file()
    assert directory.parent == checkpoint_root(first, run) / "rider-sessions" / "backfill"

    # another config of the same job: its own checkpoint directory, never the first one
    second = _config(scratch, "events_b", "sessions_b")
    assert check_before_spark(job, second, run) != directory

    # the same directory forced onto another identity: every difference is named
    other = run_identity(job, resolve(second, "backfill", job), RunOptions("backfill", START))
    with pytest.raises(IdentityError) as caught:
        check_identity(directory, other)
    message = str(caught.value)
    for named in ("inputs.rider_events.hive.table", "outputs.sessions", "range.end", "--fresh"):
        assert named in message

    # the same config over another range: refused, the way out is the recorded range
    with pytest.raises(IdentityError, match="resume with the recorded range"):
        check_before_spark(job, first, RunOptions("backfill", START, "2024-03-01T05:00:00"))

    # a damaged identity file names the file and the way out
    (directory / IDENTITY_FILE).write_text('{"job": ')
    with pytest.raises(IdentityError, match=IDENTITY_FILE):
        check_before_spark(job, first, run)


def test_a_checkpoint_of_the_old_layout_is_not_silently_left_behind(scratch: Path) -> None:
    """Before identities, a job kept one checkpoint per mode: ``<root>/<job>/<mode>/<output>``.
    A first run in the identity layout must not start from the configured offsets beside it
    (that re-reads or skips what it had processed): it refuses, naming it and the ways out."""
    job, run = sessionization.JOB, RunOptions("backfill", START, END)
    config = _config(scratch, "events_old", "sessions_old")
    old = checkpoint_root(config, run) / "rider-sessions" / "backfill" / "sessions"
    (old / "offsets").mkdir(parents=True)
    (old / "metadata").write_text('{"id": "5f0c"}')
    with pytest.raises(IdentityError) as caught:
        check_before_spark(job, config, run)
    message = str(caught.value)
    assert str(old) in message and "move each into" in message and "--fresh" in message
    # --fresh starts over (the old checkpoint stays where it is); then the run is claimed
    fresh = check_before_spark(job, config, RunOptions("backfill", START, END, fresh=True))
    assert (fresh / IDENTITY_FILE).is_file() and old.is_dir()
    assert check_before_spark(job, config, run) == fresh


def test_kappa_run_refuses_another_identity_with_exit_2_before_spark(
    scratch: Path, tmp_path: Path
) -> None:
    config_file = tmp_path / "job.toml"
    source = (Path(sessionization.__file__).with_suffix(".toml")).read_text()
    config_file.write_text(f'checkpoint_dir = "{scratch / "ckpt"}"\n' + source)
    job = sessionization.JOB
    from kappaplus.config import load_config

    config = load_config(config_file)
    run = RunOptions("backfill", START, END)
    identity = run_identity(job, resolve(config, "backfill", job), run)
    check_identity(run_dir(checkpoint_root(config, run), identity), identity)
    result = CliRunner().invoke(
        app,
        [
            "run",
            "sessionization",
            "-c",
            str(config_file),
            "--mode",
            "backfill",
            "--start",
            START,
            "--end",
            "2024-03-02T00:00:00",
        ],
    )
    assert result.exit_code == 2, result.output
    assert "range.end" in result.output and "--fresh" in result.output
    assert "Traceback" not in result.output


def test_fresh_sets_the_old_checkpoint_aside_until_the_run_passes_its_checks(
    scratch: Path,
) -> None:
    """Pure Python: ``--fresh`` must not delete a checkpoint before the run's checks on its
    targets (with Spark, later) passed: a refusal tells the user to resume it."""
    job, run = sessionization.JOB, RunOptions("backfill", START, END)
    fresh = RunOptions("backfill", START, END, fresh=True)
    config = _config(scratch, "events_f", "sessions_f")
    directory = check_before_spark(job, config, run)
    committed = directory / "sessions" / "commits" / "0"
    committed.parent.mkdir(parents=True)
    committed.write_text("v1")
    aside = set_aside_path(directory)

    assert check_before_spark(job, config, fresh) == directory
    assert not committed.exists() and (aside / "sessions" / "commits" / "0").is_file()
    check_before_spark(job, config, fresh)  # run_job's own look keeps what was set aside
    assert (aside / "sessions" / "commits" / "0").is_file()
    # that attempt never passed its checks: a run without --fresh puts the checkpoint back
    check_before_spark(job, config, run)
    assert committed.read_text() == "v1" and not aside.exists()
    # a run that passed them deletes it
    check_before_spark(job, config, fresh)
    discard_set_aside(directory)
    assert not aside.exists() and not committed.exists()
    assert (directory / IDENTITY_FILE).is_file()


@pytest.mark.slow
def test_second_config_of_a_job_gets_its_own_checkpoint_and_writes_its_output(
    spark, scratch: Path
) -> None:  # type: ignore[no-untyped-def]
    """Failure 1: a config reading another table into another output used to resume the
    first config's finished checkpoint (0 batches, 0 rows, exit 0, no output table)."""
    events_a = rider_events(riders=10, start=START, hours=6, seed=1)
    events_b = rider_events(riders=12, start=START, hours=6, seed=2)
    table_a, table_b = f"ev_a_{uid()}", f"ev_b_{uid()}"
    out_a, out_b = f"ses_a_{uid()}", f"ses_b_{uid()}"
    write_table(spark, table_a, events_a, RIDER_EVENT_DDL)
    write_table(spark, table_b, events_b, RIDER_EVENT_DDL)
    options = RunOptions("backfill", START, END, poll_seconds=0.2)
    first = run_job(spark, sessionization.JOB, _config(scratch, table_a, out_a), options)
    assert first.status == "finished"
    second = run_job(spark, sessionization.JOB, _config(scratch, table_b, out_b), options)
    assert second.status == "finished"
    assert second.tracker.stats["sessions"].batches > 0
    rows = table_rows(spark, f"{out_b}_backfill", COLUMNS)
    assert set(rows) == {r[:5] for r in sessions_by_hand(events_b, 30 * 60)}
    assert len(rows) == len(set(rows))


@pytest.mark.slow
def test_lost_checkpoint_or_fresh_never_doubles_the_output(spark, scratch: Path) -> None:  # type: ignore[no-untyped-def]
    """Failure 2: moving a backfill's checkpoint away (or --fresh) and running the same
    command again used to commit every row a second time; now it refuses, naming the
    table and the way out, and the table keeps exactly one copy of each row."""
    events = rider_events(riders=10, start=START, hours=6, seed=4)
    table, out = f"ev_{uid()}", f"ses_{uid()}"
    write_table(spark, table, events, RIDER_EVENT_DDL)
    config = _config(scratch, table, out)
    options = RunOptions("backfill", START, END, poll_seconds=0.2)
    first = run_job(spark, sessionization.JOB, config, options)
    assert first.status == "finished"
    truth = {r[:5] for r in sessions_by_hand(events, 30 * 60)}
    assert set(table_rows(spark, f"{out}_backfill", COLUMNS)) == truth

    directory = Path(first.record.checkpoints["sessions"]).parent
    shutil.move(str(directory), str(scratch / "moved-away"))
    with pytest.raises(IdentityError) as caught:
        run_job(spark, sessionization.JOB, config, options)
    assert f"{out}_backfill" in str(caught.value) and "DROP TABLE" in str(caught.value)

    fresh = RunOptions("backfill", START, END, poll_seconds=0.2, fresh=True)
    with pytest.raises(IdentityError):
        run_job(spark, sessionization.JOB, config, fresh)
    rows = table_rows(spark, f"{out}_backfill", COLUMNS)
    assert len(rows) == len(set(rows)) and set(rows) == truth, "no row written twice"

    # --fresh with the checkpoint in place: refused the same way, and the checkpoint the
    # refusal says to resume is still there (set aside, then put back), so resuming works
    shutil.rmtree(directory)
    shutil.move(str(scratch / "moved-away"), str(directory))
    commits = sorted(p.name for p in (directory / "sessions" / "commits").iterdir())
    with pytest.raises(IdentityError) as refused:
        run_job(spark, sessionization.JOB, config, fresh)
    assert "DROP TABLE" in str(refused.value)
    assert sorted(p.name for p in (directory / "sessions" / "commits").iterdir()) == commits
    resumed = run_job(spark, sessionization.JOB, config, options)
    assert resumed.status == "finished" and resumed.tracker.stats["sessions"].rows == 0
    rows = table_rows(spark, f"{out}_backfill", COLUMNS)
    assert len(rows) == len(set(rows)) and set(rows) == truth

    # the commit markers say which run identity and range each batch came from
    marker_dir = Path(
        spark.sql(f"DESCRIBE TABLE EXTENDED {out}_backfill")
        .where("col_name = 'Location'")
        .collect()[0][1]
        .removeprefix("file:")
    )
    markers = [m for m in marker_dir.glob("_kappa_commits/*/*") if m.name.isdigit()]
    assert markers  # (not the .crc files the local filesystem writes beside them)
    provenance = json.loads(markers[0].read_text())["provenance"]
    assert provenance["key"] == first.record.identity["key"]
    assert provenance["range"] == {"start": START, "end": END}

    # the way out: drop the table, then the same command writes it once again
    spark.sql(f"DROP TABLE {out}_backfill")
    again = run_job(spark, sessionization.JOB, config, fresh)
    assert again.status == "finished"
    rows = table_rows(spark, f"{out}_backfill", COLUMNS)
    assert len(rows) == len(set(rows)) and set(rows) == truth
