"""Session-wide fixtures: one real SparkSession (Hive support, embedded metastore)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_plugins = ["kafka_fixtures"]

_HOME = Path(tempfile.mkdtemp(prefix="kappa-test-"))
os.environ["KAPPA_HOME"] = str(_HOME)
# The short-lived Spark JVMs the tests start (each `kappa` process's) with the quick JIT
# tier and the serial GC: a few seconds of small inputs never pay back the optimizing
# compiler's CPU on 2 cores (8-9% less wall time for short test sessions, two pairs). The
# session fixture's JVM lives for the whole run and keeps the default JIT. Every local
# session also maps Spark's classes from the driver JVM's class archive that `make setup`
# builds (kappaplus.core.class_archive: ~4-5 s less start-up per JVM).
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
os.environ.setdefault("KAPPA_DRIVER_JAVA_OPTIONS", QUICK_JVM)


@pytest.fixture(scope="session")
def kappa_home() -> Iterator[Path]:
    """The state directory of this test session (warehouse, metastore, checkpoints)."""
    yield _HOME


@pytest.fixture(scope="session")
def spark(kappa_home: Path):  # type: ignore[no-untyped-def]
    """The one SparkSession of the test session."""
    from kappaplus.local.metastore import LOCAL_DISCOVERY
    from kappaplus.session import create_session, stop_session

    with pytest.MonkeyPatch.context() as env:
        env.delenv("KAPPA_DRIVER_JAVA_OPTIONS", raising=False)  # not for this long-lived JVM
        session = create_session(
            "kappaplus-tests", home=kappa_home, metastore_discovery=LOCAL_DISCOVERY
        )
    yield session
    stop_session(session)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remove this test session's state directory, whichever fixtures ran."""
    shutil.rmtree(_HOME, ignore_errors=True)


@pytest.fixture()
def scratch(tmp_path: Path) -> Path:
    """A per-test directory for checkpoints and side outputs."""
    return tmp_path
