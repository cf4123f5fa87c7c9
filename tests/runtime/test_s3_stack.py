"""``kappa up --s3``: the embedded S3-compatible store (moto_server) as the CLI starts it, in
real processes. The catalog line ``kappa up`` prints is pasted, as a user would, into what
writes the tables (pyiceberg) and into a job config; ``kappa down`` leaves no process.

- fast: up (and up again: reused), an Iceberg table written and read back through the
  printed catalog, ``kappa s3 status``, down;
- slow (a ``kappa run`` process of its own, a Spark JVM): a backfill of the sessionization
  job (session windows) from an Iceberg table in the bucket into an Iceberg table in the
  bucket equals the sessions computed by hand from the events written; the same from a
  Delta table in the bucket into a Delta table there (the ``storage_options`` line pasted).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from runtime_helpers import sessions_by_hand

from kappaplus.examples.generate import rider_events
from kappaplus.local.processes import free_port, pid_alive, port_open
from kappaplus.local.s3 import ObjectStore

sys.path.insert(0, str(Path(__file__).parents[1]))
from iceberg_tables import open_catalog, write_events  # noqa: E402

START = "2024-03-01T00:00:00"
GAP = 30 * 60


def kappa(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m kappaplus ARGS`` in a process of its own, state directory ``home``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAPPA_")}
    env["KAPPA_HOME"] = str(home)
    # JVM flags only: the tests' quick JIT tier and class archive (tests/conftest.py)
    env["KAPPA_DRIVER_JAVA_OPTIONS"] = os.environ.get("KAPPA_DRIVER_JAVA_OPTIONS", "")
    env["PYTHONPATH"] = str(Path(__file__).parents[2])
    env["COLUMNS"] = "250"
    return subprocess.run(
        [sys.executable, "-m", "kappaplus", *args],
        cwd=home.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def printed_line(output: str, key: str) -> str:
    """The ``key = {...}`` line ``kappa up`` (or ``kappa s3 start``) prints: what a user
    pastes into a job config, as printed."""
    lines = (line.strip() for line in output.splitlines())
    return next(line for line in lines if line.startswith(f"{key} = "))


def printed(output: str, key: str) -> dict[str, str]:
    """The inline table ``kappa up`` prints after ``key =``, parsed as the TOML it is."""
    value = tomllib.loads(printed_line(output, key))[key]
    assert isinstance(value, dict)
    return value


class Stack:
    """``kappa up --s3`` (broker and metastore off) in ``home`` on a free port; ``down()``
    checks that ``kappa down`` stops moto_server and removes the catalog."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.port = free_port()
        up = kappa(home, "up", "--s3", "--no-broker", "--no-metastore", "--s3-port", str(self.port))
        assert up.returncode == 0, up.stdout + up.stderr
        self.endpoint = f"http://127.0.0.1:{self.port}"
        assert f"export KAPPA_S3_ENDPOINT={self.endpoint}" in up.stdout, up.stdout
        self.catalog = printed(up.stdout, "catalog")
        self.storage_options = printed(up.stdout, "storage_options")
        status = ObjectStore(home).status()
        assert status.running and status.pid is not None and status.endpoint == self.endpoint
        self.pid = status.pid

    def down(self) -> None:
        done = kappa(self.home, "down")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "s3 store stopped" in done.stdout, done.stdout
        assert not pid_alive(self.pid), "moto_server is gone"
        assert not port_open(self.port)
        assert not (self.home / "s3" / "catalog.db").exists(), "the catalog of lost objects"
        assert "no s3 store running" in kappa(self.home, "s3", "status").stdout
        assert "no local services running" in kappa(self.home, "status").stdout

    def kill(self) -> None:
        """After a failure: no moto_server left behind."""
        ObjectStore(self.home).stop()


@pytest.fixture()
def stack(tmp_path: Path) -> Any:
    home = tmp_path / "home"
    home.mkdir()
    started = Stack(home)
    yield started
    started.kill()


def test_up_s3_prints_a_catalog_that_puts_tables_in_the_bucket(stack: Stack) -> None:
    events = rider_events(riders=5, start=START, hours=2, seed=3, late_fraction=0.0)
    assert stack.catalog["warehouse"] == "s3://kappa/warehouse"
    assert stack.catalog["s3.endpoint"] == stack.endpoint
    assert stack.storage_options["AWS_ENDPOINT_URL"] == stack.endpoint
    write_events(stack.catalog, "db.rides", events)
    table = open_catalog(stack.catalog).load_table("db.rides")
    assert table.location().startswith("s3://kappa/warehouse/")
    ids = table.scan().to_arrow()["event_id"].to_pylist()
    assert sorted(ids) == sorted(e["event_id"] for e in events)
    again = kappa(stack.home, "up", "--s3", "--no-broker", "--no-metastore")
    assert again.returncode == 0 and "already running" in again.stdout, again.stdout
    assert ObjectStore(stack.home).status().pid == stack.pid, "reused, not restarted"
    shown = kappa(stack.home, "s3", "status")
    assert shown.returncode == 0 and stack.endpoint in shown.stdout, shown.stdout
    listed = kappa(stack.home, "status")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert f"local services: s3 {stack.endpoint} (s3://kappa/)" in listed.stdout, listed.stdout
    stack.down()


