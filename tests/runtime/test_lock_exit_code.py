"""A second concurrent run is refused as a user error: exit 2 (issue 24 item 7c)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from rich.console import Console

from kappaplus.cli.errors import error_exit
from kappaplus.runtime.state import locks


def test_a_run_refused_by_a_held_lock_exits_2(tmp_path: Path) -> None:
    lock = tmp_path / "job.lock"
    # Held by another live process (this test's parent), as by a first concurrent run.
    parent = os.getppid()
    started = locks._start_time(parent)
    held = {**locks._holder(), "pid": parent, "start": started, "run": "first-run"}
    lock.write_text(json.dumps(held))
    try:
        with pytest.raises(locks.LockError) as refused:
            locks.acquire(lock, "second-run", "the checkpoint")
        assert "first-run" in str(refused.value) and str(lock) in str(refused.value)
        assert error_exit(Console(file=io.StringIO()), refused.value).exit_code == 2
    finally:
        if lock.exists():
            lock.unlink()
