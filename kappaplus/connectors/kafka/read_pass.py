"""A pass over the records where the source reads them: one Python function, in the task.

A job that decodes its records in Python (``mapInArrow`` after the source) moves every
record from the source's Python worker into the JVM and back into Python, raw key and value
included, before it is decoded: three crossings where one would do. The source can instead
be given the pass itself (:func:`kappaplus.connectors.kafka.read_kafka_stream`, ``read_pass``
and ``schema``): its reader hands each task's record batches (Spark's Kafka schema, as
:mod:`.reader` builds them) to the pass and delivers what the pass yields, in the pass's
schema, so the records cross into the JVM once, decoded (``docs/benchmarks.md``, issue 51).

The pass travels with the source's options (``kappa.secret.readPass``: the function
pickled, base64; ``kappa.readPassSchema``: the schema it yields, Spark's JSON), since Spark
builds a Python data source from its options in a worker of its own. The first is named so
that Spark redacts it wherever it shows a source's options (plans, the UI, the event log):
it is long, and may hold client settings of the dead letters' target. The source knows
nothing of what the pass does: :mod:`kappaplus.runtime.binding.checked_decode` gives it the
decoding and the checks.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

ReadPass = Callable[[Iterator["pa.RecordBatch"]], Iterator["pa.RecordBatch"]]

READ_PASS_OPTION = "kappa.secret.readPass"
READ_PASS_SCHEMA_OPTION = "kappa.readPassSchema"


def pass_options(read_pass: ReadPass, schema: StructType) -> dict[str, str]:
    """The source options that carry ``read_pass`` and the ``schema`` of what it yields.

    >>> from pyspark.sql.types import StructType
    >>> sorted(pass_options(lambda batches: batches, StructType([])))
    ['kappa.readPassSchema', 'kappa.secret.readPass']
    """
    from pyspark import cloudpickle

    blob = base64.b64encode(cloudpickle.dumps(read_pass)).decode("ascii")
    return {READ_PASS_OPTION: blob, READ_PASS_SCHEMA_OPTION: schema.json()}


def _option(options: Mapping[str, Any], name: str) -> str | None:
    wanted = name.lower()
    for key, value in options.items():
        if str(key).lower() == wanted:
            return None if value is None else str(value)
    return None


def read_pass_of(options: Mapping[str, Any]) -> ReadPass | None:
    """The pass the options carry (None: the records as read).

    >>> from pyspark.sql.types import StructType
    >>> fn = read_pass_of(pass_options(lambda batches: batches, StructType([])))
    >>> list(fn(iter([1, 2])))
    [1, 2]
    >>> read_pass_of({"subscribe": "t"}) is None
    True
    """
    blob = _option(options, READ_PASS_OPTION)
    if blob is None:
        return None
    import pickle

    return pickle.loads(base64.b64decode(blob))  # type: ignore[no-any-return]  # noqa: S301


def read_pass_schema(options: Mapping[str, Any]) -> StructType | None:
    """The schema of what the options' pass yields (None: no pass).

    >>> from pyspark.sql.types import StructType, StructField, LongType
    >>> schema = StructType([StructField("n", LongType())])
    >>> read_pass_schema(pass_options(lambda batches: batches, schema)) == schema
    True
    """
    if _option(options, READ_PASS_OPTION) is None:
        return None
    from pyspark.sql.types import StructType

    from kappaplus.core.errors import ConfigError

    schema_json = _option(options, READ_PASS_SCHEMA_OPTION)
    if schema_json is None:
        raise ConfigError(READ_PASS_SCHEMA_OPTION, None, f"is required with {READ_PASS_OPTION}")
    return StructType.fromJson(json.loads(schema_json))


def without_pass_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` less the pass's two (the source's own options validate the rest)."""
    dropped = {READ_PASS_OPTION.lower(), READ_PASS_SCHEMA_OPTION.lower()}
    return {k: v for k, v in options.items() if str(k).lower() not in dropped}
