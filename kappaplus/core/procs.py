"""Process facts production code needs (is a run's process alive?), apart from the local
development stack that also uses them (:mod:`kappaplus.local.processes`)."""

from __future__ import annotations

import os


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
            if handle.read().split()[2] != "Z":
                return True
    except OSError:
        return True
    # a zombie main thread whose other threads still run (a JVM or a tokio runtime shutting
    # down) is a live process: it may still hold its listening sockets
    try:
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False
