"""Chaos suite: interrupt real ``kappa run`` processes at random moments and check that
nothing is lost, nothing doubled, nothing silent.

Each scenario runs the reference sessionization backfill as an operator would (``kappa run``
in its own process group, its own state directory) into its own output table, interrupts
it, runs the same command again, and compares the output with an uninterrupted run, row
for row. A scenario passes when the output equals the uninterrupted one (0 lost, 0
duplicated), or when the run refused with a named error (exit 2, one line, no traceback).

    python tests/chaos/chaos.py --scenarios 8 --seed 1      # make chaos

Scenarios: ``sigterm-group`` (SIGTERM to the whole process group, as ``timeout``,
systemd and Kubernetes do), ``sigint-group``, ``sigkill`` (the driver only; its JVM must
follow), ``lost-checkpoint`` (kill, move the checkpoint away, run again: must refuse),
each at a random moment: before the first commit, or after 1-3 committed micro-batches.
``stream-sigkill`` and ``stream-sigterm-group`` do the same to a ``--mode stream`` run
(``--trigger available-now``) reading the same events, in arrival order, from a topic of
the embedded broker; it is compared with an uninterrupted stream run (the late events it
drops depend only on its batches, which a restarted query replays from its offset log).
``bootstrap-sigkill`` and ``bootstrap-sigterm-group`` interrupt a ``--mode bootstrap`` run
(the lake up to a cutoff half-way through the events, then the topic), compared with an
uninterrupted bootstrap.

``promote-sigkill`` runs a stream and a backfill of one config, then ``kappa promote --force``
killed with SIGKILL right after one of its catalog steps (``$KAPPA_PROMOTE_KILL_AFTER``:
the backfill table marked, production renamed to ``_previous``, the backfill renamed to
production), then ``kappa promote`` again: the production name must then hold exactly the
uninterrupted backfill's rows and ``<table>_previous`` exactly the uninterrupted stream's.

``replay-sigkill`` runs a stream whose event-time bound (``max``, half-way through the
events) makes the later half dead letters (with a record no decoder reads), fixes the bound,
and runs ``kappa dlq replay`` killed with SIGKILL at one of three moments: right after it
recorded the letter that failed again (before producing), right after it recorded its
intent to produce (producing under way), or right after the broker acknowledged every
record and before they were recorded (``$KAPPA_REPLAY_FAULT=after-produce``); then the
replay again, then the stream resumed. Each fixable dead letter must be in the input topic
exactly once more (its ``kappa-replay-of`` header once), the unreadable one not, and the
stream's output must equal that of the same steps uninterrupted, row for row.

Server restarts: ``metastore-restart`` runs the backfill on a metastore server (started for
the whole suite when such a scenario is planned, so every run then uses it) and stops and
starts it again on the same port and database at the chosen moment: the run must go on (its
Hive client reconnects, :data:`kappaplus.session.METASTORE_RETRIES`) or fail with one error
line naming the metastore; the rerun must finish. ``metastore-outage`` keeps the server away
``OUTAGE`` seconds, longer than the client reconnects: the run must fail with that line.
``stream-broker-restart`` restarts the embedded broker under a stream run; the broker then
stores its topics in an S3-compatible store on loopback (``moto_server``, dev extras), which
outlives it (with the default memory storage a restart loses every topic).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from kappaplus.local.s3 import ObjectStore, client_env  # noqa: E402

KAPPA = [sys.executable, "-m", "kappaplus.cli"]
START = "2024-03-01T00:00:00"
COLUMNS = "rider_id, session_start, session_end, event_count, event_types"
SCENARIOS = (
    "sigterm-group",
    "sigint-group",
    "sigkill",
    "lost-checkpoint",
    "stream-sigkill",
    "stream-sigterm-group",
    "bootstrap-sigkill",
    "bootstrap-sigterm-group",
    "metastore-restart",
    "metastore-outage",
    "stream-broker-restart",
    "promote-sigkill",
    "replay-sigkill",
)
PROMOTE_STEPS = ("marked", "production_moved", "backfill_moved")
"""The steps of ``kappa promote`` a ``promote-sigkill`` scenario kills it after
(:data:`kappaplus.promote.swap.STEPS`)."""
RESTARTS = {
    "metastore-restart": "metastore",
    "metastore-outage": "metastore",
    "stream-broker-restart": "broker",
}
OUTAGE = 90.0
"""Seconds ``metastore-outage`` keeps the metastore away: longer than a session's Hive
client reconnects (about 40 s, :data:`kappaplus.session.METASTORE_RETRIES`)."""
"""Scenarios that restart a server mid-run instead of signalling ``kappa run``."""
TRACEBACK = re.compile(r"^Traceback \(most recent call last\):", re.MULTILINE)
"""A Python traceback kappa run printed. Spark's log of a query that failed in a Python
``foreachBatch`` quotes the worker's traceback inside a line ("Return Message: Traceback
..."): that one is the log's, kept there on purpose."""
STREAM_TOPIC = "chaos-events"
REPLAY_MOMENTS = ("after-failed", "after-intent", "after-produce")
"""When a ``replay-sigkill`` scenario kills ``kappa dlq replay`` (see the docstring)."""
UNREADABLE = b"{not json"
"""A record no decoder reads: a dead letter that fails again at every replay."""
STREAM_BATCH = 60  # Kafka records per stream micro-batch


