"""Typed, validated options of one run of a job (``kappa run``), checked once, up front.

What may differ between a production stream and a backfill is already in the job's
configuration (:mod:`kappaplus.config`); these options only say *which* run this is: the
mode, the backfill range, the trigger, when to stop and where checkpoints live.

>>> RunOptions(mode="backfill", start="2024-03-01", end="2024-03-02").trigger_kind()
'available-now'
>>> RunOptions(mode="stream", trigger="5 seconds").trigger_kind()
'processing-time'
>>> RunOptions(mode="bootstrap", start="2024-03-01", cutoff="2024-03-29").trigger_kind()
'processing-time'
>>> RunOptions(mode="replay")  # doctest: +IGNORE_EXCEPTION_DETAIL
Traceback (most recent call last):
kappaplus.errors.ConfigError: option 'mode' = 'replay': expected stream, backfill or bootstrap
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kappaplus.config import AVAILABLE_NOW
from kappaplus.errors import ConfigError
from kappaplus.modes import MODES, Mode
from kappaplus.timeutil import parse_duration, parse_timestamp

ONCE = "once"
_SLUG = re.compile(r"[^A-Za-z0-9_.-]+")


def slug(name: str) -> str:
    """A name safe for directories, query names and table-commit logs.

    >>> slug("Rider sessions / v2")
    'Rider-sessions-v2'
    """
    cleaned = _SLUG.sub("-", name.strip()).strip("-.")
    return cleaned or "job"


def normalize_trigger(value: str | None, option: str = "trigger") -> str | None:
    """``available-now``, ``once`` or a processing-time interval like ``10 seconds``."""
    if value is None:
        return None
    text = str(value).strip().lower()
    if text in ("available-now", "availablenow", "available_now"):
        return AVAILABLE_NOW
    if text == ONCE:
        return ONCE
    micros = parse_duration(value, option)
    if micros <= 0:
        raise ConfigError(option, value, "a processing-time trigger interval must be positive")
    return str(value).strip()


@dataclass(frozen=True)
class RunOptions:
    """One run of a job.

    - ``mode``: ``stream`` (Kafka in), ``backfill`` (Hive in, backfill targets out) or
      ``bootstrap`` (Hive history up to ``cutoff``, then Kafka, production targets out:
      the lambda source, :mod:`kappaplus.connectors.hybrid.source`).
    - ``start`` / ``end``: backfill event-time range ``[start, end)`` (ISO-8601, naive
      means UTC); default the ``start``/``end`` of each input's Hive binding, else the
      whole table as it is when the run starts. A bootstrap takes ``start`` only.
    - ``cutoff``: bootstrap only, required: the lake owns event times before it, Kafka
      the rest (default the ``end`` of each input's Hive binding).
    - ``lateness``: bootstrap only: how much earlier than its event time a Kafka record's
      timestamp may be; Kafka is read from ``cutoff - lateness`` (default: the Hive
      binding's ``max_lateness``, else ``1 hour``).
    - ``trigger``: ``available-now`` (process what exists, then stop), ``once`` or a
      processing-time interval. Default: ``available-now`` for a backfill, the
      configuration's ``trigger_interval`` for a stream.
    - ``until_idle``: seconds; stop once no query has read a row for that long (a stream
      run that drains what is there, e.g. for a demo or a test).
    - ``timeout``: seconds; stop (cleanly) after that long whatever the state.
    - ``checkpoint_root``: default the config's ``checkpoint_dir``, else
      ``state_dir()/checkpoints``; a run writes under
      ``<root>/<job>/<mode>/<identity>/<output>`` (:mod:`kappaplus.runtime.identity`).
    - ``fresh``: delete this mode's checkpoints first (start over instead of resuming).
    - ``progress``: draw a live progress table (``rich``); off, progress is logged.
    - ``audit``: write per-bucket counts of every stage to the audit table
      (:mod:`kappaplus.audit`).
    - ``metrics_port``: serve Prometheus metrics on this port while the run lasts
      (:mod:`kappaplus.runtime.metrics`; 0 picks a free port).
    """

    mode: Mode
    start: str | None = None
    end: str | None = None
    trigger: str | None = None
    until_idle: float | None = None
    timeout: float | None = None
    checkpoint_root: Path | None = None
    fresh: bool = False
    progress: bool = False
    run_id: str | None = None
    cutoff: str | None = None
    lateness: str | None = None
    poll_seconds: float = 1.0
    extra: dict[str, Any] = field(default_factory=dict)
    audit: bool = True
    metrics_port: int | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError("mode", self.mode, f"expected one of {', '.join(MODES)}")
        object.__setattr__(self, "mode", Mode(self.mode))
        if self.mode != "bootstrap":
            for name in ("cutoff", "lateness"):
                if getattr(self, name) is not None:
                    raise ConfigError(
                        name, getattr(self, name), "is an option of --mode bootstrap only"
                    )
        elif self.end is not None:
            raise ConfigError(
                "end",
                self.end,
                "a bootstrap has no end: it reads the lake up to --cutoff, then Kafka continuously",
            )
        if self.cutoff is not None:
            cutoff = parse_timestamp(self.cutoff, "cutoff")
            if self.start is not None and parse_timestamp(self.start, "start") >= cutoff:
                raise ConfigError("start", self.start, f"must be before cutoff {self.cutoff!r}")
        if self.lateness is not None and parse_duration(self.lateness, "lateness") < 0:
            raise ConfigError("lateness", self.lateness, "must not be negative")
        if self.mode == "stream" and (self.start is not None or self.end is not None):
            raise ConfigError(
                "start" if self.start is not None else "end",
                self.start if self.start is not None else self.end,
                "an event-time range is for --mode backfill; a stream reads Kafka from its "
                "configured starting offsets",
            )
        start = parse_timestamp(self.start, "start") if self.start is not None else None
        end = parse_timestamp(self.end, "end") if self.end is not None else None
        if start is not None and end is not None and start >= end:
            raise ConfigError("start", self.start, f"must be before end {self.end!r}")
        object.__setattr__(self, "trigger", normalize_trigger(self.trigger))
        for name in ("until_idle", "timeout", "poll_seconds"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or float(value) <= 0):
                raise ConfigError(name, value, "expected a positive number of seconds")
        if self.run_id is not None and slug(self.run_id) != self.run_id:
            raise ConfigError("run_id", self.run_id, "expected letters, digits, '_', '-', '.'")
        if self.checkpoint_root is not None:
            object.__setattr__(self, "checkpoint_root", Path(self.checkpoint_root))

    @property
    def start_micros(self) -> int | None:
        return parse_timestamp(self.start, "start") if self.start is not None else None

    @property
    def end_micros(self) -> int | None:
        return parse_timestamp(self.end, "end") if self.end is not None else None

    def effective_trigger(self, configured: str) -> str:
        """The trigger of this run given the configuration's ``trigger_interval``."""
        if self.trigger is not None:
            return self.trigger
        return AVAILABLE_NOW if self.mode.has_end else configured

    def trigger_kind(self, configured: str = "10 seconds") -> str:
        chosen = self.effective_trigger(configured)
        return chosen if chosen in (AVAILABLE_NOW, ONCE) else "processing-time"


def trigger_args(trigger: str) -> dict[str, Any]:
    """Keyword arguments of ``DataStreamWriter.trigger`` for a normalized trigger.

    >>> trigger_args("available-now"), trigger_args("90 seconds")
    ({'availableNow': True}, {'processingTime': '90 seconds'})
    """
    if trigger == AVAILABLE_NOW:
        return {"availableNow": True}
    if trigger == ONCE:
        return {"once": True}
    return {
        "processingTime": f"{parse_duration(trigger, 'trigger') // 1000} milliseconds"
        if parse_duration(trigger, "trigger") % 1_000_000
        else trigger
    }
