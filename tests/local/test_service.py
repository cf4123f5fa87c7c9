"""DetachedService: starting a detached process, retrying a transient fork/exec error."""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from kappaplus.core.errors import BrokerError
from kappaplus.local import service
from kappaplus.local.service import DetachedService

MARKER = "kappa-sleeper-test"


class Sleeper(DetachedService):
    name: ClassVar[str] = "sleeper"
    marker: ClassVar[bytes] = MARKER.encode()
    error = BrokerError

    def start(self, command: list[str] | None = None) -> str:
        command = command or [sys.executable, "-c", "import time; time.sleep(60)", MARKER]
        self._launch(command, {"what": "sleeper"}, lambda process: None)
        return "sleeping"


def test_launch_records_pid_and_stop_kills_it(tmp_path: Path) -> None:
    sleeper = Sleeper(tmp_path / "sleeper", start_timeout=5)
    sleeper.start()
    state = sleeper._running_state()
    assert state is not None and state["what"] == "sleeper"
    assert sleeper.stop() is True
    assert sleeper._running_state() is None
    assert not sleeper.pid_file.exists()


def test_missing_program_is_an_error_naming_it(tmp_path: Path) -> None:
    sleeper = Sleeper(tmp_path / "sleeper", start_timeout=5)
    with pytest.raises(BrokerError, match=r"could not start the sleeper \(/no/such/java\)"):
        sleeper.start(["/no/such/java", MARKER])
    assert not sleeper.pid_file.exists()


def test_transient_spawn_error_is_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One EFAULT from execve (seen once on a busy VM) must not fail the demo."""
    real_popen = subprocess.Popen
    calls: list[int] = []

    def flaky_popen(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        calls.append(1)
        if len(calls) == 1:
            raise OSError(errno.EFAULT, "Bad address", args[0][0])
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(service.subprocess, "Popen", flaky_popen)
    monkeypatch.setattr(service.time, "sleep", lambda seconds: None)
    sleeper = Sleeper(tmp_path / "sleeper", start_timeout=5)
    sleeper.start()
    try:
        assert len(calls) == 2
        assert sleeper._running_state() is not None
    finally:
        assert sleeper.stop() is True


def test_transient_error_that_persists_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def failing_popen(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        calls.append(1)
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(service.subprocess, "Popen", failing_popen)
    monkeypatch.setattr(service.time, "sleep", lambda seconds: None)
    sleeper = Sleeper(tmp_path / "sleeper", start_timeout=5)
    with pytest.raises(BrokerError, match="Resource temporarily unavailable"):
        sleeper.start()
    assert len(calls) == service.SPAWN_ATTEMPTS
