"""The driver JVM's class archive (Java's class data sharing): where it is, and the option
that makes a local driver start from it.

Why. A local ``kappa run`` spends seconds before its first micro-batch loading and
verifying the same ~20,000 classes of Spark, Hive, Derby, Parquet and RocksDB every time.
A *dynamic class archive* (JDK 13+: ``-XX:ArchiveClassesAtExit`` writes one when a JVM
exits, ``-XX:SharedArchiveFile`` maps it at start) holds them parsed and verified: a run's
first micro-batch comes sooner, with the same peak memory (``docs/benchmarks.md``).

An archive is only valid for the JVM build and the exact class path it was written with
(Spark's jars, in their directory order, with their sizes and times). The JVM checks both
and starts without it when either differs (quietly: :data:`QUIET`), so a stale archive
costs only the time it would have saved. A *damaged* file is another matter (the
JVM can crash mapping it), so archives are written under a temporary name, checked, and
renamed into place (:mod:`kappaplus.local.class_archive` builds them; ``kappa jvm-archive``
and ``make setup`` run it).

Where: ``$KAPPA_JVM_ARCHIVE`` when it names a file, ``off`` for never; otherwise
the kappaplus cache (:func:`~kappaplus.core.settings.cache_dir`: ``$KAPPA_CACHE_DIR``,
``$XDG_CACHE_HOME/kappaplus`` or ``~/.cache/kappaplus``), one file per Java and
Spark installation (:func:`archive_key`). Only a local master's driver uses it: on a
cluster the driver's JVM options are the cluster's (``spark-defaults.conf``).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

from kappaplus.core.jvm import spark_home
from kappaplus.core.settings import cache_dir

ARCHIVE_ENV = "KAPPA_JVM_ARCHIVE"
"""``off``: never use a class archive; a path: use that file (if it exists)."""

ARCHIVE_OFF = "off"

QUIET = "-Xlog:cds*=off"
"""An archive the JVM cannot use (another class path) is skipped without the JVM's
warning, which would land in the output of every command and library caller."""

# the JVM options that choose class sharing themselves (the caller's, or a training run's)
_CHOSEN = re.compile(r"-XX:(SharedArchiveFile|ArchiveClassesAtExit)=|-Xshare:off")

# environment that changes the driver's class path (spark-class / load-spark-env.sh)
_CLASS_PATH_ENV = (
    "SPARK_CONF_DIR",
    "HADOOP_CONF_DIR",
    "YARN_CONF_DIR",
    "SPARK_DIST_CLASSPATH",
    "SPARK_HOME",
)


def java_executable() -> Path | None:
    """The ``java`` Spark's launcher runs: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        return Path(home) / "bin" / "java"
    found = shutil.which("java")
    return Path(found) if found else None


def archive_key() -> str:
    """A short digest of what an archive depends on: the Java installation (its real path,
    size and time), Spark's jar directory (each jar's name, size and time), the project's
    own jar (on a local driver's class path) and the environment that changes the class
    path. A new Java or Spark gets a new file instead of
    a stale one.

    >>> len(archive_key())
    16
    """
    digest = hashlib.sha256()
    java = java_executable()
    if java is not None and java.exists():
        real = java.resolve()
        stat = real.stat()
        digest.update(f"java {real} {stat.st_size} {stat.st_mtime_ns}\n".encode())
        libjvm = real.parent.parent / "lib" / "server" / "libjvm.so"
        if libjvm.exists():
            lib = libjvm.stat()
            digest.update(f"libjvm {lib.st_size} {lib.st_mtime_ns}\n".encode())
    jars = spark_home() / "jars"
    if jars.is_dir():
        for entry in sorted(os.scandir(jars), key=lambda e: e.name):
            stat = entry.stat()
            digest.update(f"jar {entry.name} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    from kappaplus.jars import jvm_jar  # a leaf: the path of the project's own jar

    jar = jvm_jar()
    if jar is not None:  # on a local driver's class path (kappaplus.session)
        stat = jar.stat()
        digest.update(f"kappaplus {jar.resolve()} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    for name in _CLASS_PATH_ENV:
        digest.update(f"env {name}={os.environ.get(name, '')}\n".encode())
    return digest.hexdigest()[:16]


def archive_path() -> Path | None:
    """The archive for this Java and Spark (it may not exist yet); None when
    ``$KAPPA_JVM_ARCHIVE`` is ``off``."""
    chosen = os.environ.get(ARCHIVE_ENV, "").strip()
    if chosen.lower() == ARCHIVE_OFF:
        return None
    if chosen:
        return Path(chosen).expanduser()
    return cache_dir() / f"jvm-{archive_key()}.jsa"


def archive_option(java_options: str = "") -> str:
    """The driver JVM option that maps the archive, or ``""``: no archive built, archives
    turned off, or ``java_options`` already choosing class sharing themselves.

    >>> archive_option("-XX:SharedArchiveFile=/elsewhere.jsa")
    ''
    """
    if _CHOSEN.search(java_options):
        return ""
    path = archive_path()
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} {QUIET}"
