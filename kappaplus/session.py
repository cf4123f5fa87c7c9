"""The session factory: one call returns a SparkSession ready for kappaplus.

Local mode with Spark's built-in Hive support and an embedded metastore by default;
production settings (master URL, metastore URI, any Spark conf) pass through unchanged.

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
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from kappaplus.settings import state_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DEFAULT_MASTER = "local[2]"


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
        metastore = home / "metastore_db"
        conf["spark.hadoop.javax.jdo.option.ConnectionURL"] = (
            f"jdbc:derby:;databaseName={metastore};create=true"
        )
    return conf


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
      embedded Derby metastore under ``home``.

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
        uri = metastore_uri or os.environ.get("KAPPA_METASTORE_URI") or None
        settings.update(hive_conf(root, uri))
    settings.update(conf or {})
    builder = SparkSession.builder.appName(app_name).master(
        master or os.environ.get("KAPPA_SPARK_MASTER") or DEFAULT_MASTER
    )
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


def register_data_sources(spark: SparkSession) -> None:
    """Register every kappaplus Python data source with ``spark`` (idempotent)."""
    from kappaplus.sources import registered_sources

    for source in registered_sources():
        spark.dataSource.register(source)
