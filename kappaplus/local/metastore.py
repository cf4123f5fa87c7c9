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

The lock API (``lock``/``check_lock``/``unlock``, what pyiceberg's HiveCatalog takes around
every Iceberg commit) needs two more: the transaction tables (``HIVE_LOCKS``, ``TXNS``...),
which DataNucleus does not create, are created once by Hive's own ``TxnDbUtil.prepDb``
before the first start (:func:`prepare_txn_tables`; ``txn-tables.ok`` marks it done), and
``datanucleus.connectionPoolingType=DBCP``: the default pool, BoneCP, is not among
pyspark's jars, so the lock handler could not open its connection pool. ``prepDb`` is a JVM
run of a few seconds (``PrepareTxnTables.java``), so it runs once per user and pyspark
version, into a template Derby database under :func:`cache_dir`
(``metastore-template/<pyspark version>-<digest of the jars>/``), and every fresh server's
database starts as a copy of that template (:func:`txn_template`).

``create_session(..., metastore_discovery=LOCAL_DISCOVERY)`` (what the ``kappa`` commands
do) finds a running server of its state directory by itself (:func:`discover`: the status
file, a live pid, an open port -- no JVM is started), so
``kappa metastore start`` (or ``kappa up``) once is all several processes need. Without a
server, :func:`check_embedded_free` turns "another process has the embedded Derby database
open" into a :class:`~kappaplus.core.errors.MetastoreError` before Spark starts.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from kappaplus.core.errors import MetastoreError
from kappaplus.core.settings import cache_dir, state_dir
from kappaplus.local.processes import parent_pid, pid_alive, port_open
from kappaplus.local.service import HOST, DetachedService
from kappaplus.session import embedded_database

log = logging.getLogger(__name__)

DEFAULT_PORT = 9083
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
        # BoneCP (the default) is not among pyspark's jars; commons-dbcp is
        "datanucleus.connectionPoolingType": "DBCP",
    }
    body = "\n".join(
        f"  <property><name>{escape(key)}</name><value>{escape(value)}</value></property>"
        for key, value in settings.items()
    )
    return f'<?xml version="1.0"?>\n<configuration>\n{body}\n</configuration>\n'


PREPARE_TXN_TABLES = """\
import java.sql.DriverManager;
import java.sql.SQLException;
import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hadoop.hive.metastore.txn.TxnDbUtil;

/** Creates the metastore's transaction tables (the lock API's) in its Derby database. */
public class PrepareTxnTables {
    public static void main(String[] args) throws Exception {
        TxnDbUtil.prepDb(new HiveConf());
        try {
            // a clean shutdown, so that the database directory can be copied as it is
            DriverManager.getConnection("jdbc:derby:;shutdown=true");
        } catch (SQLException expected) {
            // Derby reports a successful shutdown as an exception (XJ015)
        }
    }
}
"""
TXN_MARKER = "txn-tables.ok"


def template_key(jars: Path) -> str:
    """``<pyspark version>-<digest>``: the digest covers the Hive, Derby and DataNucleus jar
    names of ``jars`` and the program that prepares the database, so another pyspark (another
    Derby format, other Hive tables) never gets a template made by this one."""
    import pyspark

    names = sorted(
        path.name
        for path in jars.iterdir()
        if path.name.startswith(("hive-", "derby", "datanucleus"))
    )
    digest = hashlib.sha256("\n".join([PREPARE_TXN_TABLES, *names]).encode()).hexdigest()
    return f"{pyspark.__version__}-{digest[:16]}"


