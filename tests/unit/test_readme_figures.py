"""The figures the README quotes as measurements are the ones ``docs/benchmarks.md`` records.

A README that keeps quoting a ratio after the benchmark moved on misleads the reader: every
ratio (``1.54x``) and percentage in the README's "Known limits" section, and in any README
line that says it was measured, must appear in ``docs/benchmarks.md``.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIGURE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?(?:x|%))(?![\w])")


def quoted_figures(readme: str) -> set[str]:
    """Ratios and percentages in the Known limits section and in lines about measurements.

    >>> sorted(quoted_figures("## Known limits\\n- took 1.54x, read 20%\\n## Next\\n- 2x\\n"))
    ['1.54x', '20%']
    >>> sorted(quoted_figures("## A\\nmeasured: 0.89x the time\\nat most 2x per batch\\n"))
    ['0.89x']
    """
    figures: set[str] = set()
    section = ""
    for line in readme.splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        if section == "Known limits" or "measured" in line.lower():
            figures.update(FIGURE.findall(line))
    return figures


def test_every_figure_the_readme_quotes_is_in_the_benchmarks() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    benchmarks = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    figures = quoted_figures(readme)
    assert len(figures) >= 5, figures  # the section is still there and still quotes figures
    missing = sorted(f for f in figures if f not in benchmarks)
    assert missing == [], f"README quotes figures docs/benchmarks.md does not have: {missing}"
