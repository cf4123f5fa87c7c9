"""The session factory: one call returns a SparkSession ready for kappaplus.

Local mode with Spark's built-in Hive support and small, quiet defaults; on a cluster
(any master but ``local[...]``) the cluster's ``spark-defaults.conf`` and the caller's settings
are left as they are, but for the collector of a small driver machine where neither chose
one (:func:`builder_settings`). The Hive metastore is, in this order: the
``metastore_uri`` argument, ``$KAPPA_METASTORE_URI``, what the caller's
``metastore_discovery`` finds (the ``kappa`` commands pass the local stack's, which finds the
metastore server of the state directory if one runs: ``kappa up`` / ``kappa metastore
start``), else an embedded Derby database that only one process at a time can open.

This module is production code: it imports nothing of the local development stack
(:mod:`kappaplus.local`); that stack plugs in through :class:`MetastoreDiscovery`.

>>> from kappaplus.session import create_session
>>> spark = create_session("my-job")                      # doctest: +SKIP
>>> from kappaplus.local.metastore import LOCAL_DISCOVERY
>>> spark = create_session("my-job", metastore_discovery=LOCAL_DISCOVERY)  # doctest: +SKIP
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
from typing import TYPE_CHECKING, Protocol

from kappaplus.core.settings import state_dir
from kappaplus.driver_jvm import (
    cluster_driver_java_options,
    local_defaults,
    spark_defaults,
)
from kappaplus.jars import jvm_jar

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DEFAULT_MASTER = "local[2]"
LOCAL_TASK_RETRIES = 4
"""Attempts of a task in local mode (``local[N, retries]``): Spark's default there is one,
so a Python worker that misses its connect-back under load would fail the whole run."""
_LOCAL = re.compile(r"^local\[(\*|\d+)\]$")


def with_task_retries(master: str, retries: int = LOCAL_TASK_RETRIES) -> str:
    """``local[N]`` / ``local`` as ``local[N,retries]``; any other master unchanged.

    >>> with_task_retries("local[2]"), with_task_retries("local"), with_task_retries("yarn")
    ('local[2,4]', 'local[1,4]', 'yarn')
    """
    if master == "local":
        return f"local[1,{retries}]"
    match = _LOCAL.match(master.strip())
    return f"local[{match[1]},{retries}]" if match else master


EMBEDDED_DATABASE = "metastore_db"


class MetastoreDiscovery(Protocol):
    """How a session finds a metastore server nobody named, and checks the embedded one.

    :data:`kappaplus.local.metastore.LOCAL_DISCOVERY` is the local stack's; production
    callers name their metastore (``metastore_uri``, ``$KAPPA_METASTORE_URI`` or Spark
    settings) and pass none.
    """

    def discover(self, home: Path) -> str | None:
        """The thrift URI of a metastore server for state directory ``home``, or None."""
        ...

    def check_embedded_free(self, home: Path) -> None:
        """Raise :class:`~kappaplus.core.errors.MetastoreError` if another process holds the
        embedded Derby metastore of ``home``."""
        ...


def embedded_database(home: str | os.PathLike[str] | None = None) -> Path:
    """The Derby database a session of ``home`` opens without a server: ``home/metastore_db``.

    It is not the local server's database (``home/metastore/metastore_db``): the two catalogs
    are separate, only the warehouse directory ``home/warehouse`` is shared.
    """
    return state_dir(home) / EMBEDDED_DATABASE


def _python_env() -> None:
    # Python data sources run in worker processes; they must use this interpreter, which
    # has pyarrow and kappaplus installed, or they fail with "Python worker failed to
    # connect back".
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")


METASTORE_RETRIES = {
    "spark.hadoop.hive.metastore.failure.retries": "3",
    "spark.hadoop.hive.metastore.connect.retries": "5",
    "spark.hadoop.hive.metastore.client.connect.retry.delay": "2s",
}
"""How a session's Hive client rides out a metastore server that is away for a while (a
restart): a call that loses its connection reconnects up to 3 times, each reconnection
trying 5 times 2 s apart, so an outage of about 30 s passes unnoticed; a metastore that stays
away fails the call after about 40 s. Hive's defaults (1 reconnection of 3 tries, 1 s apart)
fail a batch when a restart takes more than about 4 s (measured in ``tests/chaos``)."""


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
    }
    if metastore_uri:
        conf["spark.hadoop.hive.metastore.uris"] = metastore_uri
        conf.update(METASTORE_RETRIES)
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
    discovery: MetastoreDiscovery | None = None,
) -> str | None:
    """The metastore server a session of state directory ``home`` uses; None: embedded Derby.

    ``metastore_uri``, else ``$KAPPA_METASTORE_URI``, else -- unless ``conf`` sets the
    metastore itself -- what ``discovery`` finds for ``home`` (the local stack's finds its
    server from the status file, pid and port; no JVM is started). Logs at INFO when it
    picks a discovered server.
    """
    explicit = metastore_uri or os.environ.get(METASTORE_URI_ENV)
    if explicit:
        return explicit
    if _sets_metastore(conf) or discovery is None:
        return None
    found = discovery.discover(home)
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


def _launches_jvm() -> bool:
    """Whether the session about to be built starts its driver JVM (and so takes class path
    settings): no gateway in this process and none handed over by ``spark-submit``."""
    from pyspark import SparkContext

    return SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ


def _has_active_context() -> bool:
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


SESSION_SETTINGS: dict[str, str] = {
    # event times mean the same on every machine
    "spark.sql.session.timeZone": "UTC",
    # a changed job state schema fails at start instead of reading garbage
    "spark.sql.streaming.stateStore.stateSchemaCheck": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Parquet INT96 timestamps carry no statistics; micros let readers prune row groups.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}
"""What kappaplus wants of every session. In local mode they are set when the session is
built; on a cluster each is set only where neither ``spark-defaults.conf`` nor the caller
chose a value (all are SQL settings a running session accepts)."""


def submitted_master() -> str | None:
    """The master ``spark-submit`` was given, when this process is a driver it started (its
    JVM is already running and passed ``PYSPARK_GATEWAY_PORT``); None otherwise."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return None
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connects to spark-submit's JVM
    master = SparkConf().get("spark.master", None)  # the JVM's system properties
    return master or None


