"""The ``--master`` and ``--metastore-uri`` options of every ``kappa`` command that starts a
Spark session, with one help text that says where each default comes from
(:func:`kappaplus.session.create_session`)."""

from __future__ import annotations

import typer

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
