"""Log lines of a step that may be done again, held until it is known whether it counts.

A backfill of a job whose queries only aggregate binds its lake inputs twice: once to read
the job's plan, then again with larger slices (:mod:`kappaplus.runtime.binding.slice_size`).
The connectors' lines of the first binding ("streaming table 'x' by ts slices of about
2000000 rows") then said what the run did not do, and every line came twice. The runner
holds this thread's lines of the first binding and lets them through only if no second
binding follows (or the first one fails).

>>> import logging
>>> with held_lines("kappaplus.connectors") as held:
...     logging.getLogger("kappaplus.connectors.hive").warning("streaming table 'x' ...")
...     [record.getMessage() for record in held.records]
...     held.drop()  # bound again: these lines are not let through
["streaming table 'x' ..."]
>>> held.records
[]
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class HeldLines:
    """The records held back; :meth:`drop` forgets them instead of letting them through."""

    records: list[logging.LogRecord] = field(default_factory=list)
    dropped: bool = False

    def drop(self) -> None:
        self.dropped = True


class _Hold(logging.Handler):
    """Keeps the records of one thread; passes every other thread's on at once."""

    def __init__(self, held: HeldLines, parent: logging.Logger) -> None:
        super().__init__()
        self.held, self.parent, self.thread = held, parent, threading.get_ident()

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread:
            self.held.records.append(record)
        else:
            self.parent.handle(record)


@contextlib.contextmanager
def held_lines(logger_name: str) -> Iterator[HeldLines]:
    """Hold this thread's records of ``logger_name`` and its children; on leaving, let
    them through in order unless :meth:`HeldLines.drop` was called (always when the block
    raised: its lines say what failed)."""
    logger = logging.getLogger(logger_name)
    parent = logger.parent or logging.getLogger()
    held = HeldLines()
    handler = _Hold(held, parent)
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    failed = False
    try:
        yield held
    except BaseException:
        failed = True
        raise
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
        if failed or not held.dropped:
            for record in held.records:
                parent.handle(record)
        held.records.clear()