def _run_prep_db(directory: Path, conf_dir: Path, timeout: float) -> bool:
    """``TxnDbUtil.prepDb`` on the Derby database that ``conf_dir/hive-site.xml`` names, in a
    short JVM (Java's source launcher, so a JDK); a failure is logged and False."""
    source = directory / "PrepareTxnTables.java"
    source.write_text(PREPARE_TXN_TABLES)
    command = [
        java_binary(),
        f"-Dderby.system.home={directory}",
        "-cp",
        f"{conf_dir}{os.pathsep}{pyspark_jars()}/*",
        str(source),
    ]
    try:
        done = subprocess.run(
            command, cwd=directory, capture_output=True, text=True, timeout=timeout
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning(
            "metastore: the transaction tables were not created (%s); Iceberg "
            "commits through the Hive catalog will be refused at the lock",
            exc,
        )
        return False
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        log.warning(
            "metastore: the transaction tables were not created (exit %s: %s); "
            "Iceberg commits through the Hive catalog will be refused at the lock",
            done.returncode,
            last,
        )
        return False
    return True


def txn_template(timeout: float = 300.0) -> Path | None:
    """The template Derby database with the transaction tables (and nothing else), made once
    per user and pyspark version under ``cache_dir()/metastore-template/<template_key>/``.

    It is built in a private directory and renamed into place, so processes that make it at
    the same time never see half of one (the first rename wins, the others use it). None if
    it cannot be made (no JDK, no writable cache directory): the caller then prepares its own
    database in place, as before there was a template."""
    try:
        jars = pyspark_jars()
        root = cache_dir() / "metastore-template" / template_key(jars)
        if (root / TXN_MARKER).is_file():
            return root / "metastore_db"
        root.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".building-", dir=root.parent))
    except OSError as exc:
        log.info("metastore: no template database (%s); preparing in place", exc)
        return None
    try:
        conf_dir = work / "conf"
        conf_dir.mkdir()
        (conf_dir / "hive-site.xml").write_text(
            hive_site(work / "metastore_db", work / "warehouse")
        )
        if not _run_prep_db(work, conf_dir, timeout):
            return None
        (work / TXN_MARKER).write_text("TxnDbUtil.prepDb done\n")
        # another process may have renamed its template into place first: use that one
        with contextlib.suppress(OSError):
            work.rename(root)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return root / "metastore_db" if (root / TXN_MARKER).is_file() else None


def prepare_txn_tables(
    directory: Path, conf_dir: Path, database: Path, timeout: float = 300.0
) -> bool:
    """Give the Derby database ``database`` of ``directory`` the transaction tables (the
    server must not run: Derby admits one process), once: ``txn-tables.ok`` marks it done.

    A database that does not exist yet starts as a copy of :func:`txn_template` (a file copy,
    no JVM); an existing one without the marker (made before the template, or whose
    preparation failed) gets ``TxnDbUtil.prepDb`` run on it in place (a short JVM, a JDK). On
    a failure the server still starts (tables, schemas and reads work); commits that need a
    metastore lock (pyiceberg's HiveCatalog) are then refused, which is logged here."""
    marker = directory / TXN_MARKER
    if marker.exists():
        return True
    if not database.exists():
        template = txn_template(timeout)
        if template is not None:
            try:
                shutil.copytree(template, database)
            except OSError as exc:
                log.info("metastore: template database not copied (%s); preparing in place", exc)
                shutil.rmtree(database, ignore_errors=True)
            else:
                marker.write_text(f"copied from the template {template}\n")
                return True
    if not _run_prep_db(directory, conf_dir, timeout):
        return False
    marker.write_text("TxnDbUtil.prepDb done\n")
    return True


@dataclass(frozen=True)
class MetastoreStatus:
    """What ``kappa metastore status`` shows."""

    running: bool
    pid: int | None = None
    port: int | None = None
    uri: str | None = None
    log_file: str | None = None
    started_at: float | None = None


