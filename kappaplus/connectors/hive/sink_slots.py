"""The ``kappa_batch`` numbers of a Hive table's batches: the next one its writers left as a
hint, the ones the metastore lists, and what the sink asks ahead, while Spark writes a batch
(:func:`guess_slot`), about the number the batch will most likely reserve
(:meth:`kappaplus.connectors.hive.sink.HiveTableSink._reserve_slot`)."""

from __future__ import annotations

import logging
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kappaplus.connectors.hive.sink_options import (
    SLOTS_DIR,
    partition_key,
    partition_segments,
    quote_identifier,
    table_sql,
)
from kappaplus.core.table import BATCH_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from kappaplus.core.table.hadoop_fs import HadoopFs

log = logging.getLogger(__name__)

PartitionKey = tuple[tuple[str, str], ...]
"""A partition as :func:`~kappaplus.connectors.hive.sink_options.partition_key` gives it."""


@dataclass(frozen=True)
class SlotGuess:
    """What the metastore says about the ``kappa_batch`` number a batch will most likely
    reserve, asked while Spark writes the batch (:func:`guess_slot`)."""

    slot: int
    """The number :meth:`HiveTableSink._reserve_slot` tries first."""
    largest: int | None
    """The largest registered ``kappa_batch`` when there was no hint (else not asked)."""
    registered: frozenset[PartitionKey]
    """The partition keys the metastore lists with ``kappa_batch`` = ``slot``."""


def guessed(asked: Future[SlotGuess] | None) -> SlotGuess | None:
    """What a question asked ahead answered; None if it failed (the sink then asks again
    itself, and that call raises the error where the protocol expects it)."""
    if asked is None:
        return None
    try:
        return asked.result()
    except Exception as exc:  # noqa: BLE001 - asked again in line
        log.debug("a catalog question asked ahead failed (asked again): %s", exc)
        return None


def slot_hint(fs: HadoopFs, location: str) -> int | None:
    """The next ``kappa_batch`` value the table's writers left in ``_next``, if any."""
    hint = f"{location}/{SLOTS_DIR}/_next"
    if not fs.exists(hint):
        return None
    try:
        return int(fs.read_text(hint).strip())
    except ValueError:
        return None


def guess_slot(spark: SparkSession, fs: HadoopFs, location: str, table: str) -> SlotGuess:
    """The number the sink's reservation will try first and what the metastore lists for
    it; asked beside the batch's write, the reservation itself comes after it."""
    slot = slot_hint(fs, location)
    largest = None
    if slot is None:
        largest = largest_registered_slot(spark, table)
        slot = largest + 1
    return SlotGuess(slot, largest, registered_keys(spark, table, slot))


def largest_registered_slot(spark: SparkSession, table: str) -> int:
    """The largest ``kappa_batch`` the metastore lists for ``table``; -1 if none."""
    rows = spark.sql(f"SHOW PARTITIONS {table_sql(table)}").collect()
    values = [
        int(value)
        for row in rows
        for column, value in partition_segments(str(row[0]))
        if column.lower() == BATCH_COLUMN and value.lstrip("-").isdigit()
    ]
    return max(values, default=-1)


def registered_keys(spark: SparkSession, table: str, slot: int) -> frozenset[PartitionKey]:
    """The keys (:func:`~kappaplus.connectors.hive.sink_options.partition_key`) of the
    partitions the metastore lists with ``kappa_batch`` = ``slot``."""
    rows = spark.sql(
        f"SHOW PARTITIONS {table_sql(table)} "
        f"PARTITION ({quote_identifier(BATCH_COLUMN)} = {int(slot)})"
    ).collect()
    return frozenset(partition_key(str(row[0])) for row in rows)
