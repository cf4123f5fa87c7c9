"""The random SIGKILL loop of ``kappa archive`` (issue 22), shared by the Iceberg and Delta
archive tests: the same topic is archived by a child process killed (SIGKILL, no clean-up)
``kills`` times at random moments after it committed a batch of its own, then by one last
run that drains the topic; the test then checks every Kafka offset in the table once.

The table format only enters through the archiver's table options and the function that
reads the archived offsets back (pyiceberg, delta-rs), so the loop itself is one code.
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
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


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
    for _ in range(kills):
        process = start("1 second", 40)
        # kill while it works: once it committed a batch of its own (Spark's start-up takes
        # 10-40 s on a loaded machine), at a random moment of the next batches
        before, waited = len(archived_offsets()), time.monotonic()
        while len(archived_offsets()) == before and time.monotonic() - waited < 120:
            time.sleep(0.5)
        time.sleep(rng.uniform(0, 4))
        process.send_signal(signal.SIGKILL)
        process.wait(30)
        seen_progress.append(len(archived_offsets()))
    final = start("available-now", 40 if kills else 600)
    output, _ = final.communicate(timeout=900)
    assert final.returncode == 0, output[-3000:]
    offsets = archived_offsets()
    assert len(offsets) == len(set(offsets)), "no record twice"
    assert offsets == list(range(records)), "every record once"
    if kills:
        assert any(0 < n < records for n in seen_progress), seen_progress  # killed mid-way
    print(f"{kills} kills, {records} records, archived after each kill: {seen_progress}")
    return seen_progress