def mode_of(scenario: str) -> str:
    """The ``kappa run --mode`` a scenario interrupts."""
    for mode in ("stream", "bootstrap", "promote", "replay"):
        if scenario.startswith(f"{mode}-"):
            return mode
    return "backfill"


def cutoff_of(hours: int) -> str:
    """A bootstrap's cutoff: half-way through the events (the lake before, Kafka after)."""
    return f"2024-03-01T{hours // 2:02d}:00:00"


@dataclass
class Outcome:
    name: str
    moment: str
    first_exit: int | None
    second_exit: int | None
    rows: int = 0
    expected: int = 0
    lost: int = 0
    duplicated: int = 0
    refused: str | None = None
    failed: str | None = None  # the one error line of a first run a restart made fail
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def line(self) -> str:
        verdict = "ok" if self.ok else "FAIL: " + "; ".join(self.problems)
        what = (
            f"refused ({self.refused})"
            if self.refused
            else f"{self.rows} rows, {self.lost} lost, {self.duplicated} duplicated"
        )
        extra = "".join(f"\n    {note}" for note in self.notes)
        if self.failed:
            extra += f"\n    first run: {self.failed}"
        return (
            f"{self.name:23} {self.moment:18} exits {self.first_exit}/{self.second_exit}: "
            f"{what} -- {verdict}{extra}"
        )


def _env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["KAPPA_HOME"] = str(home)
    env.pop("KAPPA_METASTORE_URI", None)
    return env


def _python(home: Path, code: str, timeout: float = 600) -> str:
    """Run ``code`` in a fresh Python process with state directory ``home``; its stdout."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise RuntimeError(f"helper failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


def end_of(hours: int) -> str:
    return f"2024-03-01T{hours:02d}:00:00" if hours < 24 else "2024-03-02T00:00:00"


def prepare(home: Path, table: str, riders: int, seed: int, hours: int = 12) -> None:
    """Create the input table in ``home``'s metastore."""
    _python(
        home,
        f"""
        from kappaplus.examples.generate import RIDER_EVENT_DDL, rider_events, write_table
        from kappaplus.core.jvm import shutdown_jvm
        from kappaplus.local.metastore import LOCAL_DISCOVERY
        from kappaplus.session import create_session, stop_session
        spark = create_session("chaos-prepare", metastore_discovery=LOCAL_DISCOVERY)
        events = rider_events(riders={riders}, start={START!r}, hours={hours}, seed={seed},
                              late_fraction=0.2)
        write_table(spark, {table!r}, events, RIDER_EVENT_DDL)
        stop_session(spark)
        shutdown_jvm()
        """,
    )


def read_outputs(home: Path, tables: list[str]) -> dict[str, list[list[object]]]:
    """Rows of each table (a missing table: no rows), as JSON-able lists."""
    out = _python(
        home,
        f"""
        import json
        from kappaplus.core.jvm import shutdown_jvm
        from kappaplus.local.metastore import LOCAL_DISCOVERY
        from kappaplus.session import create_session, stop_session
        spark = create_session("chaos-read", metastore_discovery=LOCAL_DISCOVERY)
        found = {{}}
        for table in {tables!r}:
            if not spark.catalog.tableExists(table):
                found[table] = []
                continue
            rows = spark.sql(f"SELECT {COLUMNS} FROM {{table}}").collect()
            found[table] = [[str(v) for v in row] for row in rows]
        print(json.dumps(found))
        stop_session(spark)
        shutdown_jvm()
        """,
    )
    return dict(json.loads(out.strip().splitlines()[-1]))


