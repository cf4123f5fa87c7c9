"""The driver JVM's settings a session starts it with: memory, logging, this interpreter for
Python workers, its garbage collector, its class archive; locally (:func:`local_defaults`)
or on a cluster, where ``spark-defaults.conf`` keeps its say
(:func:`cluster_driver_java_options`)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from kappaplus.core.class_archive import archive_option
from kappaplus.core.jvm import spark_home

LOG4J_CONFIG = Path(__file__).parent / "conf" / "log4j2.properties"
"""Driver logging: Spark's defaults at WARN without the warnings every run triggers by design."""


#: Up to this many local cores the driver JVM runs the serial garbage collector (unless
#: ``KAPPA_DRIVER_JAVA_OPTIONS`` picks one): G1, the JVM's choice from 2 cores up, grew a
#: backfill's heap further than the serial collector in the same time; with two task threads
#: a parallel collector has no spare core to run on (docs/benchmarks.md).
SERIAL_GC_MAX_CORES = 2

SERIAL_GC = "-XX:+UseSerialGC -XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=30"
"""The serial collector, and a heap sized closer to its live data after each full
collection (10-30% free instead of 40-70%): a backfill's live heap peaks mid-slice and the
default ratios kept that peak's room for the rest of the run: a lower peak in the same time
(docs/benchmarks.md)."""


def collector_options(cores: int, java_options: str) -> str:
    """The garbage collector options kappaplus adds for a local master of ``cores`` cores:
    :data:`SERIAL_GC` up to :data:`SERIAL_GC_MAX_CORES`, nothing when ``java_options``
    already choose a collector (the JVM refuses two) or on more cores (G1 stays).

    >>> collector_options(2, "").split()[0], collector_options(8, "")
    ('-XX:+UseSerialGC', '')
    >>> collector_options(1, "-XX:+UseG1GC -Xss2m")
    ''
    """
    if cores > SERIAL_GC_MAX_CORES or re.search(r"-XX:\+Use\w*GC\b", java_options):
        return ""
    return SERIAL_GC


DRIVER_JAVA_OPTION_KEYS = ("spark.driver.defaultJavaOptions", "spark.driver.extraJavaOptions")
"""The settings whose JVM options Spark's launcher gives the driver JVM (the first is
prepended to the second)."""


def spark_defaults() -> dict[str, str]:
    """The settings of the ``spark-defaults.conf`` Spark's launcher reads for a driver this
    process starts (``$SPARK_CONF_DIR``, else ``$SPARK_HOME/conf``, else pyspark's own
    ``conf``); empty when there is none. A Java properties file: ``key value`` or
    ``key=value``, ``#`` and ``!`` comments."""
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    path = (Path(conf_dir) if conf_dir else spark_home() / "conf") / "spark-defaults.conf"
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    settings: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        match = re.match(r"(\S+?)\s*(?:[=:]\s*|\s+)(.*)$", line)
        if match:
            settings[match.group(1)] = match.group(2).strip()
        else:
            settings[line] = ""
    return settings


def driver_cores() -> int:
    """The cores this process may run on (where a driver it starts runs, in client mode)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def cluster_driver_java_options(
    conf: Mapping[str, str] | None, defaults: Mapping[str, str], cores: int | None = None
) -> str | None:
    """``spark.driver.extraJavaOptions`` for a cluster session whose driver JVM this process
    starts: the serial collector (:func:`collector_options`) on a driver machine of up to
    :data:`SERIAL_GC_MAX_CORES` cores, before the options the caller (``conf``) or
    ``spark-defaults.conf`` (``defaults``) already give, which stay; None when either
    chooses a collector itself or the machine has more cores (``cores``, default
    :func:`driver_cores`).

    The driver of a cluster application runs the scheduler and the streaming engine, not
    tasks; with G1 a backfill's driver heap grew with the range (docs/benchmarks.md).

    >>> cluster_driver_java_options({}, {"spark.driver.extraJavaOptions": "-XX:+UseG1GC"}, 2)
    >>> cluster_driver_java_options({}, {"spark.driver.extraJavaOptions": "-Da=1"}, 2).split()
    ['-XX:+UseSerialGC', '-XX:MinHeapFreeRatio=10', '-XX:MaxHeapFreeRatio=30', '-Da=1']
    >>> cluster_driver_java_options({}, {}, 8)
    """
    conf = conf or {}
    chosen = " ".join(conf.get(k) or defaults.get(k) or "" for k in DRIVER_JAVA_OPTION_KEYS)
    collector = collector_options(driver_cores() if cores is None else cores, chosen)
    if not collector:
        return None
    key = "spark.driver.extraJavaOptions"
    existing = conf.get(key) or defaults.get(key) or ""
    return f"{collector} {existing}".strip()


def local_defaults(home: Path, cores: int = 2) -> dict[str, str]:
    """Settings for a local-mode session of ``cores`` cores: small, quiet, this interpreter
    for Python workers, the serial collector on up to 2 cores (:func:`collector_options`),
    the driver JVM started from its class archive when one was built
    (:mod:`kappaplus.core.class_archive`: ``kappa jvm-archive``, ``make setup``).
    ``KAPPA_DRIVER_MEMORY`` (default ``2g``) and ``KAPPA_DRIVER_JAVA_OPTIONS`` (added to the
    driver JVM's options) tune the driver.

    Never applied on a cluster, where they would override ``spark-defaults.conf`` (a
    cluster driver's collector: :func:`cluster_driver_java_options`).
    """
    java_options = os.environ.get("KAPPA_DRIVER_JAVA_OPTIONS", "").strip()
    return {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.python.worker.reuse": "true",
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.driver.memory": os.environ.get("KAPPA_DRIVER_MEMORY", "2g"),
        "spark.driver.extraJavaOptions": " ".join(
            option
            for option in (
                f"-Dderby.system.home={home}",
                f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()}",
                collector_options(cores, java_options),
                archive_option(java_options),
                # e.g. the test suite's quick JIT tier and serial GC (tests/conftest.py)
                java_options,
            )
            if option
        ),
    }
