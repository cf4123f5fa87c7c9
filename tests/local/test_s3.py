"""The embedded object store (:class:`~kappaplus.local.s3.ObjectStore`, moto_server): one
process per state directory found again from its pid file, buckets created on it, errors
that name the port or the package, and the catalog of its lost objects removed at stop."""

from __future__ import annotations

import socket
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from kappaplus.core.errors import ObjectStoreError
from kappaplus.local import s3
from kappaplus.local.processes import free_port, pid_alive, port_open
from kappaplus.local.s3 import ObjectStore


def bucket_exists(endpoint: str, bucket: str) -> bool:
    try:
        urllib.request.urlopen(f"{endpoint}/{bucket}", timeout=10).close()  # noqa: S310
        return True
    except urllib.error.HTTPError as exc:
        assert exc.code == 404, exc
        return False


def test_start_reuse_buckets_and_stop(tmp_path: Path) -> None:
    store = ObjectStore(tmp_path, free_port())
    try:
        endpoint = store.start()
        first = store.status()
        assert first.running and first.endpoint == endpoint and first.bucket == "kappa"
        assert bucket_exists(endpoint, "kappa") and not bucket_exists(endpoint, "other")
        # another object of the same home reuses the process, and creates its bucket there
        assert ObjectStore(tmp_path, bucket="other").start() == endpoint
        assert ObjectStore(tmp_path).status().pid == first.pid
        assert bucket_exists(endpoint, "other")
        store.catalog_db.write_bytes(b"")  # as pyiceberg's SQL catalog would leave it
    finally:
        assert store.stop() is True
    assert first.pid is not None and not pid_alive(first.pid)
    assert not port_open(first.port or 0)
    assert not store.catalog_db.exists(), "the catalog named objects that are gone"
    assert store.stop() is False and not store.status().running


def test_a_taken_port_is_named(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ObjectStoreError, match=f"port {port} .* in use.*--port"):
            ObjectStore(tmp_path, port).start()
    assert not ObjectStore(tmp_path).status().running


def test_no_moto_server_names_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ObjectStoreError, match=r"pip install 'kappaplus\[s3\]'"):
        s3.moto_binary()