def is_local_master(master: str) -> bool:
    """Whether ``master`` runs Spark in this process (``local``, ``local[4]``, ``local[*, 2]``).

    >>> is_local_master("local[2]"), is_local_master("spark://h:7077"), is_local_master("yarn")
    (True, False, False)
    """
    return local_cores(master) is not None


def builder_settings(
    master: str,
    home: Path,
    conf: Mapping[str, str] | None = None,
    *,
    hive: bool = True,
    metastore_uri: str | None = None,
) -> dict[str, str]:
    """The settings :func:`create_session` gives the session builder for ``master``.

    Local master: :func:`local_defaults`, :data:`SESSION_SETTINGS` and the catalog in the
    state directory ``home``, then ``conf``. Cluster: ``conf`` and the metastore URI the
    caller named, and for a driver JVM this process starts the collector of
    :func:`cluster_driver_java_options` where neither ``spark-defaults.conf`` nor the caller
    chose one; nothing else, so ``spark-defaults.conf`` and the caller decide.

    >>> cluster = builder_settings("spark://h:7077", Path("/tmp/k"), {"spark.cores.max": "2"})
    >>> sorted(set(cluster) - {"spark.driver.extraJavaOptions"})
    ['spark.cores.max']
    >>> builder_settings("local[2]", Path("/tmp/k"), hive=False)["spark.sql.shuffle.partitions"]
    '2'
    """
    settings: dict[str, str] = {}
    cores = local_cores(master)
    if cores is not None:
        settings.update(local_defaults(home, cores))

        # One shuffle (= state store) partition per local core: each stateful micro-batch
        # then runs one task per core instead of paying task and state store overhead for
        # partitions that wait for a core (measured in docs/benchmarks.md). It is also the
        # number of state store partitions of every stateful query whose checkpoint this
        # session creates: Spark fixes that number at a query's first run. On a cluster it
        # is spark.sql.shuffle.partitions of spark-defaults.conf or of the caller.
        settings["spark.sql.shuffle.partitions"] = str(cores)
        settings.update(SESSION_SETTINGS)
        if hive:
            settings.update(hive_conf(home, metastore_uri))
    elif hive and metastore_uri and not _sets_metastore(conf):
        settings["spark.hadoop.hive.metastore.uris"] = metastore_uri
    settings.update(conf or {})
    if cores is None and _launches_jvm():
        java_options = cluster_driver_java_options(conf, spark_defaults())
        if java_options:
            settings["spark.driver.extraJavaOptions"] = java_options
    jar = jvm_jar()
    if cores is not None and jar is not None:
        # the JVM read path of the Hive source (kappaplus.jars), beside the caller's jars
        settings["spark.jars"] = ",".join(j for j in (settings.get("spark.jars"), str(jar)) if j)
        if _launches_jvm():
            # on the driver's own class path as well: Spark's launcher opens file: paths
            # with fs.file.impl before it loads spark.jars; a JVM already running (started
            # by spark-submit or an earlier session) has neither, so keeps Hadoop's own
            settings["spark.driver.extraClassPath"] = os.pathsep.join(
                j for j in (settings.get("spark.driver.extraClassPath"), str(jar)) if j
            )
            for key, value in SPAWN_FREE_LOCAL_FS.items():
                settings.setdefault(key, value)
    return settings


