"""kappaplus: the Kappa+ architecture on PySpark.

One streaming job codebase runs against Kafka in production and, unchanged, backfills
history by reading the lake as an unbounded stream, one event-time slice per trigger.

Everything a job and its runner need is importable from here; the rest of the package is
how it works. Names load on first use, so ``import kappaplus`` starts no Spark.

Defining a job (plain PySpark over one streaming DataFrame per logical input)::

    from pyspark.sql import functions as F
    import kappaplus as kp

    def counts(inputs, params: kp.Params):
        per_window = inputs["rides"].groupBy(F.window("event_time", "10 minutes"), "city").count()
        return {"counts": per_window.select(F.col("window.start").alias("start"), "city", "count")}

    JOB = kp.Job(
        name="ride-counts",
        inputs=[kp.InputSpec("rides", "ride_id string, city string, event_time timestamp",
                             "event_time")],
        outputs=[kp.OutputSpec("counts", output_mode="append", event_time_column="start")],
        transform=counts,
        watermark_delay="1 minute",
    )

Running it from Python, as ``kappa run`` does (the config binds the input to a topic and a
table)::

    spark = kp.create_session("ride-counts-backfill")
    result = kp.run_job(
        spark, JOB, kp.load_config("rides.toml"),
        kp.RunOptions(mode="backfill", start="2024-03-01", end="2024-03-08"),
    )
    kp.stop_session(spark)

Errors: every error is a :class:`KappaError`; :class:`ConfigError` is a bad option or key,
:class:`StateError` a run's saved state that refuses what was asked (``kappaplus.core.errors``).

>>> import kappaplus
>>> kappaplus.InputSpec.__module__
'kappaplus.jobs'
>>> issubclass(kappaplus.ConfigError, kappaplus.KappaError)
True
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from kappaplus.core.errors import (
    BrokerError,
    ConfigError,
    DataError,
    KafkaError,
    KappaError,
    MetastoreError,
    ReplayError,
    StateError,
    TableError,
)

if TYPE_CHECKING:
    from kappaplus.codecs.protobuf_encode import ProtobufWriter
    from kappaplus.config import JobConfig, load_config, parse_config
    from kappaplus.connectors import read_lake_stream
    from kappaplus.connectors.delta import read_delta_stream
    from kappaplus.connectors.hive import read_hive_stream
    from kappaplus.connectors.hybrid import read_hybrid_stream
    from kappaplus.connectors.iceberg import read_iceberg_stream
    from kappaplus.connectors.kafka import read_kafka, read_kafka_stream
    from kappaplus.jobs import InputSpec, Job, OutputSpec, Params, load_job
    from kappaplus.runtime.options import RunOptions
    from kappaplus.runtime.runner import RunResult, run_job
    from kappaplus.session import create_session, stop_session

__version__ = "0.1.0"

# name -> the module that defines it; loaded on first access (PEP 562)
_LAZY = {
    "Job": "kappaplus.jobs",
    "InputSpec": "kappaplus.jobs",
    "OutputSpec": "kappaplus.jobs",
    "Params": "kappaplus.jobs",
    "load_job": "kappaplus.jobs",
    "JobConfig": "kappaplus.config",
    "load_config": "kappaplus.config",
    "parse_config": "kappaplus.config",
    "RunOptions": "kappaplus.runtime.options",
    "RunResult": "kappaplus.runtime.runner",
    "run_job": "kappaplus.runtime.runner",
    "create_session": "kappaplus.session",
    "stop_session": "kappaplus.session",
    "read_hive_stream": "kappaplus.connectors.hive",
    "read_iceberg_stream": "kappaplus.connectors.iceberg",
    "read_delta_stream": "kappaplus.connectors.delta",
    "read_lake_stream": "kappaplus.connectors",
    "read_kafka_stream": "kappaplus.connectors.kafka",
    "read_kafka": "kappaplus.connectors.kafka",
    "read_hybrid_stream": "kappaplus.connectors.hybrid",
    "ProtobufWriter": "kappaplus.codecs.protobuf_encode",
}

__all__ = [
    # a job
    "Job",
    "InputSpec",
    "OutputSpec",
    "Params",
    "load_job",
    # its configuration and its run
    "JobConfig",
    "load_config",
    "parse_config",
    "RunOptions",
    "RunResult",
    "run_job",
    "create_session",
    "stop_session",
    # the sources as streaming DataFrames, without the runtime
    "read_hive_stream",
    "read_iceberg_stream",
    "read_delta_stream",
    "read_lake_stream",
    "read_kafka_stream",
    "read_kafka",
    "read_hybrid_stream",
    # records for a topic (test data, the examples' producers)
    "ProtobufWriter",
    # errors
    "KappaError",
    "ConfigError",
    "StateError",
    "TableError",
    "DataError",
    "ReplayError",
    "KafkaError",
    "BrokerError",
    "MetastoreError",
    "__version__",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kappaplus' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later accesses skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
