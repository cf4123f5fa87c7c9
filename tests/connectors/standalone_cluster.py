"""A Spark standalone cluster for the connector tests: a master and one worker on loopback.

``spark-class`` starts each daemon in a process group of its own (the worker's executors join
the worker's); :meth:`Daemon.stop` kills the group. The cluster itself is the session-scoped
``standalone_cluster`` fixture (``conftest.py`` of this folder): started once, when the first
test asks for it, shared by the tests that only submit applications to it
(``test_hive_standalone.py``, ``test_session_cluster.py``), stopped at the end of the session.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

# the cluster tests' daemons (process groups, readiness, stop), shared with bench/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
from spark_cluster import Daemon, free_port, spark_home  # noqa: E402
from spark_cluster import start_daemon as start_command  # noqa: E402

__all__ = ["JOB_TIMEOUT", "Cluster", "Daemon", "daemon_env", "free_port", "start_daemon"]

JOB_TIMEOUT = 720


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


def start_daemon(name: str, args: list[str], home: Path, ready: str) -> Daemon:
    """Run ``spark-class`` with ``args`` in its own process group; wait for ``ready`` in its log."""
    command = [str(spark_home() / "bin" / "spark-class"), *args]
    return start_command(name, command, home, ready, daemon_env(home))


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
