"""The Iceberg and Delta benches' shared comparison: for one table, the truth (C) once, then
``rounds`` rounds of B (one Spark batch), A (the backfill, ``reader = auto``) and A-py (the
backfill with ``reader = "python"``), one after the other in each round, so a drift of the
machine's speed hits every way alike; each figure is the median over the rounds and each
ratio the median of the rounds' ratios."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

HEADER = (
    "| days | layout | rows | data files | A: {kind} backfill s (reader) | A-py: Python reader s "
    "| B: Spark batch s | C: {truth} s | A/B | A-py/B | results vs C |"
)
RULE = "|---|---|---|---|---|---|---|---|---|---|---|"


def compare_ways(
    child: Callable[..., tuple[Any, dict]],
    work: Path,
    *,
    days: int,
    layout: str,
    rows: int,
    rounds: int,
    **table: Any,
) -> str:
    """One table row: the three ways over ``rounds`` rounds against the truth."""
    tc, truth = child("truth", work, **table)
    seconds: dict[str, list[float]] = {"A": [], "A-py": [], "B": []}
    pss: dict[str, list[float]] = {"A": [], "A-py": [], "B": []}
    equal = {"A": True, "A-py": True, "B": True}
    readers, batches, files = set(), set(), 0
    for r in range(rounds):
        tb, batch = child("batch", work, **table)
        ta, stream = child(
            "stream", work, days=days, checkpoint=str(work / f"cp-{layout}-{r}"), **table
        )
        tp, py = child(
            "stream",
            work,
            days=days,
            checkpoint=str(work / f"cp-py-{layout}-{r}"),
            reader="python",
            **table,
        )
        for way, timed, out in (("B", tb, batch), ("A", ta, stream), ("A-py", tp, py)):
            seconds[way].append(timed.seconds)
            pss[way].append(timed.peak_pss_mb)
            equal[way] = equal[way] and out["rows"] == truth["rows"]
        readers.add(stream["reader"])
        batches.add(stream["batches"])
        files = batch["files"]

    def med(values: list[float]) -> float:
        return statistics.median(values)

    a_b = med([a / b for a, b in zip(seconds["A"], seconds["B"], strict=True)])
    p_b = med([a / b for a, b in zip(seconds["A-py"], seconds["B"], strict=True)])
    ok = ", ".join(f"{w} {'equal' if equal[w] else 'DIFFERENT'}" for w in ("A", "A-py", "B"))
    return (
        f"| {days} | {layout} | {rows:,} | {files} | {med(seconds['A']):.1f} "
        f"({'/'.join(sorted(readers))}, {'/'.join(map(str, sorted(batches)))} batches, "
        f"{med(pss['A']):.0f} MB) | {med(seconds['A-py']):.1f} ({med(pss['A-py']):.0f} MB) | "
        f"{med(seconds['B']):.1f} ({med(pss['B']):.0f} MB) | {tc.seconds:.1f} "
        f"({tc.peak_pss_mb:.0f} MB) | **{a_b:.2f}x** | {p_b:.2f}x | {ok} |"
    )
