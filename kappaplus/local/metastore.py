"""A local Hive metastore server, so several Spark processes share one catalog.

Spark's default embedded Derby metastore admits one process at a time, but a stream run
and a backfill run of the same job are separate processes that must run together. This
module runs ``org.apache.hadoop.hive.metastore.HiveMetaStore`` (Hive 2.3, from the jars
pyspark ships) as a detached thrift server on ``127.0.0.1``, backed by an embedded Derby
database that only the server opens. Its schema is created on first start
(``datanucleus.schema.autoCreateAll``); the warehouse is ``state_dir()/warehouse``, the
same directory sessions use by default. Files live under ``state_dir()/metastore/``:
``metastore.pid`` (JSON: pid, port, uri), ``metastore.log``, ``conf/hive-site.xml`` and
the Derby database ``metastore_db``.

>>> from kappaplus.local.metastore import MetastoreServer
>>> uri = MetastoreServer().start()           # doctest: +SKIP
>>> spark = create_session("job", metastore_uri=uri)   # doctest: +SKIP

Two settings make the pyspark jars work as a server: ``hive.async.log.enabled=false``
(Hive's async logging needs the LMAX disruptor, which pyspark does not ship) and
``hive.metastore.schema.verification=false`` (there is no schema tool to stamp a version).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from xml.sax.saxutils import escape

from kappaplus.errors import MetastoreError
from kappaplus.local.processes import free_port, log_tail, pid_alive, port_open, terminate
from kappaplus.settings import state_dir

log = logging.getLogger(__name__)

DEFAULT_PORT = 9083
HOST = "127.0.0.1"
MAIN_CLASS = "org.apache.hadoop.hive.metastore.HiveMetaStore"
URI_ENV = "KAPPA_METASTORE_URI"


def pyspark_jars() -> Path:
    """The ``jars`` directory of the installed pyspark (Hive 2.3 metastore, Derby, Hadoop)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    if not (jars.is_dir() and any(jars.glob("hive-metastore-*.jar"))):
        raise MetastoreError(f"no hive-metastore jar in {jars}; is pyspark complete?")
    return jars


def java_binary() -> str:
    """``$JAVA_HOME/bin/java`` or ``java`` from ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home, "bin", "java"), os.X_OK):
        return str(Path(home, "bin", "java"))
    found = shutil.which("java")
    if not found:
        raise MetastoreError("no 'java' on PATH and JAVA_HOME is not set (Java 17 is needed)")
    return found


def _is_metastore(pid: int) -> bool:
    """True if ``pid`` runs the metastore main class (guards against a recycled pid)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return MAIN_CLASS.encode() in handle.read()
    except OSError:
        return pid_alive(pid)


def hive_site(database: Path, warehouse: Path) -> str:
    """The ``hive-site.xml`` of the server: Derby at ``database``, tables under ``warehouse``."""
    settings = {
        "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={database};create=true",
        "javax.jdo.option.ConnectionDriverName": "org.apache.derby.jdbc.EmbeddedDriver",
        "datanucleus.schema.autoCreateAll": "true",
        "hive.metastore.schema.verification": "false",
        "hive.metastore.warehouse.dir": str(warehouse),
        "hive.async.log.enabled": "false",
        "hive.metastore.event.db.notification.api.auth": "false",
    }
    body = "\n".join(
        f"  <property><name>{escape(key)}</name><value>{escape(value)}</value></property>"
        for key, value in settings.items()
    )
    return f'<?xml version="1.0"?>\n<configuration>\n{body}\n</configuration>\n'


@dataclass(frozen=True)
class MetastoreStatus:
    """What ``kappa metastore status`` shows."""

    running: bool
    pid: int | None = None
    port: int | None = None
    uri: str | None = None
    log_file: str | None = None
    started_at: float | None = None


