"""The life cycle the local servers share: a detached process with a pid file and a log.

:class:`DetachedService` is the part of the broker, the metastore server and the object
store (:mod:`kappaplus.local.s3`) that is the same for all: files under ``home/<name>/``
(``<name>.pid`` as JSON with at least ``pid``, and ``<name>.log``), finding the running
process again from another shell (a live pid that still runs the service, so a recycled
pid is not mistaken for it), starting it in a session of its own so it outlives the process
that started it, cleaning up when it does not come up, and stopping it. Subclasses say how
to start and when the server is ready.

>>> class Echo(DetachedService):                       # doctest: +SKIP
...     name, marker, error = "echo", b"echo-server", BrokerError
>>> Echo(state_dir() / "echo").stop()                  # doctest: +SKIP
False
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar

from kappaplus.core.errors import KappaError
from kappaplus.local.processes import (
    free_port,
    listens_on,
    log_tail,
    pid_alive,
    port_open,
    terminate,
)

log = logging.getLogger(__name__)

# fork/exec failures seen to pass on a retry: EAGAIN and ENOMEM under load, and one EFAULT
# from execve of a valid java binary on a busy 2-core VM that never came back on a rerun
TRANSIENT_SPAWN_ERRORS = frozenset({errno.EAGAIN, errno.ENOMEM, errno.EFAULT, errno.EINTR})
SPAWN_ATTEMPTS = 3
#: Loopback: the local servers listen here only.
HOST = "127.0.0.1"
#: Ports tried when another process binds the chosen one while the server starts.
PORT_ATTEMPTS = 3


class PortTaken(Exception):
    """Another process bound the server's port while the server started (try another)."""


