"""How a ``kappa`` command opens its Spark session: the ``--master`` and
``--metastore-uri`` options, with one help text that says where each default comes from,
and :func:`command_session`, the one call that finds the local stack's metastore server."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MASTER = typer.Option(
    None,
    "--master",
    help="Spark master URL (default $KAPPA_SPARK_MASTER, else spark-submit's, else local[2], "
    "run as local[2,4]: four attempts per task).",
)

METASTORE_URI = typer.Option(
    None,
    "--metastore-uri",
    help="Hive metastore thrift URI (default $KAPPA_METASTORE_URI, else the metastore server "
    "`kappa up` started, else the embedded catalog under the state directory).",
)


def command_session(
    name: str,
    *,
    master: str | None = None,
    metastore_uri: str | None = None,
    defaults: Mapping[str, str] | None = None,
) -> SparkSession:
    """The session of the ``kappa`` command ``name``: the master and metastore it was given,
    else the defaults :data:`MASTER` and :data:`METASTORE_URI` describe (the metastore
    server ``kappa up`` started is found, :data:`kappaplus.local.metastore.LOCAL_DISCOVERY`)."""
    from kappaplus.local.metastore import LOCAL_DISCOVERY
    from kappaplus.session import create_session

    return create_session(
        name,
        master=master,
        metastore_uri=metastore_uri,
        metastore_discovery=LOCAL_DISCOVERY,
        defaults=defaults,
    )
