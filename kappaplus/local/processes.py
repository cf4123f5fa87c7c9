"""Small helpers for the detached local services (broker, metastore): ports, pids, logs."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from pathlib import Path

HOST = "127.0.0.1"


def free_port() -> int:
    """A TCP port on loopback that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def port_open(port: int, timeout: float = 0.2) -> bool:
    """Whether something accepts connections on ``127.0.0.1:port``."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"
    except OSError:
        return True


def terminate(pid: int, timeout: float = 5.0) -> bool:
    """SIGTERM, then SIGKILL, each given ``timeout`` seconds; True once ``pid`` is gone."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # Reap it if it is our child, so it does not linger as a zombie.
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
            if not pid_alive(pid):
                return True
            time.sleep(0.05)
    return False


def log_tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a log file ('' if it cannot be read)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
