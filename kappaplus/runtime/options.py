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
kappaplus.core.errors.ConfigError: option 'mode' = 'replay': expected one of 'stream', ...
"""

from __future__ import annotations

import re
from dataclasses import field
from pathlib import Path
from typing import Any

from kappaplus.config import AVAILABLE_NOW, DEFAULT_TRIGGER_INTERVAL
from kappaplus.core.errors import ConfigError
from kappaplus.core.modes import Mode
from kappaplus.core.options import (
    BOOL,
    DURATION_TEXT,
    PATH,
    TIMESTAMP_TEXT,
    Kind,
    check_fields,
    choice,
    integer,
    option,
    options_class,
    positive_number,
)
from kappaplus.core.timeutil import parse_duration, parse_timestamp

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


def _trigger(text: str, option: str) -> str:
    return normalize_trigger(text, option) or text


def _run_id(text: str, option: str) -> str:
    if slug(text) != text:
        raise ConfigError(option, text, "expected letters, digits, '_', '-', '.'")
    return text


TRIGGER: Kind[str] = Kind("available-now, once or an interval like '10 seconds'", _trigger)
SECONDS = positive_number("a positive number of seconds")


@options_class
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
      ``<root>/<job>/<mode>/<identity>/<output>`` (:mod:`kappaplus.runtime.state.identity`).
    - ``fresh``: start over instead of resuming: the run's checkpoint is set aside and
      deleted once the run's target checks pass; a refused run puts it back
      (:func:`kappaplus.runtime.state.checkpoints.prepare_checkpoint`).
    - ``append``: write even where an output table holds another run's rows over event
      times this run writes (deliberately: both runs' rows stay); without it (or
      ``replace_range``) such a run is refused (:mod:`kappaplus.runtime.state.target_claims`).
    - ``replace_range``: backfill only: replace those rows over this run's range with this
      run's (:mod:`kappaplus.runtime.state.range_replace`).
    - ``progress``: draw a live progress table (``rich``); off, progress is logged.
    - ``audit``: write per-bucket counts of every stage to the audit table
      (:mod:`kappaplus.audit`).
    - ``metrics_port``: serve Prometheus metrics on this port while the run lasts
      (:mod:`kappaplus.runtime.observe.metrics`; 0 picks a free port).
    - ``catch_up``: a stream or bootstrap with a processing-time trigger first runs its
      micro-batches back to back (``availableNow`` rounds) until within one trigger of the
      head, then switches to its trigger on the same checkpoint
      (:mod:`kappaplus.runtime.catch_up`); off, every batch waits for the trigger.
    """

    mode: Mode = option("mode", choice(Mode))
    start: str | None = option("start", TIMESTAMP_TEXT, default=None)
    end: str | None = option("end", TIMESTAMP_TEXT, default=None)
    trigger: str | None = option("trigger", TRIGGER, default=None)
    until_idle: float | None = option("untilIdle", SECONDS, default=None)
    timeout: float | None = option("timeout", SECONDS, default=None)
    checkpoint_root: Path | None = option("checkpointRoot", PATH, default=None)
    fresh: bool = option("fresh", BOOL, default=False)
    progress: bool = option("progress", BOOL, default=False)
    run_id: str | None = option("runId", Kind("a run id", _run_id), default=None)
    cutoff: str | None = option("cutoff", TIMESTAMP_TEXT, default=None)
    lateness: str | None = option("lateness", DURATION_TEXT, default=None)
    """A :class:`~kappaplus.core.timeutil.Duration` (text and ``.micros``) once checked."""
    poll_seconds: float = option("pollSeconds", SECONDS, default=1.0)
    extra: dict[str, Any] = field(default_factory=dict)
    audit: bool = option("audit", BOOL, default=True)
    metrics_port: int | None = option("metricsPort", integer(0, 65535), default=None)
    append: bool = option("append", BOOL, default=False)
    replace_range: bool = option("replaceRange", BOOL, default=False)
    catch_up: bool = option("catchUp", BOOL, default=True)

    def __post_init__(self) -> None:
        check_fields(self)
        if self.append and self.replace_range:
            raise ConfigError(
                "replace_range",
                True,
                "--append adds this run's rows beside another run's, --replace-range replaces "
                "them: pass one of the two",
            )
        if self.replace_range and not self.mode.has_end:
            raise ConfigError(
                "replace_range",
                True,
                f"is an option of --mode backfill (a bounded [start, end) to replace); a "
                f"{self.mode} run has no end: write to another table, or pass --append",
            )
        if self.mode.lake_bound != "cutoff":
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
        if not self.mode.reads_lake and (self.start is not None or self.end is not None):
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

    @property
    def start_micros(self) -> int | None:
        return parse_timestamp(self.start, "start") if self.start is not None else None

    @property
    def end_micros(self) -> int | None:
        return parse_timestamp(self.end, "end") if self.end is not None else None

    def lake_bound(self) -> str | None:
        """The value of the option that ends the lake's range in this mode (``end`` of a
        backfill, ``cutoff`` of a bootstrap), or None (not given, or a stream)."""
        name = self.mode.lake_bound
        return None if name is None else getattr(self, name)

    def effective_trigger(self, configured: str) -> str:
        """The trigger of this run given the configuration's ``trigger_interval``."""
        if self.trigger is not None:
            return self.trigger
        return AVAILABLE_NOW if self.mode.has_end else configured

    def trigger_kind(self, configured: str = DEFAULT_TRIGGER_INTERVAL) -> str:
        chosen = self.effective_trigger(configured)
        return chosen if chosen in (AVAILABLE_NOW, ONCE) else "processing-time"


def trigger_args(trigger: str) -> dict[str, Any]:
    """Keyword arguments of ``DataStreamWriter.trigger`` for a normalized trigger. An
    interval is passed in the words Spark parses (``N seconds`` / ``N milliseconds``):
    the project's durations also take ``10 secs`` or ``1 min``, which Spark refuses
    only once the query starts.

    >>> trigger_args("available-now"), trigger_args("90 seconds")
    ({'availableNow': True}, {'processingTime': '90 seconds'})
    >>> [trigger_args(t)["processingTime"] for t in ("10 secs", "1 min", "1.5 s")]
    ['10 seconds', '60 seconds', '1500 milliseconds']
    """
    if trigger == AVAILABLE_NOW:
        return {"availableNow": True}
    if trigger == ONCE:
        return {"once": True}
    micros = parse_duration(trigger, "trigger")
    if micros % 1_000_000:
        return {"processingTime": f"{micros // 1000} milliseconds"}
    return {"processingTime": f"{micros // 1_000_000} seconds"}