class MetastoreServer(DetachedService):
    """A detached Hive metastore thrift server on ``127.0.0.1:port``.

    - ``home``: state directory (default ``state_dir()``); files go to ``home/metastore/``.
    - ``port``: default 9083 if free, else any free port.
    - ``memory``: the server's JVM heap (``-Xmx``), default ``$KAPPA_METASTORE_MEMORY`` or 512m.

    ``start()`` reuses a server already running for the same home; as a context manager
    the server is stopped on exit only if this object started it.
    """

    name = "metastore"
    marker = MAIN_CLASS.encode()
    error = MetastoreError
    stop_timeout = 15.0

    def __init__(
        self,
        home: str | os.PathLike[str] | None = None,
        port: int | None = None,
        *,
        start_timeout: float = 180.0,
        memory: str | None = None,
    ) -> None:
        self.home = state_dir(home)
        super().__init__(self.home / "metastore", start_timeout)
        self.port = port
        self.memory = memory or os.environ.get("KAPPA_METASTORE_MEMORY", "512m")

    @property
    def database(self) -> Path:
        return self.dir / "metastore_db"

    @property
    def warehouse(self) -> Path:
        return self.home / "warehouse"

    def uri(self) -> str | None:
        """``thrift://127.0.0.1:PORT`` of the running server, or None."""
        state = self._running_state()
        return str(state["uri"]) if state else None

    def start(self) -> str:
        """Start the server (or reuse the running one) and return its thrift URI."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with self._start_lock():
            state = self._running_state()
            if state is not None:
                uri = str(state["uri"])
                self._wait_listening(int(state["port"]), None, "metastore")
                log.info("metastore already running: pid %s at %s", state["pid"], uri)
                return uri
            if self.port is not None and port_open(self.port):
                raise MetastoreError(
                    f"port {self.port} on {HOST} is already in use by another process"
                )
            conf_dir = self.dir / "conf"
            conf_dir.mkdir(exist_ok=True)
            self.warehouse.mkdir(parents=True, exist_ok=True)
            (conf_dir / "hive-site.xml").write_text(hive_site(self.database, self.warehouse))
            prepare_txn_tables(self.dir, conf_dir, self.database)
            return self._on_a_port(
                self.port, DEFAULT_PORT, lambda port: self._start_on(conf_dir, port)
            )

    def _start_on(self, conf_dir: Path, port: int) -> str:
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
        uri = f"thrift://{HOST}:{port}"
        self._launch(
            command,
            {"port": port, "uri": uri},
            lambda process: self._wait_listening(port, process, "metastore"),
            cwd=self.dir,
        )
        log.info("metastore listens at %s", uri)
        return uri

    def status(self) -> MetastoreStatus:
        """Whether the server runs, with pid, port and URI."""
        state = self._running_state()
        if state is None:
            return MetastoreStatus(running=False, log_file=str(self.log_file))
        return MetastoreStatus(
            running=True,
            pid=int(state["pid"]),
            port=int(state["port"]),
            uri=str(state["uri"]),
            log_file=str(self.log_file),
            started_at=float(state["started"]),
        )


def start(home: str | os.PathLike[str] | None = None, port: int | None = None) -> str:
    """Start (or reuse) the metastore server of ``home``; returns its thrift URI."""
    return MetastoreServer(home, port).start()


def stop(home: str | os.PathLike[str] | None = None) -> bool:
    """Stop the metastore server of ``home``; False if none was running."""
    return MetastoreServer(home).stop()


def status(home: str | os.PathLike[str] | None = None) -> MetastoreStatus:
    """The status of the metastore server of ``home``."""
    return MetastoreServer(home).status()


# -- discovery and the embedded database -----------------------------------------------------
DERBY_LOCK_FILE = "dbex.lck"
"""Derby's exclusive lock: the process that boots the database holds a write lock on it
(``FileChannel.tryLock``, a POSIX ``fcntl`` lock on Linux) until its JVM exits."""


def discover(home: str | os.PathLike[str] | None = None, *, wait: float = 120.0) -> str | None:
    """The thrift URI of the metastore server running for ``home``, or None if none runs.

    Cheap, no JVM: reads ``metastore/metastore.pid``, checks that the pid is alive and runs
    the metastore, and that its port accepts connections. A server that is still starting
    (process alive, port not open yet) is waited for up to ``wait`` seconds instead of
    falling back to the embedded database, whose catalog is a different one.
    """
    server = MetastoreServer(home)
    state = server._running_state()
    if state is None:
        return None
    pid = int(state["pid"])
    port = int(state["port"])
    uri = str(state["uri"])
    deadline = time.monotonic() + wait
    while not port_open(port):
        if not pid_alive(pid):
            return None
        if time.monotonic() >= deadline:
            raise MetastoreError(
                f"the metastore server of {server.home} (pid {pid}) does not listen on {uri} "
                f"after {wait:.0f}s; see {server.log_file} or stop it with "
                "'kappa metastore stop'"
            )
        time.sleep(0.2)
    return uri


# struct flock on 64-bit Linux: short l_type, short l_whence, off_t l_start, off_t l_len,
# pid_t l_pid (+ padding to 32 bytes).
_FLOCK_LINUX = "@hhqqi4x"


def lock_holder(path: Path) -> int | None:
    """The pid of a process holding a POSIX write lock on ``path``; None if nobody does.

    Asks the kernel with ``fcntl(F_GETLK)``, which only tests for a conflicting lock and
    takes none, so it cannot disturb the holder. 0 means locked by a process whose pid is
    not visible (another pid namespace, or an open-file-description lock). Only on 64-bit
    Linux; elsewhere (or if ``path`` cannot be opened) the answer is None: unknown.
    """
    if not sys.platform.startswith("linux") or struct.calcsize("P") != 8:
        return None
    request = struct.pack(_FLOCK_LINUX, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, request)
    except OSError:
        return None
    finally:
        os.close(fd)
    kind, _, _, _, pid = struct.unpack(_FLOCK_LINUX, answer)
    if kind == fcntl.F_UNLCK:
        return None
    return pid if pid > 0 else 0


def _is_own_jvm(pid: int) -> bool:
    """Whether ``pid`` is a ``java`` child of this process (the py4j gateway of pyspark)."""
    return parent_pid(pid) == os.getpid() and _is_java(_command(pid))


def _is_java(command: str) -> bool:
    return Path(command.split(" ", 1)[0]).name == "java"


def _command(pid: int, limit: int = 160) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            text = " ".join(handle.read().replace(b"\0", b" ").decode(errors="replace").split())
    except OSError:
        return ""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe(pid: int) -> str:
    """``process 123 (command)``; for a JVM (Spark driver) the Python process that runs it."""
    if pid <= 0:
        return "another process"
    command = _command(pid)
    parent = parent_pid(pid)
    if _is_java(command) and parent and parent > 1:
        owner = _command(parent)
        if owner:
            return f"process {pid} (the JVM of process {parent}: {owner})"
    return f"process {pid} ({command})" if command else f"process {pid}"


def embedded_holder(home: str | os.PathLike[str] | None = None) -> int | None:
    """The pid of another process that has the embedded Derby metastore of ``home`` open.

    None if nobody has (or it cannot be told, see :func:`lock_holder`); 0 if some process
    has but its pid is not visible. This process's own Spark JVM (a ``java`` child process,
    which keeps Derby open after ``spark.stop()``) does not count: a new session in this
    process runs in that same JVM.
    """
    lock = embedded_database(home) / DERBY_LOCK_FILE
    if not lock.exists():
        return None
    pid = lock_holder(lock)
    if pid is None or (pid > 0 and _is_own_jvm(pid)):
        return None
    return pid


EXITING_HOLDER_WAIT = 15.0
"""How long :func:`check_embedded_free` waits for a holder that is exiting (seconds)."""


def exiting_holder(pid: int) -> bool:
    """Whether holder ``pid`` is on its way out: a JVM whose owner is gone.

    A Python process that used Spark exits before its JVM does: the JVM notices its owner's
    pipe close, then runs Spark's shutdown hooks for a few seconds with Derby still open,
    adopted by init (or a subreaper). A JVM whose parent is a live Python process is in use.
    """
    if pid <= 0 or not _is_java(_command(pid)):
        return False
    parent = parent_pid(pid)
    if parent is None:
        return False  # the holder itself is gone
    return parent <= 1 or not _is_python(_command(parent))


def _is_python(command: str) -> bool:
    return Path(command.split(" ", 1)[0]).name.startswith("python")


def check_embedded_free(
    home: str | os.PathLike[str] | None = None, *, wait: float = EXITING_HOLDER_WAIT
) -> None:
    """Raise :class:`MetastoreError` if another process holds the embedded metastore of ``home``.

    Without this, the second process fails deep inside Hive with a long Java stack trace
    ending in Derby's "Another instance of Derby may have already booted the database".
    A holder that is exiting (:func:`exiting_holder`: a command started right after
    another process used the catalog) is waited for up to ``wait`` seconds first.
    """
    pid = embedded_holder(home)
    if pid is not None and exiting_holder(pid):
        log.info(
            "waiting up to %.0fs for %s, which is exiting, to close the embedded metastore",
            wait,
            _describe(pid),
        )
        deadline = time.monotonic() + wait
        while pid is not None and exiting_holder(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
            pid = embedded_holder(home)
    if pid is None:
        return
    root = state_dir(home)
    raise MetastoreError(
        f"{_describe(pid)} holds the embedded Hive metastore at {embedded_database(root)}, and "
        "embedded Derby admits one process at a time. Run 'kappa up' (or 'kappa metastore "
        f"start') with the same state directory ({root}) so that processes share one "
        "metastore server (sessions find it by themselves); the server keeps its own catalog, "
        "tables registered in the embedded one are not in it."
    )


class LocalMetastoreDiscovery:
    """The local stack's :class:`~kappaplus.session.MetastoreDiscovery`: the server
    ``kappa up`` / ``kappa metastore start`` runs for a state directory, and the early error
    when another process holds the embedded Derby metastore."""

    def discover(self, home: Path) -> str | None:
        return discover(home)

    def check_embedded_free(self, home: Path) -> None:
        check_embedded_free(home)


LOCAL_DISCOVERY = LocalMetastoreDiscovery()
"""What ``kappa`` commands pass to :func:`~kappaplus.session.create_session`."""