SPAWN_FREE_LOCAL_FS: dict[str, str] = {
    "spark.hadoop.fs.file.impl": "org.kappaplus.fs.SpawnFreeLocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.kappaplus.fs.SpawnFreeLocalFs",
}
"""Local ``file:`` paths through the project's jar (``jvm/src/org/kappaplus/fs``): Hadoop's
local file system without its native library (pyspark ships none) starts a ``chmod`` for
every file and directory it creates and a ``readlink`` for every rename, three to four
processes per checkpoint file, ~200 in a 7-day backfill; these do both through
``java.nio``. 50 checkpoint-style writes (create, rename): 1,250 ms -> 23-30 ms. Local master
only, when the jar was built, and never over the caller's choice."""


def apply_session_settings(
    spark: SparkSession, settings: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Set each of ``settings`` (default :data:`SESSION_SETTINGS`) the session has no value
    for, neither from ``spark-defaults.conf`` nor from the builder; returns those set."""
    chosen = spark.sparkContext.getConf()
    applied = {}
    for key, value in (SESSION_SETTINGS if settings is None else settings).items():
        if not chosen.contains(key):
            spark.conf.set(key, value)
            applied[key] = value
    return applied


def _python_from_conf(spark: SparkSession) -> None:
    """Run Python workers with ``spark.pyspark.python`` (``spark-defaults.conf`` or the
    caller) as ``spark-submit`` would; PySpark itself reads only ``$PYSPARK_PYTHON``."""
    python = spark.sparkContext.getConf().get("spark.pyspark.python", None)
    if python and "PYSPARK_PYTHON" not in os.environ:
        spark.sparkContext.pythonExec = python


def check_cluster_warehouse(spark: SparkSession) -> None:
    """Refuse a cluster session whose warehouse nobody chose.

    Without ``spark.sql.warehouse.dir`` (``spark-defaults.conf``, ``conf``) or
    ``hive.metastore.warehouse.dir`` (``hive-site.xml``) Spark puts every database kappaplus
    creates (outputs, dead letters, late rows, audit) under ``spark-warehouse`` in the
    driver's working directory; executors on other machines would write the files to their
    own disks. Stops the session and raises :class:`~kappaplus.core.errors.ConfigError`.
    """
    if spark.sparkContext.getConf().contains("spark.sql.warehouse.dir"):
        return
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    if hadoop.get("hive.metastore.warehouse.dir"):
        return
    from kappaplus.core.errors import ConfigError

    default = spark.conf.get("spark.sql.warehouse.dir")
    spark.stop()
    raise ConfigError(
        "spark.sql.warehouse.dir",
        None,
        f"must be a location every executor sees when the master is not local (Spark's "
        f"default is the driver's {default}): set it in spark-defaults.conf, or "
        "hive.metastore.warehouse.dir in hive-site.xml",
    )


def _metastore_of(
    root: Path,
    local: bool,
    conf: Mapping[str, str] | None,
    metastore_uri: str | None,
    discovery: MetastoreDiscovery | None,
) -> str | None:
    """The metastore server a session uses (None: the embedded one, checked free before
    Spark starts, failing fast instead of a Java stack trace from Derby)."""
    uri = resolve_metastore_uri(root, metastore_uri, conf, discovery)
    if (
        local
        and uri is None
        and discovery is not None
        and not _sets_metastore(conf)
        and not _has_active_context()
    ):
        discovery.check_embedded_free(root)
    return uri


def _settle(
    spark: SparkSession, *, local: bool, hive: bool, defaults: Mapping[str, str] | None
) -> None:
    """A started session's settings, log level, catalog warm-up and data sources."""
    if not local:
        if hive:
            check_cluster_warehouse(spark)
        apply_session_settings(spark)
        _python_from_conf(spark)
    if defaults:
        apply_session_settings(spark, defaults)
    level = os.environ.get("KAPPA_SPARK_LOG_LEVEL") or ("WARN" if local else None)
    if level:
        spark.sparkContext.setLogLevel(level)
    if hive:
        warm_catalog(spark)
    register_data_sources(spark)


def create_session(
    app_name: str = "kappaplus",
    *,
    master: str | None = None,
    home: str | os.PathLike[str] | None = None,
    conf: Mapping[str, str] | None = None,
    hive: bool = True,
    metastore_uri: str | None = None,
    metastore_discovery: MetastoreDiscovery | None = None,
    defaults: Mapping[str, str] | None = None,
) -> SparkSession:
    """Return a SparkSession configured for kappaplus and register its data sources.

    - ``master``: Spark master URL; default ``$KAPPA_SPARK_MASTER`` or ``local[2]``.
    - ``home``: state directory for warehouse, metastore and checkpoints (``$KAPPA_HOME``).
    - ``conf``: any Spark settings; they win over the defaults set here.
    - ``metastore_uri``: a Hive metastore server (``$KAPPA_METASTORE_URI``); default is what
      ``metastore_discovery`` finds, else the embedded Derby metastore under ``home``.
    - ``metastore_discovery``: how to find a metastore server nobody named and to check the
      embedded one before Spark starts; the ``kappa`` commands pass
      :data:`kappaplus.local.metastore.LOCAL_DISCOVERY` (the server ``kappa up`` starts).
    - ``defaults``: SQL settings used only where neither ``spark-defaults.conf`` nor
      ``conf`` sets them, on every master (``kappa run`` passes
      :data:`kappaplus.state_store.STATE_STORE_SETTINGS`).

    Several processes at once (a stream run and a backfill run of one job) need the
    metastore server: embedded Derby admits one process, and a second one fails with
    :class:`~kappaplus.core.errors.MetastoreError` naming the process that holds it. The server
    and the embedded metastore are two Derby databases (``home/metastore/metastore_db`` and
    ``home/metastore_db``), so two catalogs: a table registered in one is not visible in the
    other, although both keep table data in the same warehouse, ``home/warehouse``.

    The session time zone is UTC so event times mean the same on every machine.

    Local master (``local``, ``local[N]``): :func:`local_defaults` (one shuffle and so state
    partition per core, no UI, 2 GB driver, this interpreter for Python workers) and the catalog in
    ``home``. Any other master: nothing of that; ``spark-defaults.conf``, the cluster's
    ``hive-site.xml`` and ``conf`` decide, and :data:`SESSION_SETTINGS` fill only the gaps.
    """
    from pyspark.sql import SparkSession

    root = state_dir(home)
    master_url = (
        master or os.environ.get("KAPPA_SPARK_MASTER") or submitted_master() or DEFAULT_MASTER
    )
    local = is_local_master(master_url)
    uri = _metastore_of(root, local, conf, metastore_uri, metastore_discovery) if hive else None
    settings = builder_settings(master_url, root, conf, hive=hive, metastore_uri=uri)
    if local:
        _python_env()
        master_url = with_task_retries(master_url)
    from kappaplus.core.jvm import launch_detached_gateway

    launch_detached_gateway(
        master_url, app_name, settings, root
    )  # group signals reach only the driver
    builder = SparkSession.builder.appName(app_name).master(master_url)
    for key, value in settings.items():
        builder = builder.config(key, value)
    if hive:
        builder = builder.enableHiveSupport()
    spark = builder.getOrCreate()
    _settle(spark, local=local, hive=hive, defaults=defaults)
    log.info(
        "SparkSession %s ready (master=%s, home=%s)", app_name, spark.sparkContext.master, root
    )
    return spark


def warm_catalog(spark: SparkSession) -> None:
    """Start the session's Hive client in a background thread, so the cost of its first
    call (Hive's classes, the metastore's connection and schema check) overlap what follows
    (registering the data sources, resolving the job's configuration) instead of coming after.

    The first catalog call of the caller then waits for it to finish (Spark starts the client
    once, under a lock). A failure here is only logged at DEBUG: the caller's own call fails
    with the error to show.
    """
    import threading

    jsession = spark._jsparkSession

    def warm() -> None:
        try:
            jsession.catalog().databaseExists("default")
        except Exception as exc:  # noqa: BLE001 - the caller's own call reports it
            log.debug("catalog warm-up: %s", exc)

    threading.Thread(target=warm, name="kappa-catalog-warm-up", daemon=True).start()


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
    """Register every kappaplus Python data source with ``spark`` (idempotent).

    Spark's first data source registration also looks for installed ``pyspark_*`` packages
    that declare a data source; unless there are some, that search is skipped
    (:func:`skip_static_source_lookup`).
    """
    from kappaplus.connectors import registered_sources

    skip_static_source_lookup(spark)
    for source in registered_sources():
        spark.dataSource.register(source)


def static_source_modules() -> list[str]:
    """The top-level modules named ``pyspark_*`` on this interpreter's path: where Spark
    looks for data sources to register by themselves (a ``DefaultSource`` class).

    >>> all(name.startswith("pyspark_") for name in static_source_modules())
    True
    """
    import pkgutil

    return sorted(m.name for m in pkgutil.iter_modules() if m.name.startswith("pyspark_"))


def skip_static_source_lookup(spark: SparkSession) -> bool:
    """Tell Spark there are no ``pyspark_*`` data source packages to look up, when this
    interpreter has none (:func:`static_source_modules`); True if it did.

    Spark runs that lookup once per JVM, at the first data source registration, in a Python
    worker daemon started for it alone: time in every session's start and two idle
    processes kept for the session's life (docs/benchmarks.md). With any
    ``pyspark_*`` module installed, or a Spark whose internals differ, Spark looks as it
    always does.
    """
    found = static_source_modules()
    if found:
        log.debug("pyspark_* modules %s: Spark looks up their data sources", found)
        return False
    try:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        datasources = jvm.org.apache.spark.sql.execution.datasources
        manager = getattr(getattr(datasources, "DataSourceManager$"), "MODULE$")
        if not manager.dataSourceBuilders().isEmpty():
            return False  # looked up already (an earlier session of this JVM)
        nothing = getattr(getattr(jvm.scala.collection.immutable, "Map$"), "MODULE$").empty()
        getattr(manager, "dataSourceBuilders_$eq")(jvm.scala.Some(nothing))
    except Exception as exc:  # noqa: BLE001 - Spark then looks them up itself
        log.debug("Spark's data source lookup not skipped: %s", exc)
        return False
    return True
