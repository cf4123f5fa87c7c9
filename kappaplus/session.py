"""The session factory: one call returns a SparkSession ready for kappaplus.

Local mode with Spark's built-in Hive support; production settings (master URL, metastore
URI, any Spark conf) pass through unchanged. The Hive metastore is, in this order: the
``metastore_uri`` argument, ``$KAPPA_METASTORE_URI``, the local metastore server of the
state directory if one runs (``kappa up`` / ``kappa metastore start``), else an embedded
Derby database that only one process at a time can open.

>>> from kappaplus.session import create_session
>>> spark = create_session("my-job")                      # doctest: +SKIP
>>> spark = create_session(
...     "my-job",
...     master="spark://10.0.0.5:7077",
...     metastore_uri="thrift://metastore:9083",
... )  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from kappaplus.local.metastore import check_embedded_free, discover, embedded_database
from kappaplus.settings import state_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DEFAULT_MASTER = "local[2]"
LOG4J_CONFIG = Path(__file__).parent / "conf" / "log4j2.properties"
"""Driver logging: Spark's defaults at WARN without the warnings every run triggers by design."""


def _python_env() -> None:
    # Python data sources run in worker processes; they must use this interpreter, which
    # has pyarrow and kappaplus installed, or they fail with "Python worker failed to
    # connect back".
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")


def hive_conf(home: Path, metastore_uri: str | None = None) -> dict[str, str]:
    """Spark settings for the built-in Hive catalog rooted in the state directory ``home``.

    With ``metastore_uri`` (``thrift://host:port``) the session talks to a metastore server
    instead of opening the embedded Derby database, which allows several processes at once.
    """
    warehouse = home / "warehouse"
    warehouse.mkdir(parents=True, exist_ok=True)
    conf = {
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": str(warehouse),
        "spark.hadoop.hive.metastore.warehouse.dir": str(warehouse),
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={home}",
    }
    if metastore_uri:
        conf["spark.hadoop.hive.metastore.uris"] = metastore_uri
    else:
        metastore = embedded_database(home)
        conf["spark.hadoop.javax.jdo.option.ConnectionURL"] = (
            f"jdbc:derby:;databaseName={metastore};create=true"
        )
    return conf


METASTORE_URI_ENV = "KAPPA_METASTORE_URI"
# Spark settings with which the caller chose the metastore itself (no discovery then).
_METASTORE_KEYS = (
    "spark.hadoop.hive.metastore.uris",
    "spark.hadoop.javax.jdo.option.ConnectionURL",
)


