"""One writer per checkpoint and target: a live holder refuses a second run, a dead one's
lock (SIGKILL leaves it behind) is taken over."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kappaplus.runtime.state.locks import LockError, _start_time, acquire, check_free, hold, release


def _write_lock(path: Path, pid: int, start: str | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"pid": pid, "start": start, "host": socket.gethostname(), "run": "other"})
    )


def test_a_live_holder_refuses_a_second_run_naming_it(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock = tmp_path / "hive-out.lock"
        _write_lock(lock, holder.pid, _start_time(holder.pid))
        with pytest.raises(LockError) as caught:
            acquire(lock, "mine", "the output hive out")
        message = str(caught.value)
        assert "the output hive out" in message and str(holder.pid) in message
        assert str(lock) in message and "run other" in message
        with pytest.raises(LockError):
            check_free(lock, "the output hive out")  # the check before Spark starts
    finally:
        holder.kill()
        holder.wait()
    # the holder is gone (as after SIGKILL): its lock is stale and taken over
    acquire(lock, "mine", "the output hive out")
    assert json.loads(lock.read_text())["run"] == "mine"
    release(lock)
    assert not lock.exists()


def test_a_reused_pid_does_not_keep_a_lock(tmp_path: Path) -> None:
    import os

    lock = tmp_path / "ckpt.lock"
    _write_lock(lock, os.getppid(), "1")  # a live pid, but not the process that locked
    acquire(lock, "mine", "the checkpoint")
    assert json.loads(lock.read_text())["run"] == "mine"


def test_locks_are_released_on_the_way_out_even_on_error(tmp_path: Path) -> None:
    paths = [tmp_path / "a.lock", tmp_path / "b.lock"]
    with pytest.raises(RuntimeError), hold(paths, "r1"):
        assert all(p.is_file() for p in paths)
        raise RuntimeError("boom")
    assert not any(p.exists() for p in paths)
