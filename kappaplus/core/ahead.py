"""``max_ahead`` of an input's event-time bounds as a rule: how far ahead of its peers a
Kafka record's event time may be before it is a dead letter instead of moving the watermark
(applied by :func:`kappaplus.core.event_time.far_ahead_reasons`). Free of Spark, so the
configuration models can name its default.
"""

from __future__ import annotations

from dataclasses import dataclass

from kappaplus.core.timeutil import Duration

AUTO = "auto"
"""``max_ahead = "auto"``, the default: see :class:`AheadRule`."""
AUTO_SPREAD = 2
"""How many times its peers' span behind their median ``auto`` adds to its floor."""


@dataclass(frozen=True)
class AheadRule:
    """How far ahead of its peers (the median event time of the records read with it from
    its Kafka partition in the same micro-batch) a record's event time may be: ``reach``
    beyond that median, plus ``spread`` times how far the peers reach behind it.

    An explicit ``max_ahead = "2 days"`` is ``reach`` alone (``spread`` 0). ``auto`` (the
    default) adds twice the peers' own span behind their median to a floor: a batch of a
    backlog spans hours of event time, so its last record is legitimately as far ahead of
    the median as its first is behind; a record beyond twice that plus the floor is not
    part of the batch's stream of time.

    >>> rule = AheadRule.parse("auto 1 day", "maxAhead")
    >>> rule.text(), rule.allowed(median=100, earliest=40) - rule.reach.micros
    ('auto 1 day', 120)
    >>> AheadRule.parse("2 days", "maxAhead").text()
    '2 days'
    """

    reach: Duration
    spread: int = 0

    @classmethod
    def parse(cls, text: str, option: str = "max_ahead") -> AheadRule:
        """``"<duration>"`` or ``"auto <floor duration>"`` (the text :meth:`text` writes)."""
        head, _, rest = text.strip().partition(" ")
        if head.lower() == AUTO:
            return cls(Duration.parse(rest.strip(), option), AUTO_SPREAD)
        return cls(Duration.parse(text.strip(), option))

    def text(self) -> str:
        return f"{AUTO} {self.reach}" if self.spread else str(self.reach)

    def allowed(self, median: int, earliest: int) -> int:
        """Microseconds a record may be ahead of ``median`` (its peers' earliest: ``earliest``)."""
        return self.reach.micros + self.spread * max(median - earliest, 0)

    def describe(self) -> str:
        """The rule in words, as the log and a dead letter's reason show it."""
        if not self.spread:
            return f"max_ahead = {self.reach}"
        return f"max_ahead = auto: {self.reach} plus twice their span behind the median"
