"""An S3-compatible object store on loopback, for local runs and tests: moto's server.

``moto_server`` (from the ``moto[server]`` package: ``pip install 'kappaplus[s3]'``) runs
as a detached service of the state directory, like the broker and the metastore server:
``state_dir()/s3/`` holds ``s3.pid`` (JSON: pid, port, endpoint, bucket) and ``s3.log``.
``start()`` creates the bucket (``kappa`` by default) and returns the endpoint
(``http://127.0.0.1:PORT``, port 5000 if free, else any free one); a second ``start``
reuses the running server. Any access key is accepted; kappaplus uses ``kappa``/``kappa``.

Objects live in the server's memory: they last as long as the process, and ``stop()``
(``kappa down``) loses them. So the SQL catalog that :meth:`ObjectStore.iceberg_catalog`
names (``state_dir()/s3/catalog.db``, whose tables point into the bucket) is removed when
the server is stopped, rather than left naming files that are gone.

What clients are given (:func:`iceberg_catalog`, :func:`delta_storage_options`,
:func:`client_env`): pyiceberg's FileIO ``s3.*`` properties for an Iceberg catalog,
delta-rs storage options for a Delta table, and the ``AWS_*`` environment of a process
(the tansu broker's ``s3://`` storage).

>>> with ObjectStore("/tmp/kappa-home") as endpoint:   # doctest: +SKIP
...     print(endpoint)                                  # 'http://127.0.0.1:5000'
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from kappaplus.core.errors import ObjectStoreError
from kappaplus.core.settings import state_dir
from kappaplus.local.processes import port_open
from kappaplus.local.service import HOST, DetachedService

log = logging.getLogger(__name__)

DEFAULT_PORT = 5000
"""moto_server's own default port."""
BUCKET = "kappa"
ACCESS_KEY = "kappa"
SECRET_KEY = "kappa"
REGION = "us-east-1"
ENDPOINT_ENV = "KAPPA_S3_ENDPOINT"
"""The variable ``kappa up --print-env`` exports, for configs saying ``${KAPPA_S3_ENDPOINT}``."""


def moto_binary() -> str:
    """Path of ``moto_server``: beside this Python interpreter, else on ``PATH``."""
    beside = Path(sys.executable).parent / "moto_server"
    if os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("moto_server")
    if found is None:
        raise ObjectStoreError(
            "no moto_server (the embedded S3 store): pip install 'kappaplus[s3]' "
            "(or 'moto[server]') into this environment"
        )
    return found


def client_env(endpoint: str) -> dict[str, str]:
    """The ``AWS_*`` environment of a process that reaches the store (the tansu broker).

    >>> client_env("http://127.0.0.1:5000")["AWS_ENDPOINT"]
    'http://127.0.0.1:5000'
    """
    return {
        "AWS_ENDPOINT": endpoint,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ALLOW_HTTP": "true",
    }


def iceberg_catalog(endpoint: str, bucket: str, catalog_db: Path) -> dict[str, str]:
    """pyiceberg catalog properties: a SQL catalog in ``catalog_db`` whose tables (data and
    metadata) live under ``s3://BUCKET/warehouse``, with the FileIO's ``s3.*`` settings.

    >>> props = iceberg_catalog("http://127.0.0.1:5000", "kappa", Path("/k/s3/catalog.db"))
    >>> props["uri"], props["warehouse"], props["s3.endpoint"]
    ('sqlite:////k/s3/catalog.db', 's3://kappa/warehouse', 'http://127.0.0.1:5000')
    """
    return {
        "type": "sql",
        "uri": f"sqlite:///{catalog_db}",
        "warehouse": f"s3://{bucket}/warehouse",
        "s3.endpoint": endpoint,
        "s3.access-key-id": ACCESS_KEY,
        "s3.secret-access-key": SECRET_KEY,
        "s3.region": REGION,
    }


def delta_storage_options(endpoint: str) -> dict[str, str]:
    """delta-rs ``storage_options`` for tables at ``s3://BUCKET/...`` on the store.

    >>> delta_storage_options("http://127.0.0.1:5000")["AWS_ALLOW_HTTP"]
    'true'
    """
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_REGION": REGION,
        "AWS_ALLOW_HTTP": "true",
    }


def toml_inline(values: dict[str, str]) -> str:
    """A TOML inline table of string values (keys with dots quoted), to paste in a config.

    >>> toml_inline({"type": "sql", "s3.region": "us-east-1"})
    '{ type = "sql", "s3.region" = "us-east-1" }'
    """
    import json

    def key(name: str) -> str:
        plain = name.replace("_", "").replace("-", "").isalnum()
        return name if plain else json.dumps(name)

    return "{ " + ", ".join(f"{key(k)} = {json.dumps(v)}" for k, v in values.items()) + " }"


