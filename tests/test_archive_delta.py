"""``kappa archive --table-format delta`` (issue 22 item 3, Delta half): the archiver crashes
after a commit (``KAPPA_DELTA_SINK_FAULT``), runs again from its checkpoint; every good
Kafka record is in the Delta table once with its Kafka coordinates, the bad ones in the
dead letters; and a backfill of the sessionization job from that Delta archive
(``[inputs.<name>.delta]``) equals the sessions computed by hand from the produced events.
The CLI archiver into Delta keeps every record once across SIGKILLs at random moments too
(the 20-kill loop is slow; it shares its code with the Iceberg one: ``archive_kills``)."""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent / "runtime"))
from archive_kills import KILLS, archive_through_kills, archiver, delta_options  # noqa: E402
from runtime_helpers import example_config, sessions_by_hand, table_rows, uid  # noqa: E402

from kappaplus.archive import ArchiveOptions, archive_job
from kappaplus.connectors.delta.sink import FAULT_ENV, app_transactions
from kappaplus.core.errors import ConfigError
from kappaplus.examples import sessionization
from kappaplus.examples.generate import RIDER_EVENT_DDL, arrival_order, produce, rider_events
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job

START = "2024-03-01T00:00:00"
COLUMNS = ["rider_id", "session_start", "session_end", "event_count", "event_types"]


