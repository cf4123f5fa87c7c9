"""`kappa` waits for its JVM's process group to exit, and a zombie is not a wait.

When the JVM exits, a child it had not reaped passes to the machine's init; where init
reaps slowly (this project's CI microVM) the group stayed "alive" for 1.2-1.7 s after the
JVM had gone, and every `kappa` command waited that long for nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kappaplus.core.jvm import _group_alive, _wait_group

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")


def _state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


def _wait_for_state(pid: int, state: str) -> None:
    deadline = time.monotonic() + 10
    while _state(pid) != state:
        assert time.monotonic() < deadline, f"process {pid} never reached state {state}"
        time.sleep(0.01)


def test_a_group_is_alive_while_a_member_runs_and_gone_once_only_zombies_are_left() -> None:
    leader = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    try:
        assert _group_alive(leader.pid)
        os.kill(leader.pid, signal.SIGKILL)
        _wait_for_state(leader.pid, "Z")  # not reaped: its parent (this test) has not waited
        assert not _group_alive(leader.pid)
        started = time.monotonic()
        _wait_group(leader.pid, timeout=30)
        assert time.monotonic() - started < 1.0
    finally:
        leader.kill()
        leader.wait()
    assert not _group_alive(leader.pid)


def test_waiting_for_a_group_kills_a_member_that_outlives_the_timeout() -> None:
    leader = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    try:
        _wait_group(leader.pid, timeout=0.3)
        _wait_for_state(leader.pid, "Z")  # killed by the wait, left for its parent to reap
        assert not _group_alive(leader.pid)
    finally:
        leader.kill()
        leader.wait()
