"""An S3-compatible object store on loopback for tests: ``moto_server`` (the dev extras'
``moto[server]``) in a process of its own, so what it holds outlives a broker that stores
its topics there (``EmbeddedBroker(storage="s3://BUCKET/", env=store.env)``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from kappaplus.local.processes import free_port, port_open


class S3Store:
    """``moto_server`` on a free loopback port with one bucket; ``env`` is what a client
    (the tansu broker) needs to reach it. Data lives in the server's memory, as long as the
    process."""

    def __init__(self, directory: Path, bucket: str = "kappa") -> None:
        self.directory = directory
        self.bucket = bucket
        self.process: subprocess.Popen[bytes] | None = None
        self.env: dict[str, str] = {}

    def start(self, timeout: float = 60) -> dict[str, str]:
        binary = Path(sys.executable).parent / "moto_server"
        if not binary.exists():
            found = shutil.which("moto_server")
            if found is None:
                raise RuntimeError(
                    "no moto_server: install the dev extras (pip install -e '.[dev]')"
                )
            binary = Path(found)
        port = free_port()
        self.directory.mkdir(parents=True, exist_ok=True)
        log_file = self.directory / "s3.log"
        with open(log_file, "ab") as log:
            self.process = subprocess.Popen(
                [str(binary), "-H", "127.0.0.1", "-p", str(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not port_open(port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"moto_server did not start; see {log_file}")
            time.sleep(0.1)
        endpoint = f"http://127.0.0.1:{port}"
        create = urllib.request.Request(f"{endpoint}/{self.bucket}", method="PUT")
        urllib.request.urlopen(create, timeout=30).close()  # noqa: S310 - loopback http
        self.env = {
            "AWS_ENDPOINT": endpoint,
            "AWS_ACCESS_KEY_ID": "kappa",
            "AWS_SECRET_ACCESS_KEY": "kappa",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }
        return self.env

    @property
    def storage(self) -> str:
        """The broker's ``--storage-engine`` for this store's bucket."""
        return f"s3://{self.bucket}/"

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
