"""``kappa up``/``down``, metastore discovery by ``create_session``, and the early error when
another process holds the embedded Derby metastore.

The fast tests fake the processes (a Python process whose command line names the
metastore main class, a Python process holding Derby's lock file): discovery only reads
the status file, the pid and the port, and the lock check only asks the kernel who holds
``metastore_db/dbex.lck``. The real metastore and a real Spark JVM are exercised by
``test_up_starts_both_and_sessions_discover_the_metastore``,
``test_port_taken_during_start_is_retried`` and
``test_second_embedded_spark_process_fails_early`` (about 25 s: one Spark JVM).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kappaplus.local.metastore as metastore_module
import kappaplus.local.service as service_module
from kappaplus.core.errors import MetastoreError
from kappaplus.local.broker import EmbeddedBroker
from kappaplus.local.metastore import (
    LOCAL_DISCOVERY,
    MAIN_CLASS,
    MetastoreServer,
    check_embedded_free,
    discover,
    embedded_holder,
)
from kappaplus.local.processes import free_port, listens_on, pid_alive, port_open, terminate
from kappaplus.session import hive_conf, resolve_metastore_uri

# A stand-in for the metastore server: its command line names the main class (which is
# what the status check looks for), it listens on PORT after DELAY seconds.
FAKE_SERVER = textwrap.dedent(
    """
    import socket, sys, time
    port, delay = int(sys.argv[1]), float(sys.argv[2])
    time.sleep(delay)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    while True:
        conn, _ = sock.accept()
        conn.close()
    """
)

# Holds a POSIX write lock on a file, as Derby does on metastore_db/dbex.lck.
LOCK_HOLDER = textwrap.dedent(
    """
    import fcntl, sys, time
    handle = open(sys.argv[1], "a+")
    fcntl.lockf(handle, fcntl.LOCK_EX)
    print("locked", flush=True)
    time.sleep(600)
    """
)


@pytest.fixture()
def processes() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """A factory of child processes that are all killed at the end of the test."""
    started: list[subprocess.Popen[str]] = []

    def spawn(*args: str, executable: str = sys.executable) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [executable, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        started.append(proc)
        return proc

    yield spawn
    for proc in started:
        terminate(proc.pid)


def fake_server(
    home: Path, spawn: Callable[..., subprocess.Popen[str]], delay: float = 0.0
) -> tuple[subprocess.Popen[str], str]:
    """Start a fake metastore server for ``home`` and write its status file."""
    port = free_port()
    proc = spawn("-c", FAKE_SERVER, str(port), str(delay), MAIN_CLASS)
    uri = f"thrift://127.0.0.1:{port}"
    status = home / "metastore" / "metastore.pid"
    status.parent.mkdir(parents=True, exist_ok=True)
    status.write_text(json.dumps({"pid": proc.pid, "port": port, "uri": uri, "started": 0.0}))
    return proc, uri


def hold_lock(path: Path, spawn: Callable[..., subprocess.Popen[str]], **kw: str) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    proc = spawn("-c", LOCK_HOLDER, str(path), **kw)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "locked"
    return proc.pid


# -- discovery -------------------------------------------------------------------------------
def test_no_server_means_embedded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAPPA_METASTORE_URI", raising=False)
    assert discover(tmp_path) is None
    assert resolve_metastore_uri(tmp_path, discovery=LOCAL_DISCOVERY) is None
    # a status file left by a crashed server is ignored and removed
    status = tmp_path / "metastore" / "metastore.pid"
    status.parent.mkdir(parents=True)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    status.write_text(
        json.dumps(
            {
                "pid": int(dead.stdout),
                "port": free_port(),
                "uri": "thrift://127.0.0.1:1",
                "started": 0.0,
            }
        )
    )
    assert discover(tmp_path) is None
    assert not status.exists()
    conf = hive_conf(tmp_path, None)
    assert "spark.hadoop.hive.metastore.uris" not in conf
    assert (
        f"databaseName={tmp_path}/metastore_db;"
        in conf["spark.hadoop.javax.jdo.option.ConnectionURL"]
    )


def test_running_server_is_discovered(
    tmp_path: Path,
    processes: Callable[..., subprocess.Popen[str]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.delenv("KAPPA_METASTORE_URI", raising=False)
    proc, uri = fake_server(tmp_path, processes)
    began = time.monotonic()
    with caplog.at_level(logging.INFO, logger="kappaplus.session"):
        assert resolve_metastore_uri(tmp_path, discovery=LOCAL_DISCOVERY) == uri
    assert time.monotonic() - began < 5, "discovery must be cheap"
    assert f"using the local metastore server at {uri}" in caplog.text
    conf = hive_conf(tmp_path, uri)
    assert conf["spark.hadoop.hive.metastore.uris"] == uri
    assert "spark.hadoop.javax.jdo.option.ConnectionURL" not in conf
    assert conf["spark.sql.warehouse.dir"] == str(tmp_path / "warehouse")

    # an explicit choice wins over the local server: argument, environment, Spark conf
    assert (
        resolve_metastore_uri(tmp_path, "thrift://elsewhere:9083", discovery=LOCAL_DISCOVERY)
        == "thrift://elsewhere:9083"
    )
    monkeypatch.setenv("KAPPA_METASTORE_URI", "thrift://env:9083")
    assert resolve_metastore_uri(tmp_path, discovery=LOCAL_DISCOVERY) == "thrift://env:9083"
    monkeypatch.delenv("KAPPA_METASTORE_URI")
    assert (
        resolve_metastore_uri(
            tmp_path, conf={"spark.hadoop.hive.metastore.uris": "x"}, discovery=LOCAL_DISCOVERY
        )
        is None
    )

    # the embedded database existing too is pointed out: it is another catalog
    (tmp_path / "metastore_db").mkdir()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="kappaplus.session"):
        assert resolve_metastore_uri(tmp_path, discovery=LOCAL_DISCOVERY) == uri
    assert "separate catalog" in caplog.text

    terminate(proc.pid)
    assert resolve_metastore_uri(tmp_path, discovery=LOCAL_DISCOVERY) is None


def test_starting_server_is_waited_for(
    tmp_path: Path, processes: Callable[..., subprocess.Popen[str]]
) -> None:
    _, uri = fake_server(tmp_path, processes, delay=1.5)
    # alive but not listening yet: waited for, not silently replaced by embedded Derby
    with pytest.raises(MetastoreError, match="does not listen"):
        discover(tmp_path, wait=0.3)
    assert discover(tmp_path, wait=30) == uri


def test_listens_on_tells_whose_port_it_is(
    tmp_path: Path, processes: Callable[..., subprocess.Popen[str]]
) -> None:
    proc, uri = fake_server(tmp_path, processes)
    port = int(uri.rsplit(":", 1)[1])
    deadline = time.monotonic() + 30
    while not port_open(port) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert listens_on(proc.pid, port) is True
    assert listens_on(os.getpid(), port) is False


def test_port_taken_during_start_is_retried(
    tmp_path: Path,
    processes: Callable[..., subprocess.Popen[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two servers starting at once: the one that loses the bind must notice, not take the
    other server for its own (which made two homes share one catalog), and move on."""
    thief, thief_uri = fake_server(tmp_path / "other", processes)
    contested = int(thief_uri.rsplit(":", 1)[1])
    while not port_open(contested):
        time.sleep(0.05)
    monkeypatch.setattr(metastore_module, "DEFAULT_PORT", contested)
    # the port looks free when the server checks it, as if the other server bound it
    # just after: the JVM's bind then fails
    checked: list[int] = []

    def first_check_misses(port: int, timeout: float = 0.2) -> bool:
        if port == contested and not checked:
            checked.append(port)
            return False
        return port_open(port, timeout)

    monkeypatch.setattr(metastore_module, "port_open", first_check_misses)
    monkeypatch.setattr(service_module, "port_open", first_check_misses)  # the port loop's
    home = tmp_path / "home"
    server = MetastoreServer(home)
    try:
        uri = server.start()
        assert checked == [contested]
        assert uri != thief_uri
        assert "Could not create ServerSocket" in server.log_file.read_text()
        pid = server.status().pid
        assert pid is not None and listens_on(pid, int(uri.rsplit(":", 1)[1])) is True
        assert thief.poll() is None and listens_on(thief.pid, contested) is True
    finally:
        server.stop()


