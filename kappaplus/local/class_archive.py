"""Build the driver JVM's class archive (:mod:`kappaplus.core.class_archive`): one training
run writes it, a check proves it maps, a rename puts it in place.

The training run is a child process (``python -m kappaplus.local.class_archive --train``)
doing what a local ``kappa run`` does, so the archive holds the classes runs load: a
session with the embedded Hive catalog (in a temporary state directory), a small rider
events table written to the lake, the sessionization example backfilled from it (the JVM
reader, RocksDB state, the Hive sink, the audit table), then the JVM stopped cleanly, which
is when it writes the archive (``-XX:ArchiveClassesAtExit``). About a minute on 2 cores.

The file is written under a temporary name next to its final place and renamed only after
a JVM started with it on the training run's class path and ``-XX:+VerifySharedSpaces``
(the archive's checksums) came up: a truncated or damaged archive is never installed, as
the JVM can crash mapping one.

>>> from kappaplus.local.class_archive import build_archive  # doctest: +SKIP
>>> build_archive()  # doctest: +SKIP
PosixPath('/root/.cache/kappaplus/jvm-3f1c0a9e5b7d2c41.jsa')
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from kappaplus.core.class_archive import (
    ARCHIVE_ENV,
    ARCHIVE_OFF,
    archive_path,
    java_executable,
)
from kappaplus.core.errors import ConfigError, KappaError
from kappaplus.local.processes import log_tail

log = logging.getLogger(__name__)

TRAINING_TIMEOUT_S = 900.0
_START, _END = "2024-03-01T00:00:00", "2024-03-01T06:00:00"


class ArchiveBuildError(KappaError):
    """The training run or the check of its archive failed; nothing was installed."""

    exit_code = 1


def build_archive(target: Path | None = None, *, force: bool = False) -> Path:
    """Build the class archive at ``target`` (default :func:`archive_path`) unless it
    exists (or ``force``); return its path. Raises :class:`ArchiveBuildError` naming the
    training run's log when the run or the check fails, :class:`ConfigError` when
    ``$KAPPA_JVM_ARCHIVE`` is ``off``."""
    path = target or archive_path()
    if path is None:
        raise ConfigError(ARCHIVE_ENV, ARCHIVE_OFF, "class archives are turned off: unset it")
    if path.is_file() and not force:
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ArchiveBuildError(
            f"cannot create {path.parent} for the class archive ({exc.strerror}); "
            f"set {ARCHIVE_ENV} to a writable path or XDG_CACHE_HOME"
        ) from exc
    scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    classpath = scratch.with_suffix(".classpath")
    try:
        with tempfile.TemporaryDirectory(prefix="kappa-jvm-archive-") as home:
            training_log = Path(home) / "training.log"
            _train(scratch, classpath, Path(home), training_log)
            if not scratch.is_file():
                raise ArchiveBuildError(
                    f"the training run wrote no class archive ({scratch}); its output: "
                    f"{_tail(training_log)}"
                )
            problem = check_archive(scratch, classpath.read_text())
            if problem:
                raise ArchiveBuildError(f"the class archive built does not map: {problem}")
        os.replace(scratch, path)
    finally:
        for leftover in (scratch, classpath):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
    log.info("class archive for the driver JVM: %s (%.0f MB)", path, path.stat().st_size / 2**20)
    if target is None:
        prune_archives(path)
    return path


KEPT_ARCHIVES = 3
"""Archives kept in the cache directory, the newest first: one per Java, Spark and
project-jar build (:func:`~kappaplus.core.class_archive.archive_key`), large files, so a
rebuilt jar or an upgraded Spark does not leave its old archive behind for ever; a few are
kept for other installations sharing the cache."""


def prune_archives(built: Path) -> list[Path]:
    """Remove the default directory's archives beyond the :data:`KEPT_ARCHIVES` newest
    (``built`` always stays); the paths removed."""
    others = sorted(
        (p for p in built.parent.glob("jvm-*.jsa") if p != built),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    removed = []
    for old in others[KEPT_ARCHIVES - 1 :]:
        with contextlib.suppress(OSError):
            old.unlink()
            removed.append(old)
            log.info("removed an older class archive: %s", old)
    return removed


def _train(scratch: Path, classpath: Path, home: Path, training_log: Path) -> None:
    env = dict(os.environ)
    env.pop("KAPPA_METASTORE_URI", None)  # the embedded catalog of the temporary home
    env.update(
        {
            ARCHIVE_ENV: ARCHIVE_OFF,  # no archive on top of an archive
            "KAPPA_HOME": str(home),
            "KAPPA_DRIVER_JAVA_OPTIONS": " ".join(
                option
                for option in (
                    env.get("KAPPA_DRIVER_JAVA_OPTIONS", "").strip(),
                    f"-XX:ArchiveClassesAtExit={scratch}",
                )
                if option
            ),
        }
    )
    command = [
        sys.executable,
        "-m",
        "kappaplus.local.class_archive",
        "--train",
        str(home),
        "--classpath-file",
        str(classpath),
    ]
    with training_log.open("wb") as output:
        try:
            done = subprocess.run(
                command, env=env, stdout=output, stderr=subprocess.STDOUT,
                timeout=TRAINING_TIMEOUT_S, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise ArchiveBuildError(
                f"the training run did not end within {TRAINING_TIMEOUT_S:.0f} s"
            ) from exc
    if done.returncode != 0:
        raise ArchiveBuildError(
            f"the training run failed (exit {done.returncode}): {_tail(training_log)}"
        )


def _tail(path: Path) -> str:
    return " | ".join(log_tail(path, 5).splitlines()) or "(no output)"


def check_archive(archive: Path, classpath: str) -> str | None:
    """None when a JVM maps ``archive`` on ``classpath`` with its checksums verified
    (``-Xshare:on`` refuses to start otherwise), else what the JVM said."""
    java = java_executable()
    if java is None:
        return "no java found (JAVA_HOME, PATH)"
    command = [
        str(java),
        f"-XX:SharedArchiveFile={archive}",
        "-Xshare:on",
        "-XX:+VerifySharedSpaces",
        "-XX:-CreateCoredumpOnCrash",
        "-cp",
        classpath,
        "-version",
    ]
    with tempfile.TemporaryDirectory(prefix="kappa-archive-check-") as here:
        # a damaged archive can crash the JVM: its hs_err file goes here, not the caller's cwd
        done = subprocess.run(
            command, cwd=here, capture_output=True, text=True, timeout=120, check=False
        )
    if done.returncode == 0:
        return None
    said = (done.stdout + done.stderr).strip().splitlines()
    return " | ".join(said[-3:]) or f"java exited with {done.returncode}"


def train(home: Path, classpath_file: Path) -> None:
    """The training run (in the child process): what a local backfill loads."""
    import tomllib
    from importlib import resources

    from kappaplus.config.loading import config_from_dict
    from kappaplus.core.jvm import shutdown_jvm
    from kappaplus.examples import sessionization
    from kappaplus.examples.generate import RIDER_EVENT_DDL, rider_events, write_table
    from kappaplus.runtime.options import RunOptions
    from kappaplus.runtime.runner import run_job
    from kappaplus.session import create_session, stop_session
    from kappaplus.state_store import STATE_STORE_SETTINGS

    spark = create_session(
        "kappa-jvm-archive", master="local[2]", home=home, defaults=STATE_STORE_SETTINGS
    )
    try:
        classpath_file.write_text(spark._jvm.System.getProperty("java.class.path"))  # type: ignore[union-attr]
        write_table(
            spark,
            "rider_events",
            rider_events(riders=30, start=_START, hours=6, seed=1),
            RIDER_EVENT_DDL,
        )
        raw = tomllib.loads(
            resources.files("kappaplus.examples").joinpath("sessionization.toml").read_text()
        )
        raw["checkpoint_dir"] = str(home / "checkpoints")
        run_job(
            spark,
            sessionization.JOB,
            config_from_dict(raw),
            RunOptions(mode="backfill", start=_START, end=_END, progress=False),  # type: ignore[arg-type]
        )
    finally:
        stop_session(spark)
        shutdown_jvm(timeout=120)  # the archive is written as the JVM exits


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m kappaplus.local.class_archive",
        description="Build the driver JVM's class archive (what `kappa jvm-archive` runs).",
    )
    parser.add_argument("--train", metavar="HOME", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--classpath-file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--force", action="store_true", help="build again even if present")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.train is not None:
        train(args.train, args.classpath_file)
        return
    print(build_archive(force=args.force))


if __name__ == "__main__":
    main()