def test_archive_into_delta_once_across_a_crash_then_backfill_from_it(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    from deltalake import DeltaTable

    events = rider_events(riders=12, start=START, hours=6, seed=23, late_fraction=0.0)
    assert len(events) > 3 * 40, "several micro-batches"
    topic = new_topic(prefix="arch-delta")
    garbage = [b"{broken"]
    produce(kafka_bootstrap, topic, arrival_order(events), extra=garbage)
    path = str(scratch / "lake" / "rides")
    options = ArchiveOptions(
        topic=topic,
        bootstrap_servers=kafka_bootstrap,
        table=path,
        table_format="delta",
        dead_letter_table=f"dl_{uid()}",
        event_time_column="event_time",
        schema=RIDER_EVENT_DDL,
        max_offsets_per_trigger=40,
        checkpoint_dir=scratch / "archive-checkpoints",
    )
    job, config = archive_job(options)
    assert config.outputs["archive"].delta.path == path
    run = RunOptions("stream", trigger="available-now")
    os.environ[FAULT_ENV] = "after-commit:1"
    try:
        with pytest.raises(Exception, match="failed"):
            run_job(spark, job, config, run)
    finally:
        del os.environ[FAULT_ENV]
    assert list(app_transactions(path, None).values()) == [1]  # committed, Spark never knew
    assert run_job(spark, job, config, run).status == "finished"

    archived = DeltaTable(path).to_pyarrow_table()
    coordinates = list(
        zip(
            archived["kafka_partition"].to_pylist(),
            archived["kafka_offset"].to_pylist(),
            strict=True,
        )
    )
    assert len(coordinates) == len(set(coordinates)) == len(events), "every record once"
    dead = spark.table(options.dead_letter_table).collect()
    assert len(dead) == len(garbage) and all(r.reason for r in dead)
    offsets = {o for _, o in coordinates} | {r.offset for r in dead}
    assert offsets == set(range(len(events) + len(garbage)))
    assert set(archived["kafka_topic"].to_pylist()) == {topic}
    assert sorted(archived["event_id"].to_pylist()) == sorted(e["event_id"] for e in events)

    # the Delta archive is a backfill input: the job's sessions equal the ground truth
    out = f"sessions_{uid()}"
    job_config = example_config(
        "sessionization",
        {
            "inputs": {
                "rider_events": {
                    "hive": None,
                    "delta": {"path": path, "event_time_column": "event_time"},
                }
            },
            "outputs": {"sessions": {"hive": {"table": out}}},
            "mode": {"backfill": {"inputs": {"rider_events": {"hive": None}}}},
        },
        scratch,
    )
    end = (max(e["event_time"] for e in events) + timedelta(hours=2)).isoformat()
    result = run_job(
        spark,
        sessionization.JOB,
        job_config,
        RunOptions("backfill", start=START, end=end, trigger="available-now"),
    )
    assert result.status == "finished"
    rows = table_rows(spark, f"{out}_backfill", COLUMNS)
    assert len(rows) == len(set(rows)), "no duplicate sessions"
    assert set(rows) == {r[:5] for r in sessions_by_hand(events, 30 * 60)}


def test_a_delta_archive_at_a_location_needs_a_dead_letter_table() -> None:
    common: dict[str, Any] = {
        "topic": "t",
        "bootstrap_servers": "127.0.0.1:9092",
        "event_time_column": "event_time",
        "schema": RIDER_EVENT_DDL,
        "table_format": "delta",
    }
    with pytest.raises(ConfigError, match="dlq-table"):
        ArchiveOptions(table="/lake/rides", **common)
    named = ArchiveOptions(table="lake.rides", **common)
    assert archive_job(named)[1].inputs["records"].kafka.dlq.table == "lake.rides_dead_letters"
    with pytest.raises(ConfigError, match="table"):
        ArchiveOptions(**{**common, "table_format": "hive"}, table="/lake/rides")


def test_cli_delta_archive_options_are_checked_before_spark_starts() -> None:
    from typer.testing import CliRunner

    from kappaplus.cli import app

    base = ["archive", "t", "--table-format", "delta", "-e", "event_time"]
    base += ["--schema", RIDER_EVENT_DDL, "--bootstrap", "127.0.0.1:9"]
    runner = CliRunner()
    bad_json = runner.invoke(
        app, [*base, "--table", "lake.rides", "--delta-storage-options", "{nope"]
    )
    assert bad_json.exit_code == 2 and "--delta-storage-options" in bad_json.output
    no_dlq = runner.invoke(app, [*base, "--table", "/lake/rides"])
    assert no_dlq.exit_code == 2 and "--dlq-table" in no_dlq.output


def _archived_offsets(location: Path) -> list[int]:
    """The Kafka offsets in the Delta table's current version, read by delta-rs (files a
    killed archiver wrote but never committed are not in the log, so not read)."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(str(location)):
        return []
    table = DeltaTable(str(location)).to_pyarrow_table(columns=["kafka_partition", "kafka_offset"])
    assert set(table.column("kafka_partition").to_pylist()) <= {0}
    return sorted(table.column("kafka_offset").to_pylist())


@pytest.mark.parametrize(
    "kills",
    [
        pytest.param(0, id="archive"),
        pytest.param(
            KILLS, id=f"{KILLS}-kills", marks=[pytest.mark.slow, pytest.mark.timeout(3000)]
        ),
    ],
)
def test_cli_archive_into_delta_keeps_every_record_once_across_sigkills(
    kafka_bootstrap: str, new_topic, tmp_path: Path, kills: int
) -> None:  # type: ignore[no-untyped-def]
    from deltalake import DeltaTable

    # enough records that every kill finds work left (a kill lands 2-5 batches of 40 in);
    # without kills, a quarter of them (the one archiving run reads 600 a batch)
    hours = 48 if kills else 12
    events = arrival_order(rider_events(riders=60, start=START, hours=hours, seed=9))
    topic = new_topic(prefix="arch-delta-kill")
    produce(kafka_bootstrap, topic, events)
    location = tmp_path / "lake" / "archived"
    home = tmp_path / "home"
    seen_progress = archive_through_kills(
        lambda trigger, per_batch: archiver(
            topic, kafka_bootstrap, home, delta_options(location), trigger, per_batch
        ),
        lambda: _archived_offsets(location),
        kills,
        len(events),
    )
    assert all(n < len(events) for n in seen_progress), "every kill hit an archiver at work"
    table = DeltaTable(str(location))
    archived = table.to_pyarrow_table(columns=["event_id"])
    assert sorted(archived.column("event_id").to_pylist()) == sorted(e["event_id"] for e in events)
    # one version per committed micro-batch, each naming its batch, no batch committed twice
    batches = [int(v["kappa.batch"]) for v in table.history() if "kappa.batch" in v]
    assert batches and len(batches) == len(set(batches)), batches
    assert list(app_transactions(str(location), None).values()) == [max(batches)]