# -- the embedded database held by another process ------------------------------------------
def test_embedded_metastore_held_elsewhere_is_an_error(
    tmp_path: Path, processes: Callable[..., subprocess.Popen[str]]
) -> None:
    lock = tmp_path / "metastore_db" / "dbex.lck"
    check_embedded_free(tmp_path)  # no database yet
    lock.parent.mkdir()
    lock.touch()
    check_embedded_free(tmp_path)  # left behind by a process that is gone: fine
    holder = hold_lock(lock, processes)
    assert embedded_holder(tmp_path) == holder
    with pytest.raises(MetastoreError) as caught:
        check_embedded_free(tmp_path)
    message = str(caught.value)
    assert f"process {holder}" in message
    assert str(tmp_path / "metastore_db") in message
    assert "kappa up" in message and "kappa metastore start" in message

    # create_session fails with that error before starting a JVM (in a fresh process:
    # this one has its own SparkSession)
    env = {**os.environ, "KAPPA_HOME": str(tmp_path)}
    env.pop("KAPPA_METASTORE_URI", None)
    began = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from kappaplus.local.metastore import LOCAL_DISCOVERY\n"
            "from kappaplus.session import create_session\n"
            "create_session(metastore_discovery=LOCAL_DISCOVERY)",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    took = time.monotonic() - began
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("kappaplus.core.errors.MetastoreError: ") and "kappa up" in last
    assert "py4j" not in result.stderr, "no JVM was started"
    print(f"create_session failed in {took:.1f}s")

    terminate(holder)
    assert embedded_holder(tmp_path) is None
    check_embedded_free(tmp_path)