def resolve_metastore_uri(
    home: Path,
    metastore_uri: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> str | None:
    """The metastore server a session of state directory ``home`` uses; None: embedded Derby.

    ``metastore_uri``, else ``$KAPPA_METASTORE_URI``, else -- unless ``conf`` sets the
    metastore itself -- the local server of ``home`` if it runs (found from its status
    file, pid and port; no JVM is started). Logs at INFO when it picks the local server.
    """
    explicit = metastore_uri or os.environ.get(METASTORE_URI_ENV)
    if explicit:
        return explicit
    if _sets_metastore(conf):
        return None
    found = discover(home)
    if found:
        note = ""
        if embedded_database(home).is_dir():
            note = (
                f" (the embedded metastore at {embedded_database(home)} is a separate catalog:"
                " tables registered there are not visible through the server)"
            )
        log.info("using the local metastore server at %s%s", found, note)
    return found


def _sets_metastore(conf: Mapping[str, str] | None) -> bool:
    """Whether the caller's Spark settings choose the metastore (server or database)."""
    return conf is not None and any(key in conf for key in _METASTORE_KEYS)


_LOCAL_MASTER = re.compile(r"^local(?:\[(\*|\d+)(?:\s*,\s*\d+)?\])?$")


def local_cores(master: str) -> int | None:
    """Executor cores of a local master (``local``, ``local[N]``, ``local[*]``,
    ``local[N, retries]``), or None for a cluster master.

    >>> local_cores("local[2]"), local_cores("local"), local_cores("spark://h:7077")
    (2, 1, None)
    """
    found = _LOCAL_MASTER.match(master.strip())
    if found is None:
        return None
    cores = found.group(1)
    if cores is None:
        return 1
    return os.cpu_count() or 1 if cores == "*" else max(1, int(cores))


def _has_active_context() -> bool:
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


def create_session(
    app_name: str = "kappaplus",
    *,
    master: str | None = None,
    home: str | os.PathLike[str] | None = None,
    conf: Mapping[str, str] | None = None,
    hive: bool = True,
    metastore_uri: str | None = None,
) -> SparkSession:
    """Return a SparkSession configured for kappaplus and register its data sources.

    - ``master``: Spark master URL; default ``$KAPPA_SPARK_MASTER`` or ``local[2]``.
    - ``home``: state directory for warehouse, metastore and checkpoints (``$KAPPA_HOME``).
    - ``conf``: any Spark settings; they win over the defaults set here.
    - ``metastore_uri``: a Hive metastore server (``$KAPPA_METASTORE_URI``); default is the
      local metastore server of ``home`` if one runs (``kappa up``), else the embedded Derby
      metastore under ``home``.

    Several processes at once (a stream run and a backfill run of one job) need the
    metastore server: embedded Derby admits one process, and a second one fails with
    :class:`~kappaplus.errors.MetastoreError` naming the process that holds it. The server
    and the embedded metastore are two Derby databases (``home/metastore/metastore_db`` and
    ``home/metastore_db``), so two catalogs: a table registered in one is not visible in the
    other, although both keep table data in the same warehouse, ``home/warehouse``.

    The session time zone is UTC so event times mean the same on every machine.
    """
    from pyspark.sql import SparkSession

    _python_env()
    root = state_dir(home)
    settings: dict[str, str] = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.stateStore.stateSchemaCheck": "true",
        "spark.python.worker.reuse": "true",
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Parquet INT96 timestamps carry no statistics; micros let readers prune row groups.
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.driver.memory": os.environ.get("KAPPA_DRIVER_MEMORY", "2g"),
    }
    if hive:
        uri = resolve_metastore_uri(root, metastore_uri, conf)
        if uri is None and not _sets_metastore(conf) and not _has_active_context():
            check_embedded_free(root)  # fail fast instead of a Java stack trace from Derby
        settings.update(hive_conf(root, uri))
    java_options = settings.get("spark.driver.extraJavaOptions", "")
    settings["spark.driver.extraJavaOptions"] = (
        f"{java_options} -Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()}".strip()
    )
    master = master or os.environ.get("KAPPA_SPARK_MASTER") or DEFAULT_MASTER
    cores = local_cores(master)
    if cores is not None:
        # One shuffle (= state store) partition per local core: each stateful micro-batch
        # then runs one task per core instead of paying task and state store overhead for
        # partitions that wait for a core (bench/bench_microbatch.py compares). A value the
        # caller sets wins; checkpoints keep the partition count they were created with.
        settings["spark.sql.shuffle.partitions"] = str(cores)
    settings.update(conf or {})
    builder = SparkSession.builder.appName(app_name).master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    if hive:
        builder = builder.enableHiveSupport()
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("KAPPA_SPARK_LOG_LEVEL", "WARN"))
    register_data_sources(spark)
    log.info(
        "SparkSession %s ready (master=%s, home=%s)", app_name, spark.sparkContext.master, root
    )
    return spark


def stop_session(spark: SparkSession) -> None:
    """Stop ``spark``: its streaming queries, then the state store's maintenance, then Spark.

    Spark's background state store maintenance can otherwise run once more after the
    session stopped and print ``SparkEnv not active, cannot do maintenance`` with a stack
    trace as the process exits.
    """
    for query in spark.streams.active:
        query.stop()
    try:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        jvm.org.apache.spark.sql.execution.streaming.state.StateStore.stop()
    except Exception as exc:  # noqa: BLE001 - cosmetic; stopping Spark must go on
        log.debug("state store maintenance not stopped: %s", exc)
    spark.stop()


def register_data_sources(spark: SparkSession) -> None:
    """Register every kappaplus Python data source with ``spark`` (idempotent)."""
    from kappaplus.sources import registered_sources

    for source in registered_sources():
        spark.dataSource.register(source)
