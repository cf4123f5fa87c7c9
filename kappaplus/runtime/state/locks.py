"""One writer per checkpoint and per output target: lock files a crashed run cannot leave
stuck.

A run takes ``<run checkpoint dir>/_kappa.lock`` and one lock per output target under
``state_dir()/locks`` (``hive-<table>.lock``, ``kafka-<topic>.lock``). A lock file says who
holds it: pid, the process's start time, host and run id. It is created atomically
(``O_EXCL``); a second run finding it held by a live process refuses with
:class:`LockError` naming the holder and the file. A lock whose process is gone (same host,
no such pid, or a pid since reused by another process) is stale and taken over, so a run
killed with SIGKILL never blocks the next one. A lock held by another host cannot be
checked from here; the error says to remove the file if that run is known to be over.

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "x.lock"
>>> with hold([path], "run-1"):
...     path.is_file()
True
>>> path.exists()
False
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from kappaplus.core.errors import StateError


class LockError(StateError):
    """Another live run holds the checkpoint or an output target."""


def _start_time(pid: int) -> str | None:
    """The kernel's start time of process ``pid`` (None if there is no such process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return "?"
        return "?"
    return stat.rsplit(")", 1)[-1].split()[19]


def _holder() -> dict[str, object]:
    pid = os.getpid()
    return {"pid": pid, "start": _start_time(pid), "host": socket.gethostname()}


def _alive(holder: dict[str, object]) -> bool:
    """Whether the holder of a lock still runs (True when it cannot be told: other host)."""
    if holder.get("host") != socket.gethostname():
        return True
    pid = holder.get("pid")
    if not isinstance(pid, int):
        return False
    started = _start_time(pid)
    if started is None:
        return False
    return started == "?" or holder.get("start") in (None, "?", started)


def _in_use(path: Path, holder: dict[str, object], what: str) -> LockError:
    return LockError(
        f"{what} is in use by run {holder.get('run')} (pid {holder.get('pid')} on "
        f"{holder.get('host')}, lock {path}): wait for it to end or stop it; if "
        "that run is known to be over, remove the lock file"
    )


def acquire(path: Path, run_id: str, what: str) -> None:
    """Take the lock file ``path`` for run ``run_id`` (``what`` names the resource)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    me = {**_holder(), "run": run_id, "since": time.time()}
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                holder = json.loads(path.read_text())
            except (OSError, ValueError):
                holder = {}
            if holder.get("pid") == me["pid"] and holder.get("host") == me["host"]:
                return  # this process holds it already
            if holder and _alive(holder):
                raise _in_use(path, holder, what) from None
            path.unlink(missing_ok=True)  # stale: its process is gone
            continue
        with os.fdopen(fd, "w") as out:
            json.dump(me, out)
        return
    raise LockError(f"cannot take the lock {path} for {what}: it keeps changing hands")


def check_free(path: Path, what: str) -> None:
    """:class:`LockError` if a live process other than this one holds ``path`` (a check
    before Spark starts; the run takes the lock itself later)."""
    try:
        holder = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    mine = holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname()
    if not mine and _alive(holder):
        raise _in_use(path, holder, what)


def release(path: Path) -> None:
    """Remove ``path`` if this process holds it."""
    try:
        holder = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname():
        path.unlink(missing_ok=True)


@contextmanager
def hold(paths: Sequence[Path], run_id: str, names: Sequence[str] = ()) -> Iterator[None]:
    """Hold every lock of ``paths`` (in order; all released on the way out)."""
    taken: list[Path] = []
    try:
        for index, path in enumerate(paths):
            what = names[index] if index < len(names) else str(path)
            acquire(path, run_id, what)
            taken.append(path)
        yield
    finally:
        for path in reversed(taken):
            release(path)
