"""A Spark standalone cluster for the connector tests: a master and one worker on loopback.

``spark-class`` starts each daemon in a process group of its own (the worker's executors join
the worker's); :meth:`Daemon.stop` kills the group. The cluster itself is the session-scoped
``standalone_cluster`` fixture (``conftest.py`` of this folder): started once, when the first
test asks for it, shared by the tests that only submit applications to it
(``test_hive_standalone.py``, ``test_session_cluster.py``), stopped at the end of the session.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

START_TIMEOUT = 180  # seconds for a JVM daemon to come up on a loaded machine
JOB_TIMEOUT = 720


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def daemon_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(home / "logs"),
            "SPARK_DAEMON_MEMORY": "256m",
            # The REST submission server would take the fixed port 6066.
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            # The tests' driver JVM flags (quick JIT tier, class archive: tests/conftest.py)
            # for the drivers the jobs start; on a cluster create_session leaves the
            # driver's options to the caller, and the daemons ignore this variable.
            "SPARK_SUBMIT_OPTS": os.environ.get("KAPPA_DRIVER_JAVA_OPTIONS", ""),
        }
    )
    # The executors' interpreter must come from the job's session settings, not from the
    # environment the daemons (or the job process) inherit from this one.
    for name in ("SPARK_CONF_DIR", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        env.pop(name, None)
    return env


@dataclass
class Daemon:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def stop(self) -> None:
        """Kill the daemon's process group (the worker's executors are in it too)."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(20)
        # Executors forked by the worker may outlive it briefly.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(10)


def start_daemon(name: str, args: list[str], home: Path, ready: str) -> Daemon:
    """Run ``spark-class`` with ``args`` in its own process group; wait for ``ready`` in its log."""
    log = home / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=daemon_env(home),
            cwd=home,
            start_new_session=True,
        )
    daemon = Daemon(name, process, log)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if ready in log.read_text(errors="replace"):
            return daemon
        if process.poll() is not None:
            break
        time.sleep(0.5)
    daemon.stop()
    raise RuntimeError(f"spark {name} did not start (exit {process.poll()}):\n{daemon.tail()}")


@dataclass
class Cluster:
    url: str
    home: Path
    master: Daemon
    worker: Daemon

    def diagnostics(self) -> str:
        parts = [f"--- master log\n{self.master.tail()}", f"--- worker log\n{self.worker.tail()}"]
        for stderr in sorted((self.home / "work").glob("app-*/*/stderr"))[-2:]:
            lines = stderr.read_text(errors="replace").splitlines()
            parts.append(f"--- executor {stderr}\n" + "\n".join(lines[-40:]))
        return "\n".join(parts)
