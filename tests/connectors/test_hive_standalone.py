"""The Hive streaming source on a Spark standalone cluster, not only in local mode.

The test starts a master and one worker on loopback with ``spark-class`` and runs
``standalone_job.py`` in a separate Python process (this process already holds the
local-mode session): it writes a partitioned table, streams it with ``read_hive_stream``
(1-hour tumbling count, ``Trigger.AvailableNow``) and compares the result with the same
aggregation as a batch query. The master and worker (and the executors the worker forked)
are killed when the module's tests finish, pass or fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
JOB = HERE / "standalone_job.py"
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


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A master and one worker (1 core, 1 GiB) on loopback, on free ports."""
    home = tmp_path_factory.mktemp("standalone")
    (home / "work").mkdir()
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    master = start_daemon(
        "master",
        [
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            "0",
        ],
        home,
        "I have been elected leader",
    )
    try:
        worker = start_daemon(
            "worker",
            [
                "org.apache.spark.deploy.worker.Worker",
                url,
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--webui-port",
                "0",
                "--work-dir",
                str(home / "work"),
            ],
            home,
            "Successfully registered with master",
        )
    except BaseException:
        master.stop()
        raise
    cluster = Cluster(url, home, master, worker)
    try:
        yield cluster
    finally:
        worker.stop()
        master.stop()


@pytest.mark.timeout(JOB_TIMEOUT + 180)
def test_hive_stream_on_standalone_cluster(standalone_cluster: Cluster, tmp_path: Path) -> None:
    job_home = tmp_path / "job"
    env = daemon_env(standalone_cluster.home)
    env["KAPPA_HOME"] = str(job_home)
    env.pop("KAPPA_SPARK_MASTER", None)
    try:
        done = subprocess.run(
            [
                sys.executable,
                str(JOB),
                "--master",
                standalone_cluster.url,
                "--home",
                str(job_home),
                "--rows",
                "4000",
                "--days",
                "2",
            ],
            capture_output=True,
            text=True,
            env=env,
            stdin=subprocess.DEVNULL,
            timeout=JOB_TIMEOUT,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr
        pytest.fail(
            f"standalone job timed out after {JOB_TIMEOUT}s\n--- stdout\n{out}\n--- stderr\n"
            f"{(err or '')[-6000:]}\n{standalone_cluster.diagnostics()}"
        )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    report = (
        f"exit {done.returncode}\n--- stdout\n{done.stdout[-4000:]}\n--- stderr\n"
        f"{done.stderr[-8000:]}\n{standalone_cluster.diagnostics()}"
    )
    assert done.returncode == 0 and lines, report
    result = json.loads(lines[-1].removeprefix("RESULT "))
    context = f"{json.dumps(result, indent=1)}\n{report}"

    assert result["master"] == standalone_cluster.url, context
    assert result["master"].startswith("spark://"), context
    assert result["executors"] >= 1, "an executor besides the driver"
    # Python workers on the executor ran this venv's interpreter, inside the worker's work dir.
    assert result["executor_pythons"] == [result["driver_python"]] == [sys.executable], context
    work = str(standalone_cluster.home / "work")
    assert all(cwd.startswith(work) for cwd in result["executor_cwds"]), context
    assert result["windows"] > 0, context
    assert result["batches"] > 1 and result["data_batches"] > 1, context
    assert result["rows_compared"] == result["windows"], context
    assert result["mismatches"] == 0, context
