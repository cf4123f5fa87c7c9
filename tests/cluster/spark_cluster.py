"""A Spark standalone cluster for tests: one master and N workers on loopback, on free ports.

Each worker runs in a mount namespace of its own (``unshare -m``, root only) in which the
directories it must not see -- the driver's private state: ``KAPPA_HOME`` with its run
records, logs and scratch -- are covered by an empty ``tmpfs``. Its executors (children of
the worker) inherit that namespace, so a path the driver writes and an executor reads (or the
other way round) fails, or lands in the executor's private tmpfs, as on separate machines.
What both must see (warehouse, lake, checkpoints) lives outside those directories, as HDFS or
an object store would. Every daemon leads its own process group with the executors it forks;
:meth:`Cluster.stop` kills the groups, pass or fail.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kappaplus.local.processes import parent_pid

START_TIMEOUT = 180  # seconds for a JVM daemon to come up on a loaded machine
EXECUTOR_CLASS = "CoarseGrainedExecutorBackend"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def can_isolate() -> str | None:
    """Why workers cannot get mount namespaces of their own here, or None if they can."""
    if os.geteuid() != 0:
        return "needs root for unshare -m / mount -t tmpfs"
    if shutil.which("unshare") is None:
        return "needs util-linux unshare"
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /mnt && umount /mnt"],
        capture_output=True,
        timeout=30,
    )
    return None if probe.returncode == 0 else f"unshare -m failed: {probe.stderr[-300:]!r}"


def daemon_env(home: Path) -> dict[str, str]:
    """The environment of the master and workers: nothing of the driver's settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KAPPA_", "PYSPARK_", "SPARK_", "PYTHONPATH"))
    }
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
        """Kill the daemon's process group (a worker's executors are in it too)."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(20)
        # executors forked by the worker may outlive it briefly
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(10)


def start_daemon(
    name: str, command: Sequence[str], home: Path, ready: str, env: dict[str, str]
) -> Daemon:
    """Run ``command`` in its own process group; wait for ``ready`` in its log."""
    log = home / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            list(command),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
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


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


@dataclass
class Cluster:
    url: str
    home: Path
    master: Daemon
    workers: list[Daemon] = field(default_factory=list)
    hidden: tuple[Path, ...] = ()

    def work_dir(self, index: int) -> Path:
        return self.home / f"work-{index}"

    def executors(self, app_id: str | None = None) -> list[int]:
        """Pids of the executor JVMs the workers run (of application ``app_id`` if given)."""
        groups = {w.process.pid for w in self.workers}
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            if _pgid(pid) not in groups:
                continue
            args = _cmdline(pid)
            if not any(EXECUTOR_CLASS in a for a in args):
                continue
            if any(EXECUTOR_CLASS in a for a in _cmdline(parent_pid(pid) or 0)):
                continue  # an executor's child before its exec (the JVM's posix_spawn)
            if app_id is None or app_id in args:
                found.append(pid)
        return sorted(found)

    def app_ids(self) -> list[str]:
        """Applications the workers ran executors for (their work dirs), oldest first."""
        ids = {p.name for i in range(len(self.workers)) for p in self.work_dir(i).glob("app-*")}
        return sorted(ids)

    def sees(self, pid: int, path: Path) -> bool:
        """Whether process ``pid`` sees ``path`` (resolved in its own mount namespace)."""
        return Path(f"/proc/{pid}/root{path}").exists()

    def diagnostics(self) -> str:
        parts = [f"--- master log\n{self.master.tail()}"]
        parts += [f"--- {w.name} log\n{w.tail()}" for w in self.workers]
        for index in range(len(self.workers)):
            for stderr in sorted(self.work_dir(index).glob("app-*/*/stderr"))[-2:]:
                lines = stderr.read_text(errors="replace").splitlines()
                parts.append(f"--- executor {stderr}\n" + "\n".join(lines[-30:]))
        return "\n".join(parts)

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.master.stop()


@contextlib.contextmanager
def standalone_cluster(
    home: Path, workers: int, hidden: Sequence[Path], *, cores: int = 1, memory: str = "1g"
) -> Iterator[Cluster]:
    """A master and ``workers`` workers (``cores`` cores, ``memory`` each), each worker in
    its own mount namespace with every directory of ``hidden`` covered by an empty tmpfs."""
    home.mkdir(parents=True, exist_ok=True)
    env = daemon_env(home)
    spark_class = str(spark_home() / "bin" / "spark-class")
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    master = start_daemon(
        "master",
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
        + ["--port", str(port), "--webui-port", "0"],
        home,
        "I have been elected leader",
        env,
    )
    cluster = Cluster(url, home, master, hidden=tuple(hidden))
    try:
        for index in range(workers):
            work = cluster.work_dir(index)
            work.mkdir()
            mounts = " && ".join(f'mount -t tmpfs tmpfs "{p}"' for p in hidden) or "true"
            worker_args = [
                "org.apache.spark.deploy.worker.Worker",
                url,
                "--host",
                "127.0.0.1",
                "--cores",
                str(cores),
                "--memory",
                memory,
                "--webui-port",
                "0",
                "--work-dir",
                str(work),
            ]
            # unshare execs sh, which execs spark-class, which execs java: the daemon's
            # pid is the worker JVM's, and it leads the group its executors join
            command = [
                "unshare",
                "-m",
                "--propagation",
                "private",
                "sh",
                "-c",
                f'{mounts} && exec "$0" "$@"',
                spark_class,
                *worker_args,
            ]
            cluster.workers.append(
                start_daemon(
                    f"worker-{index}", command, home, "Successfully registered with master", env
                )
            )
        yield cluster
    finally:
        cluster.stop()
