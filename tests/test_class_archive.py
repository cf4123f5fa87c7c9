"""The driver JVM's class archive: which option a local session gets, that a session started
with it maps Spark's classes from it and computes right, and that a damaged archive is
never installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kappaplus.core.class_archive import (
    ARCHIVE_ENV,
    QUIET,
    archive_key,
    archive_option,
    archive_path,
)
from kappaplus.local.class_archive import ArchiveBuildError, build_archive, check_archive
from kappaplus.session import local_defaults

BUILT = archive_path()
needs_archive = pytest.mark.skipif(
    (BUILT is None or not BUILT.is_file()) and not os.environ.get("CI"),
    reason="no class archive built on this machine (kappa jvm-archive)",
)  # in CI set-up builds it, so a missing archive fails these tests there


def test_the_option_follows_the_environment_and_the_callers_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = tmp_path / "made.jsa"
    made.write_bytes(b"x")
    monkeypatch.setenv(ARCHIVE_ENV, str(made))
    assert archive_option() == f"-XX:SharedArchiveFile={made} {QUIET}"
    java_options = local_defaults(tmp_path)["spark.driver.extraJavaOptions"]
    assert f"-XX:SharedArchiveFile={made}" in java_options
    # the caller's own choice of class sharing wins; none is added twice
    for own in (f"-XX:SharedArchiveFile={tmp_path}/x.jsa", "-XX:ArchiveClassesAtExit=/t.jsa"):
        monkeypatch.setenv("KAPPA_DRIVER_JAVA_OPTIONS", own)
        assert local_defaults(tmp_path)["spark.driver.extraJavaOptions"].count("Archive") == 1
    monkeypatch.delenv("KAPPA_DRIVER_JAVA_OPTIONS")
    monkeypatch.setenv(ARCHIVE_ENV, str(tmp_path / "missing.jsa"))
    assert archive_option() == ""
    monkeypatch.setenv(ARCHIVE_ENV, "off")
    assert archive_path() is None and archive_option() == ""
    assert "SharedArchiveFile" not in local_defaults(tmp_path)["spark.driver.extraJavaOptions"]


def test_the_key_changes_with_what_changes_the_class_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ARCHIVE_ENV, raising=False)
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    before = archive_key()
    assert archive_key() == before, "stable"
    monkeypatch.setenv("SPARK_CONF_DIR", "/etc/spark/conf")
    assert archive_key() != before
    monkeypatch.setenv("XDG_CACHE_HOME", "/elsewhere")
    assert str(archive_path()).startswith("/elsewhere/kappaplus/jvm-")


def test_the_key_changes_with_the_projects_jar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kappaplus.jars

    jar = tmp_path / "kappaplus-jvm.jar"
    jar.write_bytes(b"one")
    monkeypatch.setattr(kappaplus.jars, "jvm_jar", lambda: jar)
    first = archive_key()
    jar.write_bytes(b"rebuilt")  # on a local driver's class path: the JVM checks it
    assert archive_key() != first


def test_older_archives_beyond_the_kept_few_are_removed(tmp_path: Path) -> None:
    from kappaplus.local.class_archive import KEPT_ARCHIVES, prune_archives

    archives = []
    for n in range(5):
        path = tmp_path / f"jvm-{n:016x}.jsa"
        path.write_bytes(b"x")
        os.utime(path, (1_000_000 + n, 1_000_000 + n))
        archives.append(path)
    (tmp_path / "metastore-template").mkdir()
    built = archives[0]  # the oldest by time, but the one just built
    removed = prune_archives(built)
    assert sorted(removed) == sorted(archives[1 : 5 - (KEPT_ARCHIVES - 1)])
    assert sorted(tmp_path.iterdir()) == sorted(
        [built, *archives[5 - (KEPT_ARCHIVES - 1) :], tmp_path / "metastore-template"]
    )


def test_an_archive_that_cannot_be_written_is_said_in_one_line(tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    with pytest.raises(ArchiveBuildError, match=rf"cannot create {blocked}/cache .*{ARCHIVE_ENV}"):
        build_archive(blocked / "cache" / "jvm.jsa")


@pytest.fixture(scope="module")
def classpath(spark) -> str:  # type: ignore[no-untyped-def]
    """The driver's class path as Spark's launcher built it (the archive records it)."""
    return str(spark._jvm.System.getProperty("java.class.path"))


@needs_archive
def test_a_damaged_archive_is_refused(tmp_path: Path, classpath: str) -> None:
    """The check before installing: the built archive maps; the same file cut short (a
    build killed while writing) or altered is refused -- started with it, a JVM can crash."""
    assert BUILT is not None
    assert check_archive(BUILT, classpath) is None
    data = BUILT.read_bytes()
    short = tmp_path / "short.jsa"
    short.write_bytes(data[: len(data) // 3])
    assert check_archive(short, classpath) is not None
    altered = tmp_path / "altered.jsa"
    middle = len(data) // 2
    flipped = bytes(b ^ 0xFF for b in data[middle : middle + 64])
    altered.write_bytes(data[:middle] + flipped + data[middle + 64 :])
    assert check_archive(altered, classpath) is not None


PROBE = """
import sys
from pathlib import Path
from kappaplus.core.jvm import shutdown_jvm
from kappaplus.session import create_session, stop_session
home = Path(sys.argv[1])
spark = create_session("archive-probe", home=home)
spark.range(1000).selectExpr("id", "id % 7 as k").write.saveAsTable("probe")
print(sorted(tuple(r) for r in spark.sql("select k, count(*) from probe group by k").collect()))
stop_session(spark)
shutdown_jvm()
"""


@needs_archive
def test_a_local_session_maps_sparks_classes_from_the_archive(tmp_path: Path) -> None:
    """A session started as every local command starts one loads most of its classes from the
    archive (the JVM's own class-load log says where each came from) and computes right."""
    loads = tmp_path / "classes.log"
    env = dict(os.environ)
    env.pop(ARCHIVE_ENV, None)
    env["KAPPA_DRIVER_JAVA_OPTIONS"] = f"-Xlog:class+load=info:file={loads}"
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "home")],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == str(
        sorted((k, len(range(k, 1000, 7))) for k in range(7))
    )
    lines = loads.read_text().splitlines()
    from_archive = sum("source: shared objects file (top)" in line for line in lines)
    assert from_archive > 10_000, f"{from_archive} of {len(lines)} classes from the archive"
