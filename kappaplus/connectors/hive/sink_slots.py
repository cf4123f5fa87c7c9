"""What the Hive sink asks the metastore ahead about a batch's ``kappa_batch`` number, while
Spark writes the batch (:meth:`kappaplus.connectors.hive.sink.HiveTableSink._guess_slot`)."""

from __future__ import annotations

import logging
from concurrent.futures import Future
from dataclasses import dataclass

log = logging.getLogger(__name__)

PartitionKey = tuple[tuple[str, str], ...]
"""A partition as :func:`~kappaplus.connectors.hive.sink_options.partition_key` gives it."""


@dataclass(frozen=True)
class SlotGuess:
    """What the metastore says about the ``kappa_batch`` number a batch will most likely
    reserve, asked while Spark writes the batch (:meth:`HiveTableSink._guess_slot`)."""

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
