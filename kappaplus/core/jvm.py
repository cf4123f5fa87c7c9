"""The Spark JVM of a driver process: started apart from the caller's signals, and gone
when the caller says so.

Why its own session. ``timeout``, systemd's default ``KillMode=control-group`` and
Kubernetes signal every process of the group. A JVM in the driver's process group dies
of that SIGTERM in the middle of a micro-batch (its Python workers too), and the driver
prints hundreds of lines of py4j errors instead of stopping its queries. Started in a new
session (``setsid``) the JVM and the Python workers it forks receive no group signal:
only the Python driver handles it, stops every query at a clean point, then stops Spark.
The JVM still dies with the driver if the driver is killed outright (SIGKILL): it exits
when its stdin pipe from the driver closes (pyspark's gateway contract).

Why wait for it. ``SparkSession.stop()`` leaves the JVM running until the Python process
exits, and a moment longer; the next command of a script would find the embedded
metastore still held. :func:`shutdown_jvm` closes the gateway and waits for the process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger(__name__)

JVM_LOG_NAME = "spark-driver.log"
_output_to_log = False
# pyspark's own Python loggers print an analysis error as a JSON record with the Java stack
# trace before the exception reaches kappaplus, which reports it in one line
_PYSPARK_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def spark_home() -> Path:
    """The Spark installation Spark's launcher runs for this process: ``$SPARK_HOME``, else
    the installed pyspark package (which holds Spark's ``jars``)."""
    home = os.environ.get("SPARK_HOME")
    if home:
        return Path(home)
    import pyspark

    return Path(pyspark.__file__).parent


def send_output_to_log(enabled: bool = True) -> None:
    """Whether a JVM started by this process writes its own output (Spark's log4j console,
    the JVM's start-up warnings) to ``<state dir>/logs/spark-driver.log`` instead of stderr.

    The ``kappa`` commands turn it on unless ``-v``: their stderr then holds what kappaplus
    says (one line per error), not three JVM warnings per command and Java stack traces.
    Library callers keep Spark's usual output.
    """
    global _output_to_log
    _output_to_log = enabled


def jvm_log_path(home: Path) -> Path:
    """Where the JVM of a ``kappa`` command under ``home`` writes its output."""
    return home / "logs" / JVM_LOG_NAME


def launch_detached_gateway(
    master: str, app_name: str, settings: Mapping[str, str], home: Path | None = None
) -> bool:
    """Start the JVM gateway in its own session, unless one runs (or is given by
    ``PYSPARK_GATEWAY_PORT``). True if it started one. ``settings`` are the Spark settings
    the session is built with (``spark-submit`` needs the driver's among them); with
    :func:`send_output_to_log` on and a state directory ``home``, the JVM's output is
    appended to :func:`jvm_log_path` instead of this process's stderr."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return False
    conf = SparkConf(loadDefaults=False)
    conf.setMaster(master).setAppName(app_name)
    for key, value in settings.items():
        conf.set(key, value)
    popen_kwargs: dict[str, object] = {"start_new_session": True}
    if _output_to_log and home is not None:
        path = jvm_log_path(home)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab") as output:  # the child keeps its own copy of the descriptor
            popen_kwargs["stderr"] = output
            gateway = launch_gateway(conf, popen_kwargs=popen_kwargs)
        _pyspark_loggers_to(path)
        log.info("Spark's own log: %s (-v shows it here)", path)
    else:
        gateway = launch_gateway(conf, popen_kwargs=popen_kwargs)
    SparkContext._gateway = gateway
    SparkContext._jvm = gateway.jvm
    return True


def _pyspark_loggers_to(path: Path) -> None:
    """Send pyspark's own JSON loggers to ``path`` instead of stderr."""
    from pyspark.logger import PySparkLogger

    handler = logging.FileHandler(path, delay=True)
    for name in _PYSPARK_LOGGERS:
        logger = PySparkLogger.getLogger(name)  # created as pyspark creates it, with its handler
        logger.propagate = False
        logger.handlers = []
        logger.addHandler(handler)  # PySparkLogger formats it as JSON


def shutdown_jvm(timeout: float = 30.0) -> None:
    """Close the gateway of this process and wait until its JVM has exited (killed after
    ``timeout`` seconds). Call after the SparkSession is stopped; a later session starts a
    new JVM."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    proc: subprocess.Popen[bytes] | None = getattr(gateway, "proc", None)
    try:
        gateway.shutdown()
    except Exception as exc:  # noqa: BLE001 - the JVM may be gone already
        log.debug("closing the gateway: %s", exc)
    SparkContext._gateway = None
    SparkContext._jvm = None
    if proc is None:
        return
    if proc.stdin is not None:
        with contextlib.suppress(OSError):
            proc.stdin.close()  # the JVM exits when its stdin closes
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        log.warning("the Spark JVM (pid %d) did not exit within %.0f s: killed", proc.pid, timeout)
        proc.kill()
        proc.wait(10)
    _wait_group(proc.pid, timeout)


def _wait_group(pgid: int, timeout: float) -> None:
    """Wait until no live process of group ``pgid`` is left (the Python workers the JVM
    forked; the JVM leads its own session, so they are in its group); kill stragglers.

    A zombie counts as gone: it holds no port, file or lock, only its entry in the process
    table until its parent reaps it. When the JVM exits, a child it had not reaped yet
    passes to the machine's init, and an init that reaps slowly (a container's, a
    microVM's) kept the group alive for a while after the JVM had gone."""
    import signal
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _group_alive(pgid):
            return
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return


def _group_alive(pgid: int) -> bool:
    """True while process group ``pgid`` has a member that is not a zombie (on systems
    without ``/proc``: while it has any member)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # exited meanwhile
            continue
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses
        state, _ppid, group = stat[stat.rindex(")") + 2 :].split()[:3]
        if int(group) == pgid and state not in ("Z", "X"):
            return True
    return False
