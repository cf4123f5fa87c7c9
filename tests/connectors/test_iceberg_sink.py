"""Exactly-once Iceberg output (``[outputs.<name>.iceberg]``, issue 22 item 2): a fault at
each step of the commit protocol, then the replay Spark would make: nothing lost, nothing
doubled, and a reader sees whole batches only (one snapshot per batch)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from kappaplus.connectors.iceberg.sink import FAULT_ENV, IcebergTableSink, InjectedFault

sys.path.insert(0, str(Path(__file__).parents[1]))
sys.path.insert(0, str(Path(__file__).parents[1] / "runtime"))
from iceberg_tables import catalog_props, open_catalog  # noqa: E402
from runtime_helpers import example_config, sessions_by_hand, uid  # noqa: E402

from kappaplus.examples import sessionization  # noqa: E402
from kappaplus.examples.generate import RIDER_EVENT_DDL, rider_events, write_table  # noqa: E402
from kappaplus.runtime.options import RunOptions  # noqa: E402
from kappaplus.runtime.runner import run_job  # noqa: E402


@pytest.fixture
def fault() -> Iterator[dict[str, str]]:
    saved = os.environ.pop(FAULT_ENV, None)
    yield os.environ  # type: ignore[misc]
    os.environ.pop(FAULT_ENV, None)
    if saved is not None:
        os.environ[FAULT_ENV] = saved


def batch(first: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(first, first + n), pa.int64()), "v": ["x"] * n})


def test_each_step_of_the_commit_protocol_fails_then_replays_exactly_once(
    tmp_path: Path, fault: dict[str, str]
) -> None:
    props = catalog_props(tmp_path / "catalog")
    sink = IcebergTableSink("db.out", props, query="q-ab12")
    assert sink.write_arrow(batch(0, 3), 0) is True

    # a crash after the data files are written, before the commit: nothing visible
    fault[FAULT_ENV] = "before-commit"
    with pytest.raises(InjectedFault):
        sink.write_arrow(batch(3, 4), 1)
    table = open_catalog(props).load_table("db.out")
    assert table.scan().to_arrow().num_rows == 3 and len(table.snapshots()) == 1
    assert sink.committed_batch() == 0

    # the replay of batch 1 (Spark had not recorded it) commits it once
    del fault[FAULT_ENV]
    assert sink.write_arrow(batch(3, 4), 1) is True

    # a crash after the commit, before Spark records the batch: the replay is skipped
    fault[FAULT_ENV] = "after-commit:2"
    with pytest.raises(InjectedFault):
        sink.write_arrow(batch(7, 2), 2)
    del fault[FAULT_ENV]
    assert sink.write_arrow(batch(7, 2), 2) is False
    assert sink.write_arrow(batch(0, 3), 0) is False  # any earlier batch: skipped

    table = open_catalog(props).load_table("db.out")
    ids = table.scan().to_arrow().column("id").to_pylist()
    assert sorted(ids) == list(range(9)), "nothing lost, nothing doubled"
    # one snapshot per committed batch, each naming its query and batch
    summaries = [s.summary for s in table.snapshots()]
    assert [(s["kappa.query"], s["kappa.batch"]) for s in summaries] == [
        ("q-ab12", "0"),
        ("q-ab12", "1"),
        ("q-ab12", "2"),
    ]
    # another query (a fresh checkpoint: batch ids from 0) is not mistaken for this one
    other = IcebergTableSink("db.out", props, query="q-cd34")
    assert other.write_arrow(batch(100, 1), 0) is True


def test_a_backfill_into_iceberg_survives_a_crash_after_a_commit(  # type: ignore[no-untyped-def]
    spark, scratch: Path, fault: dict[str, str]
) -> None:
    """The runtime's output query into an Iceberg table, the fault after the commit of its
    second batch: the run fails, the same run again resumes; the table equals the ground
    truth with no session twice."""
    start, end = "2024-03-01T00:00:00", "2024-03-01T06:00:00"
    events = rider_events(riders=8, start=start, hours=6, seed=17)
    table = f"ev_{uid()}"
    write_table(spark, table, events, RIDER_EVENT_DDL)
    props = catalog_props(scratch / "catalog")
    out = f"db.sessions_{uid()}"
    config = example_config(
        "sessionization",
        {
            "inputs": {"rider_events": {"hive": {"table": table}}},
            "outputs": {"sessions": {"hive": None, "iceberg": {"table": out, "catalog": props}}},
            "mode": {
                "backfill": {
                    "watermark_delay": "1 hour",
                    "inputs": {"rider_events": {"hive": {"maxEventTimePerTrigger": "2 hours"}}},
                }
            },
        },
        scratch,
    )
    options = RunOptions("backfill", start, end, poll_seconds=0.2)
    fault[FAULT_ENV] = "after-commit:1"
    with pytest.raises(Exception, match="query sessions failed"):
        run_job(spark, sessionization.JOB, config, options)
    del fault[FAULT_ENV]
    target = open_catalog(props).load_table(f"{out}_backfill")
    marks = {k: v for k, v in target.properties.items() if k.startswith("kappa.batch.")}
    assert list(marks.values()) == ["1"], marks  # batch 1 committed, Spark never knew
    again = run_job(spark, sessionization.JOB, config, options)
    assert again.status == "finished"

    written = open_catalog(props).load_table(f"{out}_backfill").scan().to_arrow().to_pylist()

    def micros(value: object) -> int:
        return int(value.timestamp() * 1_000_000)  # type: ignore[attr-defined]

    rows = [
        (r["rider_id"], micros(r["session_start"]), micros(r["session_end"]), r["event_count"])
        + (tuple(r["event_types"]),)
        for r in written
    ]
    assert len(rows) == len(set(rows)), "no session twice"
    truth = {r[:5] for r in sessions_by_hand(events, 30 * 60)}
    assert set(rows) == truth


def test_another_run_into_the_same_iceberg_table_is_refused_unless_append(  # type: ignore[no-untyped-def]
    spark, scratch: Path
) -> None:
    """Issue 24 item 1 for the Iceberg target: two configs of a job (the same events under
    two table names) backfilling into one Iceberg table: the second is refused before its
    first batch, naming the table and the other query; with --append it writes."""
    from kappaplus.runtime.state.identity import IdentityError

    start, end = "2024-03-01T00:00:00", "2024-03-01T04:00:00"
    events = rider_events(riders=4, start=start, hours=4, seed=5)
    first_in, second_in = f"ev_{uid()}", f"ev_{uid()}"
    for name in (first_in, second_in):
        write_table(spark, name, events, RIDER_EVENT_DDL)
    props = catalog_props(scratch / "catalog")
    out = f"db.claims_{uid()}"

    def config(table: str):  # type: ignore[no-untyped-def]
        return example_config(
            "sessionization",
            {
                "inputs": {"rider_events": {"hive": {"table": table}}},
                "outputs": {
                    "sessions": {"hive": None, "iceberg": {"table": out, "catalog": props}}
                },
            },
            scratch,
        )

    options = RunOptions("backfill", start, end, poll_seconds=0.2)
    assert run_job(spark, sessionization.JOB, config(first_in), options).status == "finished"
    written = open_catalog(props).load_table(f"{out}_backfill").scan().to_arrow().num_rows
    assert written > 0
    with pytest.raises(IdentityError) as refused:
        run_job(spark, sessionization.JOB, config(second_in), options)
    assert f"{out}_backfill" in str(refused.value) and "--append" in str(refused.value)
    after = open_catalog(props).load_table(f"{out}_backfill").scan().to_arrow().num_rows
    assert after == written, "nothing written by the refused run"
    appended = RunOptions("backfill", start, end, poll_seconds=0.2, append=True)
    assert run_job(spark, sessionization.JOB, config(second_in), appended).status == "finished"
    doubled = open_catalog(props).load_table(f"{out}_backfill").scan().to_arrow().num_rows
    assert doubled == 2 * written  # deliberately, as asked
