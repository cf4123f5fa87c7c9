"""The runner holds the connectors' lines of a first binding that a second one replaces
(a backfill of an aggregating job): dropped then, let through otherwise, never lost on an
error, and other threads' lines are not held."""

from __future__ import annotations

import logging
import threading

import pytest

from kappaplus.runtime.held_logs import held_lines

NAME = "kappaplus.connectors.hive.catalog"


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == NAME]


def test_lines_are_let_through_in_order_unless_dropped(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    with held_lines("kappaplus.connectors"):
        logging.getLogger(NAME).info("one")
        logging.getLogger(NAME).info("two")
        assert _messages(caplog) == []
    assert _messages(caplog) == ["one", "two"]
    caplog.clear()
    with held_lines("kappaplus.connectors") as held:
        logging.getLogger(NAME).info("slices of about 2000000 rows")
        held.drop()
    logging.getLogger(NAME).info("slices of about 8000000 rows")
    assert _messages(caplog) == ["slices of about 8000000 rows"]


def test_an_error_lets_the_lines_through_and_other_threads_are_not_held(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    with pytest.raises(RuntimeError), held_lines("kappaplus.connectors") as held:
        logging.getLogger(NAME).info("what failed")
        worker = threading.Thread(target=lambda: logging.getLogger(NAME).info("elsewhere"))
        worker.start()
        worker.join()
        assert _messages(caplog) == ["elsewhere"]
        held.drop()
        raise RuntimeError("binding failed")
    assert _messages(caplog) == ["elsewhere", "what failed"]
    assert logging.getLogger("kappaplus.connectors").propagate