def runs_command(pid: int, marker: bytes) -> bool:
    """Whether process ``pid``'s command line contains ``marker`` (alive, if unreadable)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return marker in handle.read()
    except OSError:
        return pid_alive(pid)


class DetachedService(ABC):
    """A local server run as a detached process, found again through its pid file.

    Class attributes of a subclass: ``name`` (file names and log lines), ``marker`` (bytes
    its command line contains), ``error`` (the :class:`KappaError` raised), ``stop_timeout``
    (seconds SIGTERM, then SIGKILL, are each given).
    """

    name: ClassVar[str]
    marker: ClassVar[bytes]
    error: ClassVar[type[KappaError]]
    stop_timeout: ClassVar[float] = 5.0

    def __init__(self, directory: Path, start_timeout: float) -> None:
        self.dir = directory
        self.start_timeout = start_timeout
        self._started_here = False

    @property
    def pid_file(self) -> Path:
        return self.dir / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.dir / f"{self.name}.log"

    def _running_state(self) -> dict[str, Any] | None:
        """The pid file's content if that process still runs the service, else None (and a
        stale pid file is removed)."""
        try:
            state = json.loads(self.pid_file.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(state, dict) or not isinstance(state.get("pid"), int):
            return None
        if pid_alive(state["pid"]) and runs_command(state["pid"], self.marker):
            return state
        with contextlib.suppress(OSError):
            self.pid_file.unlink()
        return None

    def _launch(
        self,
        command: list[str],
        state: Mapping[str, Any],
        wait_ready: Callable[[subprocess.Popen[bytes]], None],
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``command`` detached, record ``state`` (plus pid and start time) in the pid
        file and wait with ``wait_ready(process)``; if that raises, the process is killed
        and the pid file removed before the error goes on."""
        self.dir.mkdir(parents=True, exist_ok=True)
        process = self._spawn(command, cwd, env)
        self.pid_file.write_text(json.dumps({"pid": process.pid, **state, "started": time.time()}))
        try:
            wait_ready(process)
        except BaseException:
            self._kill(process.pid)
            with contextlib.suppress(OSError):
                self.pid_file.unlink()
            raise
        self._started_here = True
        log.info("%s started: pid %s (log %s)", self.name, process.pid, self.log_file)
        return process

    @contextlib.contextmanager
    def _start_lock(self):  # type: ignore[no-untyped-def]
        """Held while starting: two processes starting the same service start one."""
        with open(self.dir / "start.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _on_a_port(self, fixed: int | None, default: int, start_on: Callable[[int], str]) -> str:
        """``start_on(port)``: on ``fixed``, else on ``default`` if free, else a free port;
        when another process takes the port meanwhile (:class:`PortTaken`, two servers
        starting at once), again on another free port."""
        for attempt in range(PORT_ATTEMPTS):
            port = fixed
            if port is None:
                port = default if attempt == 0 and not port_open(default) else free_port()
            try:
                return start_on(port)
            except PortTaken as exc:
                if fixed is not None or attempt == PORT_ATTEMPTS - 1:
                    raise self.error(str(exc)) from None
                log.info("port %s was taken while the %s started; retrying", port, self.name)
        raise AssertionError("unreachable")  # pragma: no cover

    def _wait_listening(
        self, port: int, process: subprocess.Popen[bytes] | None, program: str
    ) -> None:
        """Until ``process`` (``program``; None: a server already running) listens on
        ``port``, within ``start_timeout``; :class:`PortTaken` when it exited and another
        process listens there, ``error`` when it exited or never listened."""
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                if port_open(port):  # ours is gone, so someone else listens there
                    raise PortTaken(
                        f"port {port} on {HOST} was taken by another process while the "
                        f"{self.name} started; see {self.log_file}"
                    )
                raise self.error(
                    f"{program} exited with code {process.returncode} at start; "
                    f"see {self.log_file}:\n{self._log_tail()}"
                )
            # the port may answer for another process (ours then fails to bind and exits)
            if port_open(port) and (process is None or listens_on(process.pid, port) is not False):
                return
            time.sleep(0.1)
        raise self.error(
            f"{program} did not listen on {HOST}:{port} within {self.start_timeout:.0f}s; "
            f"see {self.log_file}:\n{self._log_tail()}"
        )

    def _spawn(
        self, command: list[str], cwd: Path | None, env: Mapping[str, str] | None
    ) -> subprocess.Popen[bytes]:
        """Start ``command`` in a session of its own, output appended to the log; retried
        on a transient fork/exec error, any other error names the command."""
        for attempt in range(1, SPAWN_ATTEMPTS + 1):
            try:
                with open(self.log_file, "ab") as log_handle:
                    return subprocess.Popen(  # noqa: S603 - fixed command, no shell
                        command,
                        cwd=cwd,
                        stdin=subprocess.DEVNULL,
                        stdout=log_handle,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,  # outlives the shell or test that started it
                        env=None if env is None else dict(env),
                    )
            except OSError as error:
                if error.errno not in TRANSIENT_SPAWN_ERRORS or attempt == SPAWN_ATTEMPTS:
                    raise self.error(
                        f"could not start the {self.name} ({command[0]}): {error}"
                    ) from error
                log.warning(
                    "starting the %s failed (%s), attempt %d of %d: retrying",
                    self.name,
                    error,
                    attempt,
                    SPAWN_ATTEMPTS,
                )
                time.sleep(0.5 * attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def _log_tail(self, lines: int = 20) -> str:
        return log_tail(self.log_file, lines)

    def _kill(self, pid: int) -> None:
        if not terminate(pid, self.stop_timeout):
            raise self.error(f"{self.name} pid {pid} did not stop")

    def stop(self) -> bool:
        """Stop the running server; True if one was stopped, False if none was running."""
        state = self._running_state()
        if state is None:
            return False
        pid = int(state["pid"])
        self._kill(pid)
        port = state.get("port")
        if isinstance(port, int):
            self._wait_closed(port)
        with contextlib.suppress(OSError):
            self.pid_file.unlink()
        self._started_here = False
        log.info("%s pid %s stopped", self.name, pid)
        return True

    def _wait_closed(self, port: int) -> None:
        """Wait (at most ``stop_timeout``) until the stopped server's port no longer accepts
        connections, so that a restart on the same port finds it free."""
        deadline = time.monotonic() + self.stop_timeout
        while port_open(port) and time.monotonic() < deadline:
            time.sleep(0.05)

    @abstractmethod
    def start(self) -> str:
        """Start the server (or reuse the running one) and return its address."""

    # -- context manager: stops the server only if this object started it ----------------
    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._started_here:
            self.stop()