def backfill_sessions(stack: Stack, events: list[Any], input_toml: str, output_toml: str) -> None:
    """``kappa run sessionization --mode backfill`` over the events' range with the input
    and output sections given (each ``[...]`` header and its keys)."""
    config = stack.home.parent / "sessions_s3.toml"
    config.write_text(
        f"""
job = "kappaplus.examples.sessionization:JOB"
watermark_delay = "2 hours"
checkpoint_dir = {json.dumps(str(stack.home.parent / "checkpoints"))}

[params]
session_gap = "30 minutes"

{input_toml}
{output_toml}
"""
    )
    end = (events[-1]["event_time"] + timedelta(hours=2)).isoformat()
    run = kappa(
        stack.home,
        *("run", "sessionization", "--config", str(config), "--mode", "backfill"),
        *("--start", START, "--end", end, "--no-progress"),
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


def session_rows(out: pa.Table) -> list[tuple[Any, ...]]:
    """The sessions of an output table as tuples, session times as epoch microseconds."""
    for name in ("session_start", "session_end"):
        out = out.set_column(out.schema.get_field_index(name), name, out[name].cast(pa.int64()))
    return [
        (r["rider_id"], r["session_start"], r["session_end"], r["event_count"])
        + (tuple(r["event_types"]), r["trip_requested"])
        for r in out.to_pylist()
    ]


@pytest.mark.slow  # a kappa run process (a Spark JVM of its own): 1-3 minutes under load
def test_backfill_from_an_iceberg_table_on_the_embedded_store(stack: Stack) -> None:
    events = rider_events(riders=20, start=START, hours=6, seed=11, late_fraction=0.0)
    write_events(stack.catalog, "db.rides", events)
    catalog = printed_line(kappa(stack.home, "s3", "start").stdout, "catalog")
    backfill_sessions(
        stack,
        events,
        '[inputs.rider_events.iceberg]\ntable = "db.rides"\nevent_time_column = "event_time"\n'
        f'maxEventTimePerTrigger = "2 hours"\n{catalog}\n',
        f'[outputs.sessions.iceberg]\ntable = "db.sessions"\n{catalog}\n',
    )
    table = open_catalog(stack.catalog).load_table("db.sessions_backfill")
    assert table.location().startswith("s3://kappa/warehouse/")
    rows = session_rows(table.scan().to_arrow())
    assert len(rows) == len(set(rows)), "no duplicate sessions"
    assert set(rows) == sessions_by_hand(events, GAP)
    stack.down()


def write_delta_events(uri: str, storage_options: dict[str, str], events: list[Any]) -> None:
    """An unpartitioned Delta table of rider events at ``uri`` (delta-rs), in four appends in
    arrival order (files out of event-time order), as ``write_events`` writes Iceberg."""
    from deltalake import write_deltalake

    from kappaplus.examples.generate import arrival_order

    ordered = arrival_order(events)
    for k in range(4):
        chunk = ordered[k::4]
        columns = {
            c: pa.array([e[c] for e in chunk], pa.string())
            for c in ("event_id", "rider_id", "event_type", "area")
        }
        times = pa.array([e["event_time"] for e in chunk], pa.timestamp("us", tz="UTC"))
        write_deltalake(
            uri,
            pa.table({**columns, "event_time": times}),
            mode="append",
            storage_options=storage_options,
        )


@pytest.mark.slow  # a kappa run process (a Spark JVM of its own): under a minute
def test_backfill_from_a_delta_table_on_the_embedded_store(stack: Stack) -> None:
    """A Delta lake on an object store, as teams keep one: the table in the bucket, read by
    the Python reader (no hadoop-aws for the JVM's), sessions into a Delta table there."""
    from deltalake import DeltaTable

    events = rider_events(riders=20, start=START, hours=6, seed=12, late_fraction=0.0)
    rides = "s3://kappa/lake/rides"
    write_delta_events(rides, stack.storage_options, events)
    storage = printed_line(kappa(stack.home, "s3", "start").stdout, "storage_options")
    backfill_sessions(
        stack,
        events,
        f'[inputs.rider_events.delta]\npath = "{rides}"\nevent_time_column = "event_time"\n'
        f'maxEventTimePerTrigger = "2 hours"\n{storage}\n',
        f'[outputs.sessions.delta]\npath = "s3://kappa/lake/sessions"\n{storage}\n',
    )
    out = DeltaTable("s3://kappa/lake/sessions_backfill", storage_options=stack.storage_options)
    rows = session_rows(out.to_pyarrow_table())
    assert len(rows) == len(set(rows)), "no duplicate sessions"
    assert set(rows) == sessions_by_hand(events, GAP)
    stack.down()
