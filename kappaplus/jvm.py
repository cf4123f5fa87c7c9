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

log = logging.getLogger(__name__)


def launch_detached_gateway(master: str, app_name: str, settings: Mapping[str, str]) -> bool:
    """Start the JVM gateway in its own session, unless one runs (or is given by
    ``PYSPARK_GATEWAY_PORT``). True if it started one. ``settings`` are the Spark settings
    the session is built with (``spark-submit`` needs the driver's among them)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return False
    conf = SparkConf(loadDefaults=False)
    conf.setMaster(master).setAppName(app_name)
    for key, value in settings.items():
        conf.set(key, value)
    gateway = launch_gateway(conf, popen_kwargs={"start_new_session": True})
    SparkContext._gateway = gateway
    SparkContext._jvm = gateway.jvm
    return True


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
    """Wait until no process of group ``pgid`` is left (the Python workers the JVM
    forked; the JVM leads its own session, so they are in its group); kill stragglers."""
    import signal
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return
