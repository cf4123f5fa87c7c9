"""The figures the README and the known limits quote as measurements are the ones the
benchmarks record.

A page that keeps quoting a ratio after the benchmark moved on misleads the reader: every
ratio (``1.54x``) and percentage of ``docs/limits.md`` (the known limits), and of any README
line that says it was measured, must appear in ``docs/benchmarks.md`` (the figures of record)
or ``docs/benchmarks-history.md`` (the dated runs before them).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIGURE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?(?:x|%))(?![\w])")


def quoted_figures(text: str, *, every_line: bool = False) -> set[str]:
    """Ratios and percentages in a "Known limits" section (or in every line) and in lines
    about measurements.

    >>> sorted(quoted_figures("## Known limits\\n- took 1.54x, read 20%\\n## Next\\n- 2x\\n"))
    ['1.54x', '20%']
    >>> sorted(quoted_figures("## A\\nmeasured: 0.89x the time\\nat most 2x per batch\\n"))
    ['0.89x']
    >>> sorted(quoted_figures("# Known limits\\n- 1.2x\\n", every_line=True))
    ['1.2x']
    """
    figures: set[str] = set()
    section = ""
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        if every_line or section == "Known limits" or "measured" in line.lower():
            figures.update(FIGURE.findall(line))
    return figures


def test_every_figure_the_readme_and_the_limits_quote_is_in_the_benchmarks() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    limits = (ROOT / "docs" / "limits.md").read_text(encoding="utf-8")
    recorded = "\n".join(
        (ROOT / "docs" / name).read_text(encoding="utf-8")
        for name in ("benchmarks.md", "benchmarks-history.md")
    )
    in_limits = quoted_figures(limits, every_line=True)
    assert len(in_limits) >= 5, in_limits  # the limits still quote the figures of record
    figures = quoted_figures(readme) | in_limits
    missing = sorted(f for f in figures if f not in recorded)
    assert missing == [], f"figures quoted but not in the benchmarks pages: {missing}"
