"""The CLI's stderr log leaves out py4j's retry notice, not real failures."""

from __future__ import annotations

import logging

from kappaplus.cli import _not_py4j_retry


def _record(name: str, level: int, message: str) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, message, None, None)


def test_py4j_retry_notice_is_left_out_and_failures_kept() -> None:
    assert not _not_py4j_retry(_record("root", logging.INFO, "Exception while sending command."))
    assert _not_py4j_retry(_record("root", logging.ERROR, "Exception while sending command."))
    assert _not_py4j_retry(_record("kappaplus.runtime", logging.INFO, "run finished"))