EXITING_JVM = textwrap.dedent(
    """
    import fcntl, subprocess, sys, time
    # the JVM of a Python process that has just exited: adopted by init, holding Derby's
    # lock while Spark's shutdown hooks run, then gone
    holder = subprocess.Popen(
        [sys.argv[2], "-c", "import fcntl, sys, time\\n"
         "handle = open(sys.argv[1], 'a+')\\n"
         "fcntl.lockf(handle, fcntl.LOCK_EX)\\n"
         "print('locked', flush=True)\\n"
         "time.sleep(float(sys.argv[2]))\\n", sys.argv[1], sys.argv[3]],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )
    print(holder.stdout.readline().strip(), holder.pid, flush=True)
    if sys.argv[4] == "stays":
        time.sleep(600)
    """
)


def test_a_holder_that_is_exiting_is_waited_for(
    tmp_path: Path, processes: Callable[..., subprocess.Popen[str]]
) -> None:
    """Issue 47 item 10: a command started right after another process used the embedded
    catalog was refused while that process's JVM was still exiting. A JVM whose owner is
    gone is waited for; a JVM whose Python owner lives is refused at once, as before."""
    lock = tmp_path / "metastore_db" / "dbex.lck"
    lock.parent.mkdir()
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.symlink_to(os.path.realpath(sys.executable))
    owner = processes("-c", EXITING_JVM, str(lock), str(java), "4", "exits")
    assert owner.stdout is not None
    said, pid = owner.stdout.readline().split()
    assert said == "locked" and owner.wait(10) == 0  # its owner has exited; it holds on
    holder = int(pid)
    try:
        assert embedded_holder(tmp_path) == holder and pid_alive(holder)
        began = time.monotonic()
        check_embedded_free(tmp_path)  # waits for it instead of refusing
        assert time.monotonic() - began > 1 and embedded_holder(tmp_path) is None
    finally:
        terminate(holder)

    # a JVM whose Python owner still runs is in use: refused without waiting
    owner = processes("-c", EXITING_JVM, str(lock), str(java), "600", "stays")
    assert owner.stdout is not None
    said, pid = owner.stdout.readline().split()
    used = int(pid)
    assert said == "locked" and embedded_holder(tmp_path) == used
    began = time.monotonic()
    try:
        with pytest.raises(MetastoreError, match=f"process {used}"):
            check_embedded_free(tmp_path)
        assert time.monotonic() - began < 5
    finally:
        terminate(used)


def test_own_jvm_does_not_count(
    tmp_path: Path, processes: Callable[..., subprocess.Popen[str]]
) -> None:
    # This process's Spark JVM is a child named 'java' that keeps Derby open after
    # spark.stop(); a new session of this process reuses it, so it is no conflict.
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.symlink_to(os.path.realpath(sys.executable))
    hold_lock(tmp_path / "metastore_db" / "dbex.lck", processes, executable=str(java))
    assert embedded_holder(tmp_path) is None
    check_embedded_free(tmp_path)


