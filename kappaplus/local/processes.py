"""Small helpers for the detached local services (broker, metastore, s3 store): ports,
pids, logs."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from pathlib import Path

from kappaplus.core.procs import pid_alive

HOST = "127.0.0.1"


def parent_pid(pid: int) -> int | None:
    """The parent of ``pid`` from /proc, or None when it is gone.

    >>> parent_pid(os.getpid()) == os.getppid()
    True
    """
    try:
        with open(f"/proc/{pid}/stat") as handle:
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def process_tree(root: int) -> list[int]:
    """``root`` and every process below it, from /proc (root first).

    >>> process_tree(os.getpid())[0] == os.getpid()
    True
    """
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        parent = parent_pid(int(entry))
        if parent is not None:
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


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


def listens_on(pid: int, port: int) -> bool | None:
    """Whether process ``pid`` itself holds a listening TCP socket on ``port``.

    A port that accepts connections may belong to another process (two servers started
    at once, one lost the bind); this tells them apart from ``/proc/net/tcp{,6}`` (the
    socket inodes listening on ``port``) and ``/proc/PID/fd`` (the sockets ``pid`` has).
    None when it cannot be told (no ``/proc``, or ``pid``'s descriptors are unreadable).
    """
    inodes: set[str] = set()
    readable = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                lines = handle.read().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()
            # sl local_address rem_address st ... inode; st 0A = LISTEN
            if (
                len(fields) > 9
                and fields[3] == "0A"
                and int(fields[1].rsplit(":", 1)[1], 16) == port
            ):
                inodes.add(fields[9])
    if not readable:
        return None
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    for fd in descriptors:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return True
    return False