class MetastoreServer:
    """A detached Hive metastore thrift server on ``127.0.0.1:port``.

    - ``home``: state directory (default ``state_dir()``); files go to ``home/metastore/``.
    - ``port``: default 9083 if free, else any free port.
    - ``memory``: the server's JVM heap (``-Xmx``), default ``$KAPPA_METASTORE_MEMORY`` or 512m.

    ``start()`` reuses a server already running for the same home; as a context manager
    the server is stopped on exit only if this object started it.
    """

    def __init__(
        self,
        home: str | os.PathLike[str] | None = None,
        port: int | None = None,
        *,
        start_timeout: float = 180.0,
        memory: str | None = None,
    ) -> None:
        self.home = state_dir(home)
        self.dir = self.home / "metastore"
        self.port = port
        self.start_timeout = start_timeout
        self.memory = memory or os.environ.get("KAPPA_METASTORE_MEMORY", "512m")
        self._started_here = False

    @property
    def pid_file(self) -> Path:
        return self.dir / "metastore.pid"

    @property
    def log_file(self) -> Path:
        return self.dir / "metastore.log"

    @property
    def database(self) -> Path:
        return self.dir / "metastore_db"

    @property
    def warehouse(self) -> Path:
        return self.home / "warehouse"

    # -- state ----------------------------------------------------------------------------
    def _running_state(self) -> dict[str, object] | None:
        try:
            state = json.loads(self.pid_file.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(state, dict) or not isinstance(state.get("pid"), int):
            return None
        if pid_alive(state["pid"]) and _is_metastore(state["pid"]):
            return state
        with contextlib.suppress(OSError):
            self.pid_file.unlink()
        return None

    def uri(self) -> str | None:
        """``thrift://127.0.0.1:PORT`` of the running server, or None."""
        state = self._running_state()
        return str(state["uri"]) if state else None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> str:
        """Start the server (or reuse the running one) and return its thrift URI."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with self._lock():
            state = self._running_state()
            if state is not None:
                uri = str(state["uri"])
                self._wait_port(int(state["port"]), None)  # type: ignore[call-overload]
                log.info("metastore already running: pid %s at %s", state["pid"], uri)
                return uri
            port = self.port
            if port is None:
                port = DEFAULT_PORT if not port_open(DEFAULT_PORT) else free_port()
            elif port_open(port):
                raise MetastoreError(f"port {port} on {HOST} is already in use by another process")
            conf_dir = self.dir / "conf"
            conf_dir.mkdir(exist_ok=True)
            self.warehouse.mkdir(parents=True, exist_ok=True)
            (conf_dir / "hive-site.xml").write_text(hive_site(self.database, self.warehouse))
            command = [
                java_binary(),
                f"-Xmx{self.memory}",
                f"-Dderby.system.home={self.dir}",
                "-Dlog4j2.formatMsgNoLookups=true",
                "-cp",
                f"{conf_dir}{os.pathsep}{pyspark_jars()}/*",
                MAIN_CLASS,
                "-p",
                str(port),
            ]
            with open(self.log_file, "ab") as log_handle:
                process = subprocess.Popen(  # noqa: S603 - fixed command, no shell
                    command,
                    cwd=self.dir,
                    stdin=subprocess.DEVNULL,
                    stdout=log_handle,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # outlives the shell or test that started it
                )
            uri = f"thrift://{HOST}:{port}"
            self.pid_file.write_text(
                json.dumps({"pid": process.pid, "port": port, "uri": uri, "started": time.time()})
            )
            try:
                self._wait_port(port, process)
            except BaseException:
                self._kill(process.pid)
                with contextlib.suppress(OSError):
                    self.pid_file.unlink()
                raise
            self._started_here = True
            log.info("metastore started: pid %s at %s (log %s)", process.pid, uri, self.log_file)
            return uri

    @contextlib.contextmanager
    def _lock(self):  # type: ignore[no-untyped-def]
        import fcntl

        with open(self.dir / "start.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _wait_port(self, port: int, process: subprocess.Popen[bytes] | None) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                raise MetastoreError(
                    f"metastore exited with code {process.returncode} at start; "
                    f"see {self.log_file}:\n{self._log_tail()}"
                )
            if port_open(port):
                return
            time.sleep(0.1)
        raise MetastoreError(
            f"metastore did not listen on {HOST}:{port} within {self.start_timeout:.0f}s; "
            f"see {self.log_file}:\n{self._log_tail()}"
        )

    def _log_tail(self, lines: int = 20) -> str:
        return log_tail(self.log_file, lines)

    @staticmethod
    def _kill(pid: int, timeout: float = 15.0) -> None:
        if not terminate(pid, timeout):
            raise MetastoreError(f"metastore pid {pid} did not stop")

    def stop(self) -> bool:
        """Stop the running server; True if one was stopped, False if none was running."""
        state = self._running_state()
        if state is None:
            return False
        pid = int(state["pid"])  # type: ignore[call-overload]
        self._kill(pid)
        with contextlib.suppress(OSError):
            self.pid_file.unlink()
        self._started_here = False
        log.info("metastore pid %s stopped", pid)
        return True

    def status(self) -> MetastoreStatus:
        """Whether the server runs, with pid, port and URI."""
        state = self._running_state()
        if state is None:
            return MetastoreStatus(running=False, log_file=str(self.log_file))
        return MetastoreStatus(
            running=True,
            pid=int(state["pid"]),  # type: ignore[call-overload]
            port=int(state["port"]),  # type: ignore[call-overload]
            uri=str(state["uri"]),
            log_file=str(self.log_file),
            started_at=float(state["started"]),  # type: ignore[arg-type]
        )

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


def start(home: str | os.PathLike[str] | None = None, port: int | None = None) -> str:
    """Start (or reuse) the metastore server of ``home``; returns its thrift URI."""
    return MetastoreServer(home, port).start()


def stop(home: str | os.PathLike[str] | None = None) -> bool:
    """Stop the metastore server of ``home``; False if none was running."""
    return MetastoreServer(home).stop()


def status(home: str | os.PathLike[str] | None = None) -> MetastoreStatus:
    """The status of the metastore server of ``home``."""
    return MetastoreServer(home).status()
