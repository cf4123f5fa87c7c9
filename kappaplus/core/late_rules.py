"""Which rows a stateful operator drops as late: the rule of a job's output, as Spark applies it.

Spark drops an input row of micro-batch ``N`` when the event-time key of its stateful
operator is at or before the watermark the *previous* batch ran under (late rows are
judged by batch ``N-1``'s watermark; state is evicted with batch ``N``'s). The key is:

- ``event_time``: the event time itself (``dropDuplicatesWithinWatermark``, stream-stream
  joins): late when ``t <= watermark``;
- ``window:<size>`` or ``window:<size>/<slide>``: the end of the row's time window
  (``F.window``): late when the end of the *last* window holding ``t`` is at or before the
  watermark (tumbling: its only window; sliding: every window it belongs to is closed);
- ``session:<gap>``: the end of the row's own session window ``[t, t + gap)``
  (``F.session_window``): late when ``t + gap <= watermark``.

``<size>``, ``<slide>`` and ``<gap>`` name job params (durations), so a mode that tunes a
window size tunes the rule with it. Exactness: tumbling windows and ``event_time`` match
Spark row for row; a session row that is late by itself but chained, within the same
micro-batch, to a row of the same key that is not late is kept by Spark (the merged
session is judged) and reported late here; a sliding-window row is reported only once
all of its windows are closed.

>>> rule = LateRule.parse("window:w", {"w": "10 minutes"})
>>> minute = 60_000_000
>>> rule.late_mask([9 * minute, 10 * minute, 25 * minute], 20 * minute).tolist()
[True, True, False]
>>> LateRule.parse("session:gap", {"gap": "30 minutes"}).late_mask([0], 30 * minute).tolist()
[True]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from kappaplus.core.errors import ConfigError
from kappaplus.core.timeutil import parse_duration

Kind = Literal["event_time", "window", "session"]
KINDS: tuple[str, ...] = ("event_time", "window", "session")


@dataclass(frozen=True)
class LateRule:
    """How one output's stateful operator keys rows in event time (see the module docstring).

    ``size``: window size or session gap; ``slide``: window slide (both microseconds)."""

    kind: Kind
    size: int = 0
    slide: int = 0

    @classmethod
    def parse(cls, text: str, params: Mapping[str, Any], key: str = "late_by") -> LateRule:
        """``event_time``, ``window:<param>[/<param>]`` or ``session:<param>``."""
        kind, _, names = str(text).strip().partition(":")
        if kind not in KINDS:
            raise ConfigError(
                key, text, "expected 'event_time', 'window:<param>[/<param>]' or 'session:<param>'"
            )
        if kind == "event_time":
            if names:
                raise ConfigError(key, text, "'event_time' takes no param")
            return cls("event_time")
        parts = [n.strip() for n in names.split("/")] if names else []
        if not parts or any(not p for p in parts) or len(parts) > (2 if kind == "window" else 1):
            raise ConfigError(key, text, f"'{kind}:' names the job param(s) of its duration")
        values = []
        for name in parts:
            if name not in params:
                raise ConfigError(key, text, f"no job param {name!r} (params: {', '.join(params)})")
            micros = parse_duration(str(params[name]), f"params.{name}")
            if micros <= 0:
                raise ConfigError(f"params.{name}", params[name], "must be positive")
            values.append(micros)
        size = values[0]
        slide = values[1] if len(values) > 1 else size
        return cls(kind, size, slide)  # type: ignore[arg-type]

    def late_mask(self, times: Sequence[int | None] | np.ndarray, watermark: int) -> np.ndarray:
        """Which of ``times`` (epoch microseconds; None: no event time, never late) are late
        against ``watermark`` (epoch microseconds; 0: no watermark yet, nothing is late)."""
        if isinstance(times, np.ndarray):
            values = times.astype("float64")
        else:
            values = np.asarray([np.nan if t is None else t for t in times], dtype="float64")
        if watermark <= 0 or values.size == 0:
            return np.zeros(values.shape, dtype=bool)
        present = ~np.isnan(values)
        t = np.where(present, values, 0).astype("int64")
        if self.kind == "event_time":
            key = t
        elif self.kind == "session":
            key = t + self.size
        else:
            key = t - np.mod(t, self.slide) + self.size
        return present & (key <= watermark)
