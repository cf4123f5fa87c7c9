"""A stream run and a backfill run of one job at the same time, as separate processes.

The issue's requirement: ``kappa run sessionization --mode stream`` and ``kappa run
sessionization --mode backfill`` run side by side on the embedded stack. Embedded Derby
admits one process, so the state directory gets a metastore server (what ``kappa up``
starts) and every process finds it by itself -- no ``--metastore-uri`` anywhere below.

Processes: the metastore server; a catalog process that writes the Hive table of rider
events, stays up while the runs go, then reads both outputs; the stream run (Kafka) and
the backfill run (Hive), launched together. The test process's own SparkSession uses
another state directory and is not involved.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import tomllib
from collections import Counter
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

import pytest
from runtime_helpers import EXAMPLES, _merge, flush_events, sessions_by_hand

from kappaplus.config import load_config
from kappaplus.examples.generate import arrival_order, produce, rider_events
from kappaplus.local.demo import config_toml
from kappaplus.local.metastore import MetastoreServer
from kappaplus.runtime.state.records import list_runs

START, END = "2024-03-01T00:00:00", "2024-03-01T06:00:00"
EVENTS: dict[str, Any] = {
    "riders": 6,
    "start": START,
    "hours": 6,
    "seed": 2,
    "late_fraction": 0.5,
    "late_delay": [2.5 * 3600.0, 3.5 * 3600.0],
}
GAP = 30 * 60
BATCH = 30  # Kafka records per stream micro-batch: a few batches, so lateness can happen
# seconds without input before the stream run stops. Idleness counts from the start of its
# queries whether or not a batch ran (issue 47 item 4), and the records are produced only
# once the backfill run is under way: long enough to cover the backfill's start after the
# stream's (both launched together; the stream then stops IDLE s after its last batch)
IDLE = 45
COLUMNS = [
    "rider_id",
    "unix_micros(session_start)",
    "unix_micros(session_end)",
    "event_count",
    "event_types",
    "trip_requested",
]

# Writes the rider events table, reports which metastore it got, then waits for the names
# of the tables to read back (one line of JSON on stdin) and prints their rows.
CATALOG = textwrap.dedent(
    f"""
    import json, sys
    from kappaplus.examples.generate import RIDER_EVENT_DDL, rider_events, write_table
    from kappaplus.local.metastore import LOCAL_DISCOVERY
    from kappaplus.session import create_session

    spark = create_session("catalog", metastore_discovery=LOCAL_DISCOVERY)
    uri = spark.sparkContext.getConf().get("spark.hadoop.hive.metastore.uris", None)
    params = json.loads(sys.argv[1])
    params["late_delay"] = tuple(params["late_delay"])
    write_table(spark, "rider_events", rider_events(**params), RIDER_EVENT_DDL)
    rows = spark.table("rider_events").count()
    print(json.dumps({{"metastore": uri, "rows": rows}}), flush=True)
    out = {{}}
    for table in json.loads(sys.stdin.readline()):
        if not spark.catalog.tableExists(table):
            out[table] = None
            continue
        spark.catalog.refreshTable(table)
        out[table] = [list(r) for r in spark.table(table).selectExpr(*{COLUMNS!r}).collect()]
    print(json.dumps(out), flush=True)
    spark.stop()
    """
)


@pytest.fixture()
def stack_home(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A state directory with a running metastore server (what `kappa up` starts)."""
    home = tmp_path / "home"
    server = MetastoreServer(home)
    try:
        yield home, server.start()
    finally:
        server.stop()  # always, also when the test fails


class Proc:
    """A child process with its output in a file and its wall-clock lifetime."""

    def __init__(self, name: str, args: list[str], env: Mapping[str, str], logs: Path) -> None:
        self.name = name
        self.log = logs / f"{name}.log"
        self.started = time.time()
        with open(self.log, "w") as handle:
            self.proc = subprocess.Popen(
                args, env=dict(env), stdout=handle, stderr=subprocess.STDOUT, text=True
            )
        self.ended: float | None = None
        self._watch = threading.Thread(target=self._wait, daemon=True)
        self._watch.start()

    def _wait(self) -> None:
        self.proc.wait()
        self.ended = time.time()

    def finish(self, timeout: float) -> int:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._watch.join(5)
        return self.proc.returncode

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:]


