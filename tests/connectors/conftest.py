"""Fixtures of the connector tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from standalone_cluster import Cluster, free_port, start_daemon


@pytest.fixture(scope="session")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A master and one worker (1 core, 1 GiB) on loopback, on free ports: one for the
    session (a daemon start costs 8-12 s), as the tests only submit applications to it;
    killed with the executors it forked at the end, pass or fail."""
    home = tmp_path_factory.mktemp("standalone")
    (home / "work").mkdir()
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    master = start_daemon(
        "master",
        [
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            "0",
        ],
        home,
        "I have been elected leader",
    )
    try:
        worker = start_daemon(
            "worker",
            [
                "org.apache.spark.deploy.worker.Worker",
                url,
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--webui-port",
                "0",
                "--work-dir",
                str(home / "work"),
            ],
            home,
            "Successfully registered with master",
        )
    except BaseException:
        master.stop()
        raise
    cluster = Cluster(url, home, master, worker)
    try:
        yield cluster
    finally:
        worker.stop()
        master.stop()