def test_second_embedded_spark_process_fails_early(tmp_path: Path) -> None:
    """A real Spark process holds the embedded metastore; a second one gets the error."""
    env = {**os.environ, "KAPPA_HOME": str(tmp_path)}
    env.pop("KAPPA_METASTORE_URI", None)
    first = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from kappaplus.local.metastore import LOCAL_DISCOVERY\n"
            "from kappaplus.session import create_session\n"
            "spark = create_session('first', metastore_discovery=LOCAL_DISCOVERY)\n"
            "spark.sql('SHOW DATABASES').collect()\n"
            "print('ready', flush=True)\n"
            "input()\n"
            "spark.stop()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert first.stdout is not None and first.stdin is not None
        assert first.stdout.readline().strip() == "ready"
        holder = embedded_holder(tmp_path)
        assert holder is not None and holder != first.pid  # the JVM, a child of `first`
        began = time.monotonic()
        second = subprocess.run(
            [
                sys.executable,
                "-c",
                "from kappaplus.local.metastore import LOCAL_DISCOVERY\n"
                "from kappaplus.session import create_session\n"
                "create_session('second', metastore_discovery=LOCAL_DISCOVERY)",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        took = time.monotonic() - began
        assert second.returncode != 0
        assert "MetastoreError" in second.stderr
        assert f"the JVM of process {first.pid}" in second.stderr
        assert "Another instance of Derby" not in second.stderr
        print(f"second process failed after {took:.1f}s")
        first.stdin.write("\n")
        first.stdin.flush()
        assert first.wait(timeout=120) == 0
    finally:
        terminate(first.pid)


# -- kappa up / down -----------------------------------------------------------------------
@pytest.fixture()
def stack_home(tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "stack"
    yield home
    MetastoreServer(home).stop()  # never leave services behind, even on failure
    EmbeddedBroker(home).stop()


def test_up_needs_something_to_start(stack_home: Path) -> None:
    from kappaplus.cli import app

    result = CliRunner().invoke(
        app, ["up", "--home", str(stack_home), "--no-broker", "--no-metastore"]
    )
    assert result.exit_code == 2 and "nothing to start" in result.output


def test_up_broker_only(stack_home: Path) -> None:
    from kappaplus.cli import app

    runner = CliRunner()
    port = free_port()
    result = runner.invoke(
        app, ["up", "--home", str(stack_home), "--no-metastore", "--broker-port", str(port)]
    )
    assert result.exit_code == 0, result.output
    assert f"127.0.0.1:{port}" in result.output and "thrift://" not in result.output
    broker = EmbeddedBroker(stack_home).status()
    assert broker.running and broker.pid is not None
    assert not MetastoreServer(stack_home).status().running
    result = runner.invoke(app, ["down", "--home", str(stack_home)])
    assert result.exit_code == 0, result.output
    assert "broker stopped" in result.output and "no metastore running" in result.output
    assert not pid_alive(broker.pid)


def test_up_starts_both_and_sessions_discover_the_metastore(
    stack_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kappaplus.cli import app

    monkeypatch.delenv("KAPPA_METASTORE_URI", raising=False)
    runner = CliRunner()
    broker_port, metastore_port = free_port(), free_port()
    began = time.monotonic()
    result = runner.invoke(
        app,
        [
            "up",
            "--home",
            str(stack_home),
            "--broker-port",
            str(broker_port),
            "--metastore-port",
            str(metastore_port),
        ],
    )
    took = time.monotonic() - began
    assert result.exit_code == 0, result.output
    uri = f"thrift://127.0.0.1:{metastore_port}"
    assert f"127.0.0.1:{broker_port}" in result.output and uri in result.output
    assert "automatically" in result.output
    broker = EmbeddedBroker(stack_home).status()
    metastore = MetastoreServer(stack_home).status()
    assert broker.running and metastore.running and metastore.uri == uri
    assert broker.pid is not None and metastore.pid is not None

    # a session of this state directory uses the server by itself
    assert resolve_metastore_uri(stack_home, discovery=LOCAL_DISCOVERY) == uri

    # up again reuses both
    again = runner.invoke(app, ["up", "--home", str(stack_home)])
    assert again.exit_code == 0, again.output
    assert again.output.count("already running") == 2
    assert EmbeddedBroker(stack_home).status().pid == broker.pid
    assert MetastoreServer(stack_home).status().pid == metastore.pid

    result = runner.invoke(app, ["down", "--home", str(stack_home)])
    assert result.exit_code == 0, result.output
    assert "metastore stopped" in result.output and "broker stopped" in result.output
    assert not pid_alive(broker.pid) and not pid_alive(metastore.pid)
    assert resolve_metastore_uri(stack_home, discovery=LOCAL_DISCOVERY) is None
    print(f"kappa up started broker + metastore in {took:.1f}s")