def read_line(stream: IO[str], proc: subprocess.Popen[str], timeout: float) -> str:
    """The next line of ``stream``, skipping log noise; fails if ``proc`` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = stream.readline()
        if line.startswith("{"):
            return line
        if not line and proc.poll() is not None:
            raise AssertionError(f"catalog process exited with {proc.returncode}; see its log")
    raise AssertionError("catalog process did not answer in time")


def wait_for_run(home: Path, mode: str, proc: Proc, timeout: float) -> None:
    """Wait until a run of ``mode`` has its record (saved once its queries started);
    fails if ``proc`` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(r.mode == mode for r in list_runs(home)):
            return
        if proc.proc.poll() is not None:
            raise AssertionError(f"{proc.name} exited {proc.proc.returncode}:\n{proc.tail()}")
        time.sleep(0.2)
    raise AssertionError(f"no {mode} run started in {timeout:.0f}s:\n{proc.tail()}")


def as_session(row: list[Any]) -> tuple[Any, ...]:
    rider, start, end, count, kinds, trip = row
    return (rider, start, end, count, tuple(kinds), trip)


# slow (~2 min: two `kappa run` processes, the stream waiting out its idle time)
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_stream_and_backfill_run_at_the_same_time(
    stack_home: tuple[Path, str], kafka_bootstrap: str, new_topic: Any, tmp_path: Path
) -> None:
    home, uri = stack_home
    began = time.monotonic()
    env = {
        **os.environ,
        "KAPPA_HOME": str(home),
        # Three Spark JVMs start at once on a small machine: the quick JIT tier and serial
        # GC every test `kappa` process gets (KAPPA_DRIVER_JAVA_OPTIONS, tests/conftest.py)
        # take much less CPU, so Python workers still connect back within Spark's fixed 10 s.
        "KAPPA_DRIVER_MEMORY": "1g",
    }
    env.pop("KAPPA_METASTORE_URI", None)  # found from the state directory, nothing else

    # -- the Hive table, written by a process of its own through the server ---------------
    catalog_log = open(tmp_path / "catalog.log", "w")  # noqa: SIM115 - closed below
    catalog = subprocess.Popen(
        [sys.executable, "-c", CATALOG, json.dumps(EVENTS)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=catalog_log,
        text=True,
    )
    try:
        assert catalog.stdin is not None and catalog.stdout is not None
        ready = json.loads(read_line(catalog.stdout, catalog, 400))
        events = rider_events(**{**EVENTS, "late_delay": tuple(EVENTS["late_delay"])})
        assert ready == {"metastore": uri, "rows": len(events)}, "the server was discovered"
        table_ready = time.monotonic() - began

        # -- the topic the stream reads; its records are produced once both runs go (below)
        topic = new_topic(prefix="rider-events")

        # -- the job config: the example's, bound to this topic and table -----------------
        raw = tomllib.loads((EXAMPLES / "sessionization.toml").read_text())
        merged = _merge(
            raw,
            {
                "inputs": {
                    "rider_events": {
                        "kafka": {
                            "topic": topic,
                            "bootstrap_servers": kafka_bootstrap,
                            "maxOffsetsPerTrigger": BATCH,
                        },
                        "hive": {"table": "rider_events"},
                    }
                },
                "outputs": {"sessions": {"hive": {"table": "rider_sessions"}}},
            },
        )
        merged["inputs"]["rider_events"]["kafka"].pop("dlq", None)  # one query per run
        config = tmp_path / "sessionization.toml"
        config.write_text(config_toml(merged))
        load_config(config)  # valid before two JVMs are spent on it

        # -- both runs at once ------------------------------------------------------------
        kappa = str(Path(sys.executable).parent / "kappa")
        common = ["run", "sessionization", "--config", str(config), "--no-progress"]
        launched = time.monotonic()
        stream = Proc(
            "stream",
            [
                kappa,
                *common,
                "--mode",
                "stream",
                "--trigger",
                "2 seconds",
                "--until-idle",
                str(IDLE),
                "--timeout",
                "500",
            ],
            env,
            tmp_path,
        )
        backfill = Proc(
            "backfill",
            [kappa, *common, "--mode", "backfill", "--start", START, "--end", END],
            env,
            tmp_path,
        )
        # -- the same events on Kafka, in arrival order, then a far-future rider whose
        # events push the stream's watermark past every session: produced once the backfill
        # run is under way: the stream run, which stops only after it read them, overlaps it
        wait_for_run(home, "backfill", backfill, 400)
        flush_at = events[-1]["event_time"] + timedelta(days=1)
        flush = flush_events(flush_at, 5)
        produce(kafka_bootstrap, topic, arrival_order(events) + flush)
        codes = {p.name: p.finish(timeout=600) for p in (stream, backfill)}
        both_done = time.monotonic() - launched
        for p in (stream, backfill):
            assert codes[p.name] == 0, f"{p.name} exited {codes[p.name]}:\n{p.tail()}"

        # -- they overlapped: as processes, and as runs (their run records) ---------------
        assert stream.ended is not None and backfill.ended is not None
        assert max(stream.started, backfill.started) < min(stream.ended, backfill.ended)
        records = {r.mode: r for r in list_runs(home)}
        assert set(records) == {"stream", "backfill"}
        for record in records.values():
            assert record.status == "finished", record
            assert record.ended_at is not None
        starts = [r.started_at for r in records.values()]
        ends = [r.ended_at or 0.0 for r in records.values()]
        overlap = min(ends) - max(starts)
        assert overlap > 0, f"the runs did not overlap: {records}"
        # nobody opened the embedded Derby database: every process used the server
        assert not (home / "metastore_db").exists()

        # -- both outputs, read in one session through the server --------------------------
        catalog.stdin.write(json.dumps(["rider_sessions", "rider_sessions_backfill"]) + "\n")
        catalog.stdin.flush()
        tables = json.loads(read_line(catalog.stdout, catalog, 300))
        assert catalog.wait(timeout=120) == 0
    finally:
        if catalog.poll() is None:
            catalog.kill()
            catalog.wait()
        catalog_log.close()
    assert tables["rider_sessions"] is not None and tables["rider_sessions_backfill"] is not None
    stream_rows = [as_session(r) for r in tables["rider_sessions"]]
    backfill_rows = [as_session(r) for r in tables["rider_sessions_backfill"]]
    total = time.monotonic() - began

    # no duplicate sessions in either output
    for rows in (stream_rows, backfill_rows):
        keys = Counter((r[0], r[1]) for r in rows)
        assert rows and max(keys.values()) == 1

    # backfill: every event, so exactly the sessions made by hand
    truth = sessions_by_hand(events, GAP)
    assert set(backfill_rows) == truth
    assert records["backfill"].rows_dropped_late == 0

    # stream == backfill for riders without late events; a late rider's session either
    # has its late event or (dropped by the watermark) lacks it -- the count is the same,
    # as a late event falls inside one of its rider's sessions
    late = [e for e in events if e["arrival_time"] - e["event_time"] > timedelta(minutes=30)]
    late_riders = {e["rider_id"] for e in late}
    assert late_riders and len(late_riders) < EVENTS["riders"]
    on_time = {r for r in stream_rows if r[0] not in late_riders}
    assert on_time and on_time == {r for r in truth if r[0] not in late_riders}
    late_ids = {e["event_id"] for e in late}
    without_late = sessions_by_hand([e for e in events if e["event_id"] not in late_ids], GAP)
    assert {r for r in stream_rows if r[0] in late_riders} <= truth | without_late
    assert len(stream_rows) == len(truth)
    missing = sum(r[3] for r in backfill_rows) - sum(r[3] for r in stream_rows)
    assert missing == records["stream"].rows_dropped_late
    # the late events arrive hours behind: the stream drops some (which ones depends on
    # its batch boundaries), so the comparison above covers both kinds of rider
    assert 1 <= missing <= len(late)

    print(
        f"\n{len(events)} events, {len(truth)} sessions, {missing} late events dropped by "
        f"the stream; table ready after {table_ready:.0f}s; both runs done "
        f"{both_done:.0f}s after launch (stream process {stream.ended - stream.started:.0f}s, "
        f"backfill process {backfill.ended - backfill.started:.0f}s, runs overlapped "
        f"{overlap:.0f}s); test total {total:.0f}s"
    )