def create_bucket(endpoint: str, bucket: str, timeout: float = 30.0) -> None:
    """Create ``bucket`` on the store at ``endpoint``; one that exists already is kept."""
    request = urllib.request.Request(f"{endpoint}/{bucket}", method="PUT")
    try:
        urllib.request.urlopen(request, timeout=timeout).close()  # noqa: S310 - loopback http
    except urllib.error.HTTPError as exc:
        if exc.code == 409 and b"BucketAlreadyOwnedByYou" in exc.read():
            return
        raise ObjectStoreError(f"creating bucket {bucket!r} at {endpoint}: {exc}") from exc
    except OSError as exc:
        raise ObjectStoreError(f"creating bucket {bucket!r} at {endpoint}: {exc}") from exc


@dataclass(frozen=True)
class ObjectStoreStatus:
    """What ``kappa s3 status`` shows."""

    running: bool
    pid: int | None = None
    port: int | None = None
    endpoint: str | None = None
    bucket: str | None = None
    log_file: str | None = None
    started_at: float | None = None


class ObjectStore(DetachedService):
    """A detached ``moto_server`` on ``127.0.0.1:port`` with one bucket.

    - ``home``: state directory (default ``state_dir()``); files go to ``home/s3/``.
    - ``port``: default 5000 if free, else any free port.
    - ``bucket``: created at start (kept if it exists), default ``kappa``.

    ``start()`` reuses a server already running for the same home (creating ``bucket`` on
    it if needed); as a context manager the server is stopped on exit only if this object
    started it.
    """

    name = "s3"
    marker = b"moto_server"
    error = ObjectStoreError

    def __init__(
        self,
        home: str | os.PathLike[str] | None = None,
        port: int | None = None,
        *,
        bucket: str = BUCKET,
        start_timeout: float = 60.0,
    ) -> None:
        self.home = state_dir(home)
        super().__init__(self.home / "s3", start_timeout)
        self.port = port
        self.bucket = bucket

    @property
    def catalog_db(self) -> Path:
        """The SQL catalog file of :meth:`iceberg_catalog` (removed when the store stops)."""
        return self.dir / "catalog.db"

    def endpoint(self) -> str | None:
        """``http://127.0.0.1:PORT`` of the running server, or None."""
        state = self._running_state()
        return str(state["endpoint"]) if state else None

    @property
    def storage(self) -> str:
        """The broker's ``--storage-engine`` for this store's bucket (``s3://BUCKET/``)."""
        return f"s3://{self.bucket}/"

    def iceberg_catalog(self, endpoint: str) -> dict[str, str]:
        """pyiceberg properties of a SQL catalog with its warehouse in this store's bucket."""
        return iceberg_catalog(endpoint, self.bucket, self.catalog_db)

    def start(self) -> str:
        """Start the server (or reuse the running one), create the bucket, return the endpoint."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with self._start_lock():
            state = self._running_state()
            if state is not None:
                endpoint = str(state["endpoint"])
                create_bucket(endpoint, self.bucket)
                log.info("s3 store already running: pid %s at %s", state["pid"], endpoint)
                return endpoint
            if self.port is not None and port_open(self.port):
                raise ObjectStoreError(
                    f"port {self.port} on {HOST} is already in use by another process: "
                    "give another --port, or none for a free one"
                )
            # a catalog left by a server that died without `stop` names objects that are gone
            self._drop_catalog()
            return self._on_a_port(self.port, DEFAULT_PORT, self._start_on)

    def _start_on(self, port: int) -> str:
        endpoint = f"http://{HOST}:{port}"
        self._launch(
            [moto_binary(), "-H", HOST, "-p", str(port)],
            {"port": port, "endpoint": endpoint, "bucket": self.bucket},
            lambda process: self._wait_ready(process, port, endpoint),
            cwd=self.dir,
        )
        log.info("s3 store listens at %s (bucket %s)", endpoint, self.bucket)
        return endpoint

    def _wait_ready(self, process: subprocess.Popen[bytes], port: int, endpoint: str) -> None:
        self._wait_listening(port, process, "moto_server")
        create_bucket(endpoint, self.bucket)

    def stop(self) -> bool:
        """Stop the server (its objects are gone with it) and remove the catalog naming them;
        True if one was stopped, False if none was running."""
        stopped = super().stop()
        if stopped:
            self._drop_catalog()
        return stopped

    def _drop_catalog(self) -> None:
        if self.catalog_db.exists():
            self.catalog_db.unlink()
            log.info("removed %s: the tables it named were in the stopped store", self.catalog_db)

    def status(self) -> ObjectStoreStatus:
        """Whether the server runs, with pid, port, endpoint and bucket."""
        state = self._running_state()
        if state is None:
            return ObjectStoreStatus(running=False, log_file=str(self.log_file))
        return ObjectStoreStatus(
            running=True,
            pid=int(state["pid"]),
            port=int(state["port"]),
            endpoint=str(state["endpoint"]),
            bucket=str(state["bucket"]),
            log_file=str(self.log_file),
            started_at=float(state["started"]),
        )
