"""Progress of a run's queries as Spark emits it: a ``StreamingQueryListener``, no polling.

Spark posts a ``QueryProgressEvent`` after every micro-batch of every query of the session;
:class:`ProgressListener` keeps each one (as the JSON dict Spark writes) until the run's loop
takes it, so the live progress, the run record and the audit see every batch exactly once,
however many batches run between two looks (``query.recentProgress`` keeps only the last
``spark.sql.streaming.numRecentProgressUpdates``). Events reach the listener on Spark's
listener bus, shortly after the batch: the runner reads ``recentProgress`` once more after
the queries stop, and folding is idempotent per batch id.

A query's end also wakes the run's loop (:meth:`ProgressListener.wait`): it otherwise looks
at its queries once a second, and a backfill's end waited for that look (0.5 s on average
after its last batch).

>>> listener = ProgressListener()
>>> listener.take("q")
[]
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from kappaplus.runtime.observe.json_listener import JsonProgressListener

log = logging.getLogger(__name__)


class ProgressListener(JsonProgressListener):
    """Queues every progress event per query name; :meth:`take` hands them over once."""

    def __init__(self) -> None:
        self._pending: dict[str, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._ended = threading.Event()

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's name
        return

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        try:
            progress = json.loads(event.progress.json)
        except Exception as exc:  # noqa: BLE001 - a listener must never fail Spark
            log.debug("progress: unreadable event: %s", exc)
            return
        with self._lock:
            self._pending.setdefault(str(progress.get("name")), []).append(progress)

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        return

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        self._ended.set()

    def arm(self) -> None:
        """Forget query ends seen so far: call before looking at the queries, then
        :meth:`wait` returns at once for any query that ends after the look."""
        self._ended.clear()

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds, less if a query ended since :meth:`arm`; True
        if one did."""
        return self._ended.wait(timeout)

    def take(self, query_name: str) -> list[dict[str, Any]]:
        """The progress events of ``query_name`` received since the last call."""
        with self._lock:
            return self._pending.pop(query_name, [])
