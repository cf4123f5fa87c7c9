"""The project's own JVM code, built at set-up (``scripts/build_jvm.sh``) from ``jvm/src``.

``kappaplus-jvm.jar`` holds the JVM read path of the Hive streaming source
(``kappa_hive_jvm``). It is not in the repository: set-up compiles it against the jars of the
installed pyspark wheel. Without it (no ``javac``, or a cluster that does not ship it) the
Python reader is used.
"""

from __future__ import annotations

from pathlib import Path

JAR_NAME = "kappaplus-jvm.jar"


def jvm_jar() -> Path | None:
    """The built jar, or None when set-up did not build it."""
    path = Path(__file__).with_name(JAR_NAME)
    return path if path.is_file() else None
