"""The random SIGKILL loop of ``kappa archive`` (issue 22), shared by the Iceberg and Delta
archive tests: the same topic is archived by a child process killed (SIGKILL, no clean-up)
``kills`` times at random moments after it committed a batch of its own, then by one last
run that drains the topic; the test then checks every Kafka offset in the table once.

A kill is SIGKILL of the archiver's driver (the Python process). Its Spark JVM runs in a
session of its own and exits when its stdin from the driver closes (docs/runtime.md,
"Signals"); until it has, it holds the embedded Derby metastore and the next archiver
rightly refuses to start. So after each kill the loop waits until every process the
driver had started (the JVM, its Python workers) is gone, and fails if one outlives the
kill by a minute; a child that exits before it is killed fails the test with its output.
``KAPPA_ARCHIVE_KILLS`` sets the number of kills of the slow loop (default 20) for a
shorter run on a loaded machine.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from kappaplus.examples.generate import RIDER_EVENT_DDL

KILLS = int(os.environ.get("KAPPA_ARCHIVE_KILLS", "20"))


def archiver(
    topic: str,
    bootstrap: str,
    home: Path,
    table_options: Sequence[str],
    trigger: str,
    per_batch: int,
) -> subprocess.Popen[str]:
    """``kappa archive`` of ``topic`` in a child process with its own ``KAPPA_HOME``
    (``table_options``: ``--table``, ``--table-format`` and the format's own options)."""
    command = [sys.executable, "-m", "kappaplus", "archive", topic, *table_options]
    command += ["--event-time", "event_time", "--schema", RIDER_EVENT_DDL]
    command += ["--bootstrap", bootstrap, "--no-progress"]
    command += ["--checkpoint", str(home / "checkpoints"), "--trigger", trigger]
    command += ["--max-offsets-per-trigger", str(per_batch)]
    env = {**os.environ, "KAPPA_HOME": str(home)}
    return subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (its JVM and the JVM's Python workers), from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def crash(process: subprocess.Popen[str]) -> None:
    """SIGKILL the archiver's driver, then wait until the processes it had started exit
    by themselves (its JVM follows when its stdin closes); fail if one outlives it by 60 s."""
    below = _descendants(process.pid)
    process.send_signal(signal.SIGKILL)
    process.wait(30)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not any(_alive(pid) for pid in below):
            return
        time.sleep(0.2)
    left = sorted(pid for pid in below if _alive(pid))
    raise AssertionError(f"processes {left} of the SIGKILLed archiver still run after 60 s")


def iceberg_options(props: dict[str, str]) -> list[str]:
    """The archiver's options of the Iceberg table ``lake.archived`` in catalog ``props``."""
    return ["--table", "lake.archived", "--table-format", "iceberg"] + [
        "--iceberg-catalog",
        json.dumps(props),
    ]


def delta_options(location: Path) -> list[str]:
    """The archiver's options of a Delta table at ``location`` (dead letters in Hive)."""
    return ["--table", str(location), "--table-format", "delta"] + [
        "--dlq-table",
        "lake.archived_dead_letters",
    ]


def archive_through_kills(
    start: Callable[[str, int], subprocess.Popen[str]],
    archived_offsets: Callable[[], list[int]],
    kills: int,
    records: int,
) -> list[int]:
    """Start the archiver (``start(trigger, per_batch)``) and SIGKILL it ``kills`` times, then
    let one run drain the topic (available-now). Returns the count of archived records seen
    after each kill; asserts the last run succeeded and every offset ``0..records-1`` is in
    the table once (``archived_offsets``: the table's Kafka offsets, one partition)."""
    rng = random.Random(kills)
    seen_progress: list[int] = []
    for kill in range(kills):
        process = start("1 second", 40)
        # kill while it works: once it committed a batch of its own (Spark's start-up takes
        # 10-40 s on a loaded machine), at a random moment of the next batches
        before, waited = len(archived_offsets()), time.monotonic()
        # (no wait once the table holds the whole topic: a kill then finds no work left)
        while before < records and len(archived_offsets()) == before:
            if time.monotonic() - waited > 180:
                break
            assert process.poll() is None, f"the archiver exited by itself: {_tail(process)}"
            time.sleep(0.5)
        time.sleep(rng.uniform(0, 4))
        assert process.poll() is None, f"the archiver exited by itself: {_tail(process)}"
        crash(process)
        seen_progress.append(len(archived_offsets()))
        print(f"kill {kill + 1}/{kills}: {seen_progress[-1]} of {records} archived", flush=True)
    final = start("available-now", 40 if kills else 600)
    output, _ = final.communicate(timeout=900)
    assert final.returncode == 0, output[-3000:]
    # the section to paste into a job config, as written (rich once took it for a style tag)
    assert "backfills read it with: [inputs.<name>." in output, output[-3000:]
    offsets = archived_offsets()
    assert len(offsets) == len(set(offsets)), "no record twice"
    assert offsets == list(range(records)), "every record once"
    if kills:
        assert any(0 < n < records for n in seen_progress), seen_progress  # killed mid-way
    print(f"{kills} kills, {records} records, archived after each kill: {seen_progress}")
    return seen_progress


def _tail(process: subprocess.Popen[str]) -> str:
    output = process.stdout.read() if process.stdout else ""
    return output[-3000:]
