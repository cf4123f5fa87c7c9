"""Stopping a run at a clean point: SIGTERM and SIGINT (to the process or its whole group,
as ``timeout``, systemd and Kubernetes send them) only record a request, which the run's poll
loop honours by draining its queries (:mod:`kappaplus.core.draining`: the micro-batch under way
finishes, no new one starts). A second signal asks to stop now: the batch under way is then
interrupted (and redone by the next run)."""

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
    urgent: bool = False
    """A second signal came: stop without waiting for the micro-batch under way."""

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
    A second signal sets ``urgent``; later ones are ignored. Restores the previous handlers
    on the way out."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def handler(signum: int, frame: Any) -> None:
        if request.signum is not None:
            if not request.urgent:
                request.urgent = True
                log.warning(
                    "signal %d again: stopping now (the micro-batch under way is interrupted "
                    "and redone by the next run)",
                    signum,
                )
            return
        request.signum = signum
        log.warning(
            "signal %d: stopping once the micro-batch under way is committed "
            "(send it again to stop now)",
            signum,
        )

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield request
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
