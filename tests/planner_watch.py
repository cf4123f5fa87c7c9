"""Watch which slice planner the JVM reader uses: a child planner process of this test
process (``python -m kappaplus.connectors.lake.plan_service``, found in ``/proc``) or the
in-process one (:mod:`kappaplus.connectors.lake.planner_server`, counted connections)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from types import TracebackType

from kappaplus.connectors.lake.planner_server import planner_server

PLANNER_MODULE = b"kappaplus.connectors.lake.plan_service"


def _parents() -> dict[int, int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return parents


def planner_children() -> list[int]:
    """Ids of planner processes descending from this process (the JVM's children); other
    processes on the machine (other test runs) are not counted."""
    parents = _parents()
    me, found = os.getpid(), []
    for pid in parents:
        ancestor = parents.get(pid)
        while ancestor is not None and ancestor not in (me, 0, 1):
            ancestor = parents.get(ancestor)
        if ancestor != me:
            continue
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if PLANNER_MODULE in command:
            found.append(pid)
    return found


class PlannerWatch:
    """While open, samples every 0.1 s the planner processes under this process; after it,
    ``children`` holds every one seen and ``served`` the in-process connections made."""

    def __init__(self) -> None:
        self.children: set[int] = set()
        self.served = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._before = 0

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.children.update(planner_children())
            self._stop.wait(0.1)

    def __enter__(self) -> PlannerWatch:
        self._before = planner_server().served
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        self.served = planner_server().served - self._before

    @staticmethod
    def wait_idle(timeout: float = 10.0) -> int:
        """In-process connections still open after up to ``timeout`` s (0: every query's
        planner connection was closed when its query stopped)."""
        deadline = time.monotonic() + timeout
        while planner_server().active and time.monotonic() < deadline:
            time.sleep(0.1)
        return planner_server().active

    @staticmethod
    def wait_children(timeout: float = 10.0) -> list[int]:
        """Planner processes under this process still running after up to ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while planner_children() and time.monotonic() < deadline:
            time.sleep(0.1)
        return planner_children()
