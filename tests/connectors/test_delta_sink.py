"""Exactly-once Delta output (``[outputs.<name>.delta]``, issue 22 item 2, Delta half): a
fault at each step of the commit protocol (``KAPPA_DELTA_SINK_FAULT``), then the replay
Spark would make: nothing lost, nothing doubled, and every version of the table holds whole
batches only. Rows are read back with delta-rs's own reader (not the sink) and compared
with the batches written; the application transactions with the log's ``txn`` actions."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from kappaplus.connectors.delta.sink import (
    FAULT_ENV,
    DeltaTableSink,
    InjectedFault,
    app_transactions,
)

sys.path.insert(0, str(Path(__file__).parents[1]))
sys.path.insert(0, str(Path(__file__).parents[1] / "runtime"))
from runtime_helpers import example_config, sessions_by_hand, uid  # noqa: E402

from kappaplus.examples import sessionization  # noqa: E402
from kappaplus.examples.generate import RIDER_EVENT_DDL, rider_events, write_table  # noqa: E402
from kappaplus.runtime.options import RunOptions  # noqa: E402
from kappaplus.runtime.runner import run_job  # noqa: E402

T0 = datetime(2024, 3, 1, tzinfo=UTC)


@pytest.fixture
def fault() -> Iterator[dict[str, str]]:
    saved = os.environ.pop(FAULT_ENV, None)
    yield os.environ  # type: ignore[misc]
    os.environ.pop(FAULT_ENV, None)
    if saved is not None:
        os.environ[FAULT_ENV] = saved


def batch(first: int, n: int) -> pa.Table:
    ids = range(first, first + n)
    times = [T0 + timedelta(minutes=i, microseconds=999) for i in ids]
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "v": [f"x{i}" for i in ids],
            "ts": pa.array(times, pa.timestamp("us", tz="UTC")),
        }
    )


def ids_at(path: Path, version: int | None = None) -> list[int]:
    from deltalake import DeltaTable

    return sorted(DeltaTable(str(path), version=version).to_pyarrow_table()["id"].to_pylist())


def parquet_files(path: Path) -> set[str]:
    return {p.name for p in path.glob("*.parquet")}


def test_each_step_of_the_commit_protocol_fails_then_replays_exactly_once(
    tmp_path: Path, fault: dict[str, str]
) -> None:
    from deltalake import DeltaTable

    path = tmp_path / "out"
    sink = DeltaTableSink(str(path), None, query="q-ab12")
    assert sink.write_arrow(batch(0, 3), 0) is True
    assert sink.committed_batch() == 0

    # a crash before the file is written: nothing on disk, nothing visible
    fault[FAULT_ENV] = "before-write"
    files = parquet_files(path)
    with pytest.raises(InjectedFault):
        sink.write_arrow(batch(3, 4), 1)
    assert parquet_files(path) == files and ids_at(path) == [0, 1, 2]

    # a crash after the file is written, before the commit: the file exists, no version
    # references it, a reader sees the committed batches only
    fault[FAULT_ENV] = "before-commit:1"
    with pytest.raises(InjectedFault):
        sink.write_arrow(batch(3, 4), 1)
    orphans = parquet_files(path) - files
    assert len(orphans) == 1, "the batch's file was written"
    assert ids_at(path) == [0, 1, 2] and sink.committed_batch() == 0
    assert DeltaTable(str(path)).version() == 1  # create + batch 0: no partial version

    # the replay of batch 1 (Spark had not recorded it) commits it once
    del fault[FAULT_ENV]
    assert sink.write_arrow(batch(3, 4), 1) is True
    assert orphans.isdisjoint(p.rsplit("/", 1)[-1] for p in DeltaTable(str(path)).file_uris())

    # a crash after the commit, before Spark records the batch: the replay is skipped
    fault[FAULT_ENV] = "after-commit:2"
    with pytest.raises(InjectedFault):
        sink.write_arrow(batch(7, 2), 2)
    del fault[FAULT_ENV]
    assert sink.write_arrow(batch(7, 2), 2) is False
    assert sink.write_arrow(batch(0, 3), 0) is False  # any earlier batch: skipped
    assert sink.write_arrow(batch(9, 0), 3) is True  # an empty batch: its txn only
    assert sink.write_arrow(batch(9, 0), 3) is False

    assert ids_at(path) == list(range(9)), "nothing lost, nothing doubled"
    table = DeltaTable(str(path))
    assert table.version() == 4 and table.transaction_version("q-ab12") == 3
    # every version holds whole batches: version v = batches 0..v-1
    assert ids_at(path, 0) == [] and ids_at(path, 1) == [0, 1, 2]
    assert ids_at(path, 2) == list(range(7)) and ids_at(path, 3) == list(range(9))
    assert ids_at(path, 4) == list(range(9))
    # each commit names its query and batch; the txn actions are in the log
    commits = [h for h in table.history() if h.get("operation") == "WRITE"]
    assert sorted((h["kappa.query"], h["kappa.batch"]) for h in commits) == [
        ("q-ab12", "0"),
        ("q-ab12", "1"),
        ("q-ab12", "2"),
        ("q-ab12", "3"),
    ]
    # another query (a fresh checkpoint: batch ids from 0) is not mistaken for this one
    other = DeltaTableSink(str(path), None, query="q-cd34")
    assert other.write_arrow(batch(100, 1), 0) is True
    assert app_transactions(str(path), None) == {"q-ab12": 3, "q-cd34": 0}
    table.create_checkpoint()  # the txn actions survive in the checkpoint
    assert app_transactions(str(path), None) == {"q-ab12": 3, "q-cd34": 0}
    assert DeltaTableSink(str(path), None, query="q-ab12").write_arrow(batch(7, 2), 2) is False


def test_statistics_in_the_log_match_the_rows(tmp_path: Path) -> None:
    """The per-file statistics a backfill from this table slices by (min/max of the event
    time, in milliseconds as Delta writes them) are those of the rows written."""
    from deltalake import DeltaTable

    sink = DeltaTableSink(str(tmp_path / "s"), None, query="q")
    rows = batch(5, 10)
    sink.write_arrow(rows, 0)
    adds = pa.table(DeltaTable(str(tmp_path / "s")).get_add_actions(flatten=True))
    assert adds["num_records"].to_pylist() == [10]
    low, high = adds["min.ts"][0].as_py(), adds["max.ts"][0].as_py()
    assert low == T0 + timedelta(minutes=5)  # 999 us truncated to the millisecond
    assert high == T0 + timedelta(minutes=14)
    assert adds["min.id"].to_pylist() == [5] and adds["max.v"].to_pylist() == ["x9"]


def test_a_batch_column_the_table_lacks_is_refused(tmp_path: Path) -> None:
    from kappaplus.core.errors import TableError

    sink = DeltaTableSink(str(tmp_path / "r"), None, query="q")
    sink.write_arrow(batch(0, 1), 0)
    with pytest.raises(TableError, match="no column 'extra'"):
        sink.write_arrow(batch(1, 1).append_column("extra", pa.array([1])), 1)


def sessions_config(events_table: str, out: str, scratch: Path):  # type: ignore[no-untyped-def]
    return example_config(
        "sessionization",
        {
            "inputs": {"rider_events": {"hive": {"table": events_table}}},
            "outputs": {"sessions": {"hive": None, "delta": {"path": out}}},
            "mode": {
                "backfill": {
                    "watermark_delay": "1 hour",
                    "inputs": {"rider_events": {"hive": {"maxEventTimePerTrigger": "2 hours"}}},
                }
            },
        },
        scratch,
    )


def session_rows(path: str) -> list[tuple]:  # type: ignore[type-arg]
    from deltalake import DeltaTable

    def micros(value: datetime) -> int:
        return int(value.timestamp() * 1_000_000)

    written = DeltaTable(path).to_pyarrow_table().to_pylist()
    return [
        (r["rider_id"], micros(r["session_start"]), micros(r["session_end"]), r["event_count"])
        + (tuple(r["event_types"]),)
        for r in written
    ]


@pytest.mark.parametrize("step", ["before-write", "before-commit", "after-commit"])
def test_a_backfill_into_delta_survives_a_crash_at_each_step(  # type: ignore[no-untyped-def]
    spark, scratch: Path, fault: dict[str, str], step: str
) -> None:
    """The runtime's output query into a Delta table, the fault at ``step`` of its second
    batch: the run fails, the same run again resumes; the table equals the ground truth
    (sessions computed by hand from the events) with no session twice."""
    from deltalake import DeltaTable

    start, end = "2024-03-01T00:00:00", "2024-03-01T06:00:00"
    events = rider_events(riders=8, start=start, hours=6, seed=17)
    table = f"ev_{uid()}"
    write_table(spark, table, events, RIDER_EVENT_DDL)
    out = str(scratch / "lake" / f"sessions_{uid()}")
    config = sessions_config(table, out, scratch)
    options = RunOptions("backfill", start, end, poll_seconds=0.2)
    fault[FAULT_ENV] = f"{step}:1"
    with pytest.raises(Exception, match="query sessions failed"):
        run_job(spark, sessionization.JOB, config, options)
    del fault[FAULT_ENV]
    target = f"{out}_backfill"
    marks = app_transactions(target, None)
    assert list(marks.values()) == [1 if step == "after-commit" else 0], marks
    before = DeltaTable(target).version()
    again = run_job(spark, sessionization.JOB, config, options)
    assert again.status == "finished"
    assert DeltaTable(target).version() > before

    rows = session_rows(target)
    assert len(rows) == len(set(rows)), "no session twice"
    truth = {r[:5] for r in sessions_by_hand(events, 30 * 60)}
    assert set(rows) == truth


def test_another_run_into_the_same_delta_table_is_refused_unless_append(  # type: ignore[no-untyped-def]
    spark, scratch: Path
) -> None:
    """Two configs of a job (the same events under two table names) backfilling into one
    Delta table: the second is refused before its first batch, naming the table and
    --append; the first run again (resumed) is not; with --append the second writes."""
    from kappaplus.runtime.state.identity import IdentityError

    start, end = "2024-03-01T00:00:00", "2024-03-01T04:00:00"
    events = rider_events(riders=4, start=start, hours=4, seed=5)
    first_in, second_in = f"ev_{uid()}", f"ev_{uid()}"
    for name in (first_in, second_in):
        write_table(spark, name, events, RIDER_EVENT_DDL)
    out = str(scratch / "lake" / f"claims_{uid()}")
    target = f"{out}_backfill"

    options = RunOptions("backfill", start, end, poll_seconds=0.2)
    first = sessions_config(first_in, out, scratch)
    assert run_job(spark, sessionization.JOB, first, options).status == "finished"
    written = len(session_rows(target))
    assert written > 0
    with pytest.raises(IdentityError) as refused:
        run_job(spark, sessionization.JOB, sessions_config(second_in, out, scratch), options)
    assert target in str(refused.value) and "--append" in str(refused.value)
    assert len(session_rows(target)) == written, "nothing written by the refused run"
    assert run_job(spark, sessionization.JOB, first, options).status == "finished"  # resumed
    assert len(session_rows(target)) == written
    appended = RunOptions("backfill", start, end, poll_seconds=0.2, append=True)
    second = sessions_config(second_in, out, scratch)
    assert run_job(spark, sessionization.JOB, second, appended).status == "finished"
    assert len(session_rows(target)) == 2 * written  # deliberately, as asked
    assert len(app_transactions(target, None)) == 2


def test_an_s3_delta_output_commits_exactly_once(tmp_path: Path, fault: dict[str, str]) -> None:
    """The same protocol on an S3-compatible store (moto_server on loopback): the file is
    written and the log committed through delta-rs's object store with the output's
    storage options; a crash before the commit, the replay, a replayed batch skipped."""
    from deltalake import DeltaTable

    from kappaplus.local.processes import free_port
    from kappaplus.local.s3 import ObjectStore, client_env

    store = ObjectStore(tmp_path, free_port())
    env = client_env(store.start())
    options = {
        "AWS_ENDPOINT_URL": env["AWS_ENDPOINT"],
        "AWS_ACCESS_KEY_ID": env["AWS_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": env["AWS_SECRET_ACCESS_KEY"],
        "AWS_REGION": env["AWS_DEFAULT_REGION"],
        "AWS_ALLOW_HTTP": "true",
    }
    uri = f"s3://{store.bucket}/out"
    try:
        sink = DeltaTableSink(uri, options, query="q-s3")
        assert sink.write_arrow(batch(0, 3), 0) is True
        fault[FAULT_ENV] = "before-commit"
        with pytest.raises(InjectedFault):
            sink.write_arrow(batch(3, 2), 1)
        del fault[FAULT_ENV]
        assert sink.write_arrow(batch(3, 2), 1) is True
        assert sink.write_arrow(batch(3, 2), 1) is False
        table = DeltaTable(uri, storage_options=options)
        assert sorted(table.to_pyarrow_table()["id"].to_pylist()) == list(range(5))
        assert app_transactions(uri, options) == {"q-s3": 1}
    finally:
        store.stop()
