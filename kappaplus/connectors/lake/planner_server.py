"""The slice planner of the JVM reader, served from the driver's own Python process.

The JVM source (``kappa_hive_jvm``) needs the Python slice planner for every query. Without
help it starts ``python -m kappaplus.connectors.lake.plan_service`` as a child process per
query, which costs a Python interpreter with pyspark and pyarrow imported and its start-up
inside the query's start. When the driver is a Python process with kappaplus
loaded -- always the case when a kappaplus reading function chose the JVM reader -- this
module serves the same planner from that process instead: a loopback TCP server, one thread
per connection, one connection per query, speaking the same JSON-line protocol through
:func:`~kappaplus.connectors.lake.plan_service.serve`.

The JVM finds it through two source options (:data:`PLANNER_ADDRESS`, :data:`PLANNER_SECRET`)
that :func:`~kappaplus.connectors.lake.jvm_reader.jvm_options` adds. A connection is
served only after its first line is the process's random secret (as pyspark authenticates
its own sockets); the option name contains ``secret``, which Spark redacts in plans and UIs.
The planner always runs where the ``MicroBatchStream`` calls run, on the driver, so the
loopback address is right on a cluster too. Options are not stored in checkpoints: a
restarted query gets the new process's address.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import secrets
import socket
import threading
from typing import Any

from kappaplus.connectors.lake.plan_service import serve

log = logging.getLogger(__name__)

PLANNER_ADDRESS = "plannerAddress"
"""Source option: ``host:port`` of the driver's in-process planner (absent: the JVM spawns
a planner process)."""
PLANNER_SECRET = "plannerSecret"
"""Source option: the secret a connection to the in-process planner sends first."""

_AUTH_TIMEOUT_S = 30.0


class PlannerServer:
    """A loopback server answering slice planner connections in daemon threads."""

    def __init__(self) -> None:
        self.secret = secrets.token_hex(32)
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._socket.getsockname()[1]}"
        self._lock = threading.Lock()
        self.served = 0
        """Connections authenticated so far (one per query that used this planner)."""
        self.active = 0
        """Connections being served now."""
        thread = threading.Thread(target=self._accept, name="kappa-planner-server", daemon=True)
        thread.start()

    def options(self) -> dict[str, str]:
        """The source options pointing the JVM reader at this server."""
        return {PLANNER_ADDRESS: self.address, PLANNER_SECRET: self.secret}

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:  # the socket was closed
                return
            threading.Thread(
                target=self._serve, args=(connection,), name="kappa-planner", daemon=True
            ).start()

    def _serve(self, connection: socket.socket) -> None:
        with connection:
            connection.settimeout(_AUTH_TIMEOUT_S)
            requests = connection.makefile("r", encoding="utf-8", newline="\n")
            answers = connection.makefile("w", encoding="utf-8", newline="\n")
            try:
                offered = requests.readline().rstrip("\n")
            except (OSError, UnicodeDecodeError):
                return
            if not hmac.compare_digest(offered.encode(), self.secret.encode()):
                log.warning("slice planner: refused a connection without the secret")
                return
            connection.settimeout(None)  # a query may wait long between two requests
            with self._lock:
                self.served += 1
                self.active += 1
            log.info("slice planner: serving a query in the driver process")
            try:
                serve(requests, answers)
            except OSError as exc:  # the JVM side went away mid-answer
                log.info("slice planner connection ended: %s", exc)
            finally:
                with self._lock:
                    self.active -= 1
                for stream in (requests, answers):
                    with contextlib.suppress(OSError):
                        stream.close()

    def close(self) -> None:
        """Stop accepting connections (those being served go on until their query ends)."""
        self._socket.close()


_server: PlannerServer | None = None
_server_lock = threading.Lock()


def planner_server() -> PlannerServer:
    """This process's planner server, started on first use."""
    global _server
    with _server_lock:
        if _server is None:
            _server = PlannerServer()
        return _server


def in_process_options() -> dict[str, Any]:
    """The options that make the JVM reader use this process's planner."""
    return planner_server().options()