def write_config(
    home: Path,
    table: str,
    out: str,
    bootstrap: str = "127.0.0.1:9092",
    topic: str = STREAM_TOPIC,
    extra: str = "",
) -> Path:
    config = home / f"{out}.toml"
    config.write_text(
        textwrap.dedent(
            f"""
            job = "kappaplus.examples.sessionization:JOB"
            checkpoint_dir = "{home / "checkpoints" / out}"
            [params]
            session_gap = "30 minutes"
            [inputs.rider_events.kafka]
            topic = "{topic}"
            bootstrap_servers = "{bootstrap}"
            starting_offsets = "earliest"
            maxOffsetsPerTrigger = {STREAM_BATCH}
            [inputs.rider_events.hive]
            table = "{table}"
            event_time_column = "event_time"
            partition_format = "dt=%Y-%m-%d/hr=%H"
            [outputs.sessions.hive]
            table = "{out}"
            [mode.backfill]
            watermark_delay = "1 hour"
            [mode.backfill.inputs.rider_events.hive]
            maxEventTimePerTrigger = "1 hour"
            """
        )
        + extra
    )
    return config


def kappa_run(
    home: Path,
    config: Path,
    *,
    interrupt: tuple[int | Callable[[], None], int] | None = None,
    timeout: float = 900,
    end: str = "2024-03-01T12:00:00",
    mode: str = "backfill",
    cutoff: str = "2024-03-01T06:00:00",
    notes: list[str] | None = None,
) -> tuple[int, str]:
    """``kappa run`` the backfill (own process group); with ``interrupt = (signal,
    commits)`` send ``signal`` once ``commits`` micro-batches are committed (0: right after
    the first offsets are planned). SIGTERM/SIGINT go to the whole group, SIGKILL to the
    driver only (its JVM must not outlive it). Instead of a signal, ``interrupt`` may hold
    an action (restart a server) done at that moment while the run goes on. Returns (exit
    code, stdout and stderr)."""
    command = [
        *KAPPA,
        "run",
        "sessionization",
        "-c",
        str(config),
        "--mode",
        mode,
        *(
            ["--start", START, "--end", end]
            if mode == "backfill"
            else ["--trigger", "available-now"]
        ),
        *(["--cutoff", cutoff] if mode == "bootstrap" else []),
        "--no-progress",
    ]
    proc = subprocess.Popen(
        command,
        env=_env(home),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    root = home / "checkpoints" / config.stem
    deadline = time.monotonic() + timeout
    if interrupt is not None:
        sig, commits = interrupt
        pattern = f"**/commits/{commits - 1}" if commits > 0 else "**/offsets/0"
        while proc.poll() is None and time.monotonic() < deadline:
            if any(root.glob(pattern)):
                if callable(sig):
                    if notes is not None and proc.poll() is not None:
                        notes.append("the run had ended before the restart")
                    sig()
                    if notes is not None and proc.poll() is not None:
                        notes.append("the run ended during the restart")
                elif sig == signal.SIGKILL:
                    proc.kill()
                else:
                    os.killpg(proc.pid, sig)
                break
            time.sleep(0.05)
    try:
        out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    err = f"{out}\n{err}"  # the error line of kappa run is on stdout, logs on stderr
    if interrupt is not None and not callable(interrupt[0]) and interrupt[0] == signal.SIGKILL:
        _wait_for_jvm_exit(home)
    return proc.returncode, err


def jvms_of(home: Path) -> list[int]:
    """Pids of processes whose command line names ``home`` (the JVMs of its sessions; not
    the metastore server's, which serves every run)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"HiveMetaStore" in cmdline:
            continue
        if b"java" in cmdline and str(home).encode() in cmdline:
            found.append(int(entry.name))
    return found


def _wait_for_jvm_exit(home: Path, timeout: float = 60) -> None:
    """After a SIGKILL of the driver, its JVM exits on its own (stdin closed)."""
    deadline = time.monotonic() + timeout
    while jvms_of(home) and time.monotonic() < deadline:
        time.sleep(0.2)


def check(outcome: Outcome, rows: list[list[object]], baseline: list[list[object]]) -> Outcome:
    got = [tuple(r) for r in rows]
    want = {tuple(r) for r in baseline}
    outcome.rows, outcome.expected = len(got), len(want)
    outcome.duplicated = len(got) - len(set(got))
    outcome.lost = len(want - set(got))
    extra = len(set(got) - want)
    if outcome.duplicated:
        outcome.problems.append(f"{outcome.duplicated} duplicated")
    if outcome.lost:
        outcome.problems.append(f"{outcome.lost} lost")
    if extra:
        outcome.problems.append(f"{extra} rows not in the uninterrupted run")
    return outcome


def scenario(
    home: Path,
    table: str,
    name: str,
    out: str,
    commits: int,
    end: str,
    bootstrap: str = "",
    cutoff: str = "2024-03-01T06:00:00",
    stack: Stack | None = None,
    events: tuple[int, int, int] = (30, 1, 12),
) -> tuple[Outcome, str | None]:
    """Run one scenario; returns the outcome (rows checked later) and the table to read.
    ``events``: riders, seed and hours of the input's events."""
    config = write_config(home, table, out, bootstrap or "127.0.0.1:9092")
    moment = "before 1st commit" if commits == 0 else f"after {commits} commit(s)"
    if name in RESTARTS:
        return restart_scenario(home, name, out, commits, end, config, moment, stack)
    if name == "promote-sigkill":
        return promote_scenario(home, name, out, PROMOTE_STEPS[commits % 3], end, config)
    if name == "replay-sigkill":
        # rows compared in main() with the same steps uninterrupted (the replay baseline)
        when = REPLAY_MOMENTS[commits % len(REPLAY_MOMENTS)]
        return replay_steps(home, table, out, bootstrap, cutoff, events, when)
    sig = {
        "sigterm-group": signal.SIGTERM,
        "sigint-group": signal.SIGINT,
        "sigkill": signal.SIGKILL,
        "lost-checkpoint": signal.SIGKILL,
        "stream-sigkill": signal.SIGKILL,
        "stream-sigterm-group": signal.SIGTERM,
        "bootstrap-sigkill": signal.SIGKILL,
        "bootstrap-sigterm-group": signal.SIGTERM,
    }[name]
    mode = mode_of(name)
    first, err1 = kappa_run(
        home, config, interrupt=(sig, commits), end=end, mode=mode, cutoff=cutoff
    )
    outcome = Outcome(name, moment, first, None)
    if "Traceback" in err1:
        outcome.problems.append("a traceback on the terminal: " + err1[-300:])
    if sig == signal.SIGTERM and first not in (0, 143):
        outcome.problems.append(f"SIGTERM exit {first}, expected 143 (or 0 if it had finished)")
    if sig == signal.SIGINT and first not in (0, 130):
        outcome.problems.append(f"SIGINT exit {first}, expected 130 (or 0 if it had finished)")
    if jvms_of(home):
        outcome.problems.append(f"a JVM outlived kappa run: {jvms_of(home)}")
    if name == "lost-checkpoint":
        moved = home / f"{out}.moved"
        shutil.move(str(home / "checkpoints" / out), str(moved))
    second, err2 = kappa_run(home, config, end=end, mode=mode, cutoff=cutoff)
    outcome.second_exit = second
    if "Traceback" in err2:
        outcome.problems.append("a traceback on the rerun: " + err2[-300:])
    if name == "lost-checkpoint" and second == 2:
        lines = [line for line in err2.splitlines() if line.startswith("error:")]
        outcome.refused = (lines[-1] if lines else err2.strip()[-200:])[:160]
        if "DROP TABLE" not in err2 and "already holds" not in err2:
            outcome.problems.append("refused without naming the table and the way out")
        return outcome, out
    if second != 0:
        outcome.problems.append(f"the rerun exited {second}: {err2[-300:]}")
    return outcome, out


def kappa_promote(home: Path, config: Path, kill_after: str | None = None) -> tuple[int, str]:
    """``kappa promote sessionization --force`` (no reconcile keys in this config); with
    ``kill_after`` it kills itself with SIGKILL right after that step."""
    env = _env(home)
    if kill_after is not None:
        env["KAPPA_PROMOTE_KILL_AFTER"] = kill_after
    done = subprocess.run(
        [*KAPPA, "promote", "sessionization", "-c", str(config), "--force"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if kill_after is not None:
        _wait_for_jvm_exit(home)
    return done.returncode, f"{done.stdout}\n{done.stderr}"


def promote_scenario(
    home: Path, name: str, out: str, step: str, end: str, config: Path
) -> tuple[Outcome, str | None]:
    """A stream and a backfill of one config, ``kappa promote`` killed after ``step``, and
    the command again: rows checked in :func:`main` (``out``: the backfill's rows;
    ``out_previous``: the stream's)."""
    outcome = Outcome(name, f"killed after {step}", None, None)
    for mode in ("stream", "backfill"):
        code, err = kappa_run(home, config, end=end, mode=mode)
        if code != 0:
            outcome.problems.append(f"the {mode} run exited {code}: {err[-300:]}")
            return outcome, None
    outcome.first_exit, err1 = kappa_promote(home, config, kill_after=step)
    if outcome.first_exit != -signal.SIGKILL:
        outcome.problems.append(
            f"promote was not killed (exit {outcome.first_exit}): {err1[-300:]}"
        )
    outcome.second_exit, err2 = kappa_promote(home, config)
    if outcome.second_exit != 0 or "resuming promotion" not in err2:
        outcome.problems.append(f"the rerun exited {outcome.second_exit}: {err2[-300:]}")
    if "Traceback" in err2:
        outcome.problems.append("a traceback on the rerun: " + err2[-300:])
    return outcome, out


def replay_configs(
    home: Path, table: str, out: str, bootstrap: str, bound: str, events: tuple[int, int, int]
) -> tuple[Path, Path, str]:
    """A topic of its own holding the stream's events (and an unreadable record), and the
    configs of the replay steps over it: ``bounded`` (every event from ``bound`` on is a
    dead letter) and ``fixed`` (the same binding, without the bound): the same checkpoint."""
    topic, dlq = f"chaos-replay-{out}", f"chaos-replay-{out}-dlq"
    from kappaplus.local.broker import create_topic

    stream_topic(bootstrap, *events, topic=topic, extra=[UNREADABLE])
    create_topic(bootstrap, dlq, partitions=1)
    dead = f'dlq = {{ topic = "{dlq}" }}\n'
    config = write_config(home, table, out, bootstrap, topic)
    text = config.read_text().replace("starting_offsets", dead + "starting_offsets", 1)
    fixed = home / f"{out}.toml"
    fixed.write_text(text)
    bounded = home / f"{out}.bounded.toml"
    bounded.write_text(text + f'[inputs.rider_events.event_time_bounds]\nmax = "{bound}"\n')
    return bounded, fixed, topic


def kappa_replay(
    home: Path, config: Path, moment: str | None = None, notes: list[str] | None = None
) -> tuple[int, str, str]:
    """``kappa dlq replay sessionization --json``; with ``moment`` killed with SIGKILL then
    (:data:`REPLAY_MOMENTS`): after a ledger line of that kind, or by the replay's own
    fault hook right after the broker acknowledged its records. Returns (exit code, stdout,
    stderr)."""
    env = _env(home)
    if moment == "after-produce":
        env["KAPPA_REPLAY_FAULT"] = "after-produce"
    proc = subprocess.Popen(
        [*KAPPA, "dlq", "replay", "sessionization", "-c", str(config), "--json"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    root = home / "checkpoints" / config.stem.split(".")[0]
    kind = {"after-failed": "failed", "after-intent": "intent"}.get(moment or "")
    deadline = time.monotonic() + 600
    while kind is not None and proc.poll() is None and time.monotonic() < deadline:
        lines = [
            line
            for ledger in root.glob("**/dead-letter-replays/*.jsonl")
            for line in ledger.read_text().splitlines()
        ]
        if any(f'"kind": "{kind}"' in line for line in lines):
            proc.kill()
            break
        time.sleep(0.005)
    if kind is not None and proc.returncode is not None and notes is not None:
        notes.append("the replay had ended before the kill")
    out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    if moment is not None:
        _wait_for_jvm_exit(home)
    return proc.returncode, out, err


def replayed_copies(bootstrap: str, topic: str) -> tuple[dict[str, int], int]:
    """How many times each dead letter was produced again to ``topic`` (by its
    ``kappa-replay-of`` header), and how many records of the topic are the unreadable one."""
    from kappaplus.connectors.kafka.whole_topic import read_ranges, true_ends
    from kappaplus.dead_letters.replay import REPLAY_OF

    copies: dict[str, int] = {}
    unreadable = 0
    ranges = true_ends(bootstrap, {}, topic)
    for message in read_ranges(bootstrap, {}, topic, ranges, group_prefix="kappa-chaos"):
        unreadable += message.value() == UNREADABLE
        of = dict(message.headers() or []).get(REPLAY_OF)
        if of is not None:
            copies[of.decode()] = copies.get(of.decode(), 0) + 1
    return copies, unreadable


def replay_steps(
    home: Path,
    table: str,
    out: str,
    bootstrap: str,
    bound: str,
    events: tuple[int, int, int],
    moment: str | None,
) -> tuple[Outcome, str | None]:
    """A stream with the bound, ``kappa dlq replay`` with it fixed (killed at ``moment``,
    then again), the stream resumed: see the module docstring. ``events``: riders, seed
    and hours of the events (:func:`stream_topic`)."""
    bounded, fixed, topic = replay_configs(home, table, out, bootstrap, bound, events)
    when = f"killed {moment}" if moment else "uninterrupted"
    outcome = Outcome("replay-sigkill", when, None, None)
    code, err = kappa_run(home, bounded, mode="stream")
    if code != 0:
        outcome.problems.append(f"the bounded stream exited {code}: {err[-300:]}")
        return outcome, None
    if moment is not None:
        outcome.first_exit, out1, err1 = kappa_replay(home, fixed, moment, outcome.notes)
        if outcome.first_exit not in (-signal.SIGKILL, 137) and not outcome.notes:
            outcome.problems.append(f"the replay was not killed: {(out1 + err1)[-300:]}")
    outcome.second_exit, out2, err2 = kappa_replay(home, fixed)
    if outcome.second_exit != 0 or TRACEBACK.search(out2 + err2):
        outcome.problems.append(f"the replay exited {outcome.second_exit}: {(out2 + err2)[-300:]}")
        return outcome, None
    try:
        summary = json.loads(out2.strip().splitlines()[-1])
    except (ValueError, IndexError):
        summary = {}
    if summary.get("failed_again") != 1:
        outcome.problems.append(f"the unreadable record did not fail again: {summary}")
    recovered = summary.get("recovered_after_crash", 0)
    outcome.notes.append(
        f"rerun: {summary.get('replayed')} replayed, {recovered} found produced by the "
        f"killed replay, {summary.get('already_replayed')} already replayed"
    )
    copies, unreadable = replayed_copies(bootstrap, topic)
    twice = sorted(c for c, n in copies.items() if n > 1)
    if twice:
        outcome.problems.append(f"{len(twice)} dead letters produced twice, e.g. {twice[:3]}")
    if unreadable != 1:
        outcome.problems.append(f"the unreadable record is {unreadable} times in the topic")
    outcome.notes.append(f"{len(copies)} dead letters in the topic again, each once: {not twice}")
    code, err = kappa_run(home, fixed, mode="stream")
    if code != 0:
        outcome.problems.append(f"the resumed stream exited {code}: {err[-300:]}")
    return outcome, out


def wait_closed(port: int, timeout: float = 30) -> None:
    """Wait until nothing accepts connections on loopback ``port`` any more."""
    from kappaplus.local.processes import port_open

    deadline = time.monotonic() + timeout
    while port_open(port):
        if time.monotonic() > deadline:
            raise RuntimeError(f"port {port} still open {timeout:.0f} s after the server stopped")
        time.sleep(0.1)


class Stack:
    """The servers the runs of ``home`` share: the embedded broker (in memory; on an
    S3-compatible store on loopback, ``moto_server``, when a broker restart is planned, so
    that its topics outlive it) and, when a metastore restart is planned, a metastore server
    (which every ``kappa run``, as every session of ``home``, then finds by itself)."""

    BUCKET = "kappa-chaos"

    def __init__(self, home: Path) -> None:
        self.home = home
        self.broker: Any = None
        self.store: ObjectStore | None = None
        self.store_env: dict[str, str] = {}
        self.metastore: Any = None
        self.restarts: list[str] = []

    def start_metastore(self) -> str:
        from kappaplus.local.metastore import MetastoreServer
        from kappaplus.local.processes import free_port

        self.metastore = MetastoreServer(self.home, port=free_port())
        return str(self.metastore.start())

    def restart_metastore(self, down: float = 0.0) -> None:
        """Stop the metastore server and start it again on the same port and database,
        ``down`` seconds later."""
        from kappaplus.local.metastore import MetastoreServer

        began = time.monotonic()
        status = self.metastore.status()
        if not self.metastore.stop():
            raise RuntimeError(f"no metastore server to restart: {status}")
        wait_closed(status.port)
        time.sleep(down)
        self.metastore = MetastoreServer(self.home, port=status.port)
        self.metastore.start()
        self.restarts.append(f"metastore down {time.monotonic() - began:.1f} s")

    def start_broker(self, durable: bool) -> str:
        from kappaplus.local.broker import MEMORY, EmbeddedBroker
        from kappaplus.local.processes import free_port

        storage = MEMORY
        if durable:
            self.store = ObjectStore(self.home, free_port(), bucket=self.BUCKET)
            self.store_env = client_env(self.store.start())
            storage = self.store.storage
        self.broker = EmbeddedBroker(
            self.home, port=free_port(), storage=storage, env=self.store_env
        )
        return str(self.broker.start())

    def restart_broker(self) -> None:
        """Stop the broker and start it again on the same port and storage."""
        from kappaplus.local.broker import EmbeddedBroker

        began = time.monotonic()
        old = self.broker
        if not old.stop():
            raise RuntimeError("no broker to restart")
        wait_closed(old.port)
        self.broker = EmbeddedBroker(
            self.home, port=old.port, storage=old.storage, env=self.store_env
        )
        self.broker.start()
        self.restarts.append(f"broker down {time.monotonic() - began:.1f} s")

    def stop(self) -> None:
        for server in (self.broker, self.metastore):
            if server is not None:
                try:
                    server.stop()
                except Exception as exc:  # noqa: BLE001 - clean up the rest anyway
                    print(f"stopping {server.name}: {exc}")
        if self.store is not None:
            self.store.stop()


def error_messages(output: str) -> list[str]:
    """The ``error:`` messages of ``kappa run``'s output, each joined back into one line
    (the console wraps a long one at its width when it is not a terminal)."""
    messages: list[str] = []
    lines = output.splitlines()
    for index, line in enumerate(lines):
        if not line.startswith("error:"):
            continue
        parts = [line.strip()]
        for following in lines[index + 1 :]:
            if not following.strip() or following[:1].isdigit() or following.startswith("error:"):
                break
            parts.append(following.strip())
        messages.append(" ".join(parts))
    return messages


def restart_scenario(
    home: Path,
    name: str,
    out: str,
    commits: int,
    end: str,
    config: Path,
    moment: str,
    stack: Stack | None,
) -> tuple[Outcome, str | None]:
    """Restart a server the run uses at ``moment``: the run survives, or fails with one
    line naming the server; either way a rerun of the same command finishes.
    ``metastore-outage`` keeps the metastore away longer than the client retries: the run
    must fail, with that line."""
    assert stack is not None
    server = RESTARTS[name]
    restart: Callable[[], None] = stack.restart_broker
    if name == "metastore-restart":
        restart = stack.restart_metastore
    elif name == "metastore-outage":
        restart = functools.partial(stack.restart_metastore, OUTAGE)
    mode = mode_of(name)
    notes: list[str] = []
    first, err1 = kappa_run(
        home, config, interrupt=(restart, commits), end=end, mode=mode, notes=notes
    )
    outcome = Outcome(name, moment, first, None)
    outcome.notes = [*stack.restarts[-1:], *notes]
    if notes:
        outcome.problems.append("; ".join(notes) + ": nothing was interrupted")
    if TRACEBACK.search(err1):
        outcome.problems.append("a traceback on the terminal: " + err1[-300:])
    if name == "metastore-outage" and first == 0:
        outcome.problems.append(f"the run went on through a {OUTAGE:.0f} s metastore outage")
    if first != 0:
        errors = error_messages(err1)
        outcome.failed = errors[-1] if errors else err1.strip()[-200:]
        address = (
            stack.metastore.uri() if server == "metastore" else stack.broker.status().bootstrap
        )
        if len(errors) != 1:
            outcome.problems.append(f"the failure is not one error message: {err1[-300:]}")
        elif str(address) not in errors[0]:
            outcome.problems.append(f"the error does not name the {server} at {address}")
    if jvms_of(home):
        outcome.problems.append(f"a JVM outlived kappa run: {jvms_of(home)}")
    second, err2 = kappa_run(home, config, end=end, mode=mode)
    outcome.second_exit = second
    if TRACEBACK.search(err2):
        outcome.problems.append("a traceback on the rerun: " + err2[-300:])
    if second != 0:
        outcome.problems.append(f"the rerun exited {second}: {err2[-300:]}")
    return outcome, out


def stream_topic(
    bootstrap: str,
    riders: int,
    seed: int,
    hours: int,
    *,
    topic: str = STREAM_TOPIC,
    extra: list[bytes] | None = None,
) -> None:
    """Produce the events of :func:`prepare` to a one-partition topic of the broker at
    ``bootstrap`` in arrival order, then flush events a day later that move a stream's
    watermark past every session (and the ``extra`` raw records)."""
    from datetime import timedelta

    from kappaplus.examples.generate import arrival_order, produce, rider_events
    from kappaplus.local.broker import create_topic

    create_topic(bootstrap, topic, partitions=1)
    events = rider_events(riders=riders, start=START, hours=hours, seed=seed, late_fraction=0.2)
    at = max(e["event_time"] for e in events) + timedelta(days=1)
    flush = [
        {
            "event_id": f"flush-{i}",
            "rider_id": "zz-flush",
            "event_type": "app_open",
            "area": "downtown",
            "event_time": at,
            "arrival_time": at,
        }
        for i in range(2 * STREAM_BATCH)
    ]
    produce(bootstrap, topic, arrival_order(events) + flush, extra=extra or ())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--riders", type=int, default=30)
    parser.add_argument("--hours", type=int, default=12, help="event-time hours (1 per batch)")
    parser.add_argument("--only", nargs="*", choices=SCENARIOS, default=None)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    home = Path(tempfile.mkdtemp(prefix="kappa-chaos-"))
    stack = Stack(home)
    try:
        table = "chaos_events"
        started = time.monotonic()
        end = end_of(args.hours)
        planned = []
        names = args.only or list(SCENARIOS)
        for index in range(args.scenarios):
            name = names[index % len(names)] if index < len(names) else rng.choice(names)
            planned.append(
                (name, f"chaos_out_{index}", rng.choice([0, 1, 2, 3][: max(1, args.hours - 1)]))
            )
        modes = {mode_of(name) for name, _, _ in planned}
        if "promote" in modes:  # compared with an uninterrupted backfill and stream
            modes |= {"backfill", "stream"}
        streams = bool(modes & {"stream", "bootstrap", "replay"})
        events = (args.riders, args.seed, args.hours)
        backfills = "backfill" in modes
        cutoff = cutoff_of(args.hours)
        restarts = {RESTARTS[name] for name, _, _ in planned if name in RESTARTS}
        if "metastore" in restarts:
            print(f"metastore server at {stack.start_metastore()}", flush=True)
        prepare(home, table, args.riders, args.seed, args.hours)
        bootstrap = ""
        if streams:
            bootstrap = stack.start_broker(durable="broker" in restarts)
            print(f"broker at {bootstrap} ({stack.broker.storage})", flush=True)
            stream_topic(bootstrap, args.riders, args.seed, args.hours)
        baselines = {}
        if backfills:
            baselines["backfill"] = "chaos_base"
            code, err = kappa_run(home, write_config(home, table, "chaos_base"), end=end)
            if code != 0:
                print(f"the uninterrupted backfill failed ({code}): {err[-2000:]}")
                return 1
        for mode in ("stream", "bootstrap"):
            if mode not in modes:
                continue
            baselines[mode] = f"chaos_{mode}_base"
            config = write_config(home, table, baselines[mode], bootstrap)
            code, err = kappa_run(home, config, mode=mode, cutoff=cutoff)
            if code != 0:
                print(f"the uninterrupted {mode} run failed ({code}): {err[-2000:]}")
                return 1
        if "replay" in modes:
            baselines["replay"] = "chaos_replay_base"
            base, _ = replay_steps(
                home, table, baselines["replay"], bootstrap, cutoff, events, None
            )
            if base.problems:
                print(f"the uninterrupted replay steps failed: {base.line()}")
                return 1
        outcomes: list[tuple[Outcome, str | None]] = []
        for name, out, commits in planned:
            outcomes.append(
                scenario(home, table, name, out, commits, end, bootstrap, cutoff, stack, events)
            )
            done = outcomes[-1][0]
            print(f"{name} {done.moment}: exits {done.first_exit}/{done.second_exit}", flush=True)

        def output_table(out: str, mode: str) -> str:
            # a backfill writes <table>_backfill; stream and bootstrap the table itself; a
            # promotion puts the backfill's rows under the table's name
            return f"{out}_backfill" if mode == "backfill" else out

        wanted = {output_table(b, m): b for m, b in baselines.items()}
        for outcome, out in outcomes:
            if out is not None:
                wanted[output_table(out, mode_of(outcome.name))] = out
                if mode_of(outcome.name) == "promote":
                    wanted[f"{out}_previous"] = f"{out}_previous"
                    wanted[f"{out}_backfill"] = f"{out}_backfill"
        rows = {wanted[t]: r for t, r in read_outputs(home, list(wanted)).items()}
        for mode, base in baselines.items():
            if not rows[base]:
                print(f"the uninterrupted {mode} run wrote no rows: nothing to compare")
                return 1
            print(f"\nuninterrupted {mode} run: {len(rows[base])} rows")
        failed = 0
        totals = {"rows": 0, "lost": 0, "duplicated": 0, "refused": 0}
        for outcome, out in outcomes:
            mode = mode_of(outcome.name)
            baseline = rows[baselines["backfill" if mode == "promote" else mode]]
            if mode == "promote" and out is not None:
                # the old production table is kept whole; no backfill table is left behind
                previous = rows[f"{out}_previous"]
                kept = check(Outcome("", "", None, None), previous, rows[baselines["stream"]])
                outcome.problems += [f"{out}_previous: {p}" for p in kept.problems]
                if rows[f"{out}_backfill"]:
                    outcome.problems.append(f"{out}_backfill still holds rows after the promotion")
            if outcome.refused is None and out is not None:
                check(outcome, rows[out], baseline)
            elif out is not None and outcome.refused is not None:
                # refused: the table keeps what the interrupted run committed, once
                kept = [tuple(r) for r in rows[out]]
                outcome.rows = len(kept)
                outcome.duplicated = len(kept) - len(set(kept))
                if outcome.duplicated:
                    outcome.problems.append(f"{outcome.duplicated} duplicated")
            print(outcome.line())
            failed += not outcome.ok
            totals["rows"] += outcome.rows
            totals["lost"] += outcome.lost
            totals["duplicated"] += outcome.duplicated
            totals["refused"] += outcome.refused is not None
        print(
            f"\n{len(outcomes)} scenarios in {time.monotonic() - started:.0f} s: "
            f"{len(outcomes) - failed} ok, {failed} failed; {totals['rows']} rows checked, "
            f"{totals['lost']} lost, {totals['duplicated']} duplicated, "
            f"{totals['refused']} refused with a named error"
        )
        return 1 if failed else 0
    finally:
        stack.stop()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
