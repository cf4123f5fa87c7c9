"""Stopping a run at a clean point: SIGTERM and SIGINT (to the process or its whole group,
as ``timeout``, systemd and Kubernetes send them) only record a request, which the run's poll
loop honours between micro-batches."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class StopRequest:
    """The first SIGTERM/SIGINT received while a run is under way (None: none yet)."""

    signum: int | None = None

    @property
    def stopped_by(self) -> str | None:
        if self.signum is None:
            return None
        return "ctrl-c" if self.signum == signal.SIGINT else "sigterm"


@contextmanager
def signals_stop() -> Iterator[StopRequest]:
    """While inside, SIGTERM and SIGINT only record a stop request; the run's poll loop
    sees it and stops every query at a clean point. The handler raises nothing: raising in
    the middle of a py4j call would leave the gateway connection with an unread answer.
    Later signals are ignored. Restores the previous handlers on the way out."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def handler(signum: int, frame: Any) -> None:
        if request.signum is not None:
            log.warning("signal %d: already stopping", signum)
            return
        request.signum = signum
        log.warning("signal %d: stopping at the next clean point", signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield request
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
