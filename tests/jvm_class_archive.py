"""A class-data-sharing archive of the Spark driver JVM for the tests' short-lived JVMs.

Every ``kappa`` process a test starts spends most of its start-up loading and verifying the
same ~15,000 Spark, Hive and Parquet classes. A dynamic CDS archive (JDK 13+,
``-XX:ArchiveClassesAtExit`` once, ``-XX:SharedArchiveFile`` after) maps them ready-made:
a local session starts in ~6 s instead of ~10 s on 2 cores (two pairs).

``archive_options()`` returns the JVM options that use the archive, building it first (one
small Spark session with Hive, a table, a streaming query) when this JDK, pyspark and jar set
have none yet; ``None`` when it cannot be built (the tests then run without it; the failure
is kept in a ``.failed`` file next to the archive's path and not retried while it exists).
The archive lives in the user's cache directory, keyed by what the JVM checks it against,
so concurrent test sessions and later runs share it; a JVM whose class path differs ignores
it, quietly (``-Xlog:cds*=off``: the JVM's CDS warnings would land in the output tests read).

    python tests/jvm_class_archive.py --workload HOME   # what runs under ArchiveClassesAtExit
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

QUIET = "-Xlog:cds*=off"


def _key(java_options: str) -> str:
    """What the archive must match: the JDK, pyspark's jars and the options it is used with."""
    import pyspark

    jars = sorted(p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60)
    text = "\n".join([java.stderr, pyspark.__version__, java_options, *jars])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "kappaplus-tests"


def archive_options(java_options: str) -> str | None:
    """JVM options that map the archive for JVMs started with ``java_options`` (built now if
    missing); None if it could not be built."""
    try:
        cache = _cache_dir()
        cache.mkdir(parents=True, exist_ok=True)
        archive = cache / f"spark-driver-{_key(java_options)}.jsa"
        failed = archive.with_suffix(".failed")  # tried once: not again in every session
        with open(cache / "build.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another test session may be building it
            if not archive.exists() and not failed.exists():
                try:
                    _build(archive, java_options)
                except subprocess.SubprocessError as exc:
                    failed.write_text(f"{exc}\n{getattr(exc, 'stderr', b'')[-4000:]!r}\n")
    except (OSError, subprocess.SubprocessError):
        return None
    if not archive.exists():
        return None
    return f"-XX:SharedArchiveFile={archive} {QUIET}"


def _build(archive: Path, java_options: str) -> None:
    """Run the workload under ``-XX:ArchiveClassesAtExit``; move the archive into place."""
    with tempfile.TemporaryDirectory(prefix="kappa-cds-") as tmp:
        partial = Path(tmp) / "archive.jsa"
        env = {k: v for k, v in os.environ.items() if not k.startswith("KAPPA_")}
        env["KAPPA_DRIVER_JAVA_OPTIONS"] = (
            f"{java_options} -XX:ArchiveClassesAtExit={partial} {QUIET}"
        )
        env["KAPPA_HOME"] = str(Path(tmp) / "home")
        subprocess.run(
            [sys.executable, __file__, "--workload", str(Path(tmp) / "home")],
            env=env,
            capture_output=True,
            timeout=600,
            check=True,
        )
        if partial.exists():
            os.replace(partial, archive)


def _workload(home: Path) -> None:
    """What a test's ``kappa`` process does, small: a Hive table written and read, and a
    streaming query over its files (the classes loaded are the ones archived)."""
    from kappaplus.session import create_session, stop_session

    spark = create_session("kappa-cds-archive", home=home)
    try:
        spark.range(100).selectExpr("id", "cast(id as timestamp) as ts").write.mode(
            "overwrite"
        ).partitionBy("id").saveAsTable("cds_probe")
        spark.table("cds_probe").groupBy().count().collect()
        files = spark.readStream.schema("ts timestamp, id long").parquet(
            str(home / "warehouse" / "cds_probe")
        )
        query = (
            files.withWatermark("ts", "1 minute")
            .groupBy(files.id)
            .count()
            .writeStream.format("memory")
            .queryName("cds_probe_counts")
            .outputMode("update")
            .option("checkpointLocation", str(home / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
    finally:
        stop_session(spark)


if __name__ == "__main__":
    with contextlib.suppress(IndexError):
        if sys.argv[1] == "--workload":
            _workload(Path(sys.argv[2]))
