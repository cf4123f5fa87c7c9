"""``kappa demo --lake hive`` vs ``--lake iceberg``: the demo's phase timings side by side in
one run, each demo in its own process and its own state directory (a fresh stack each).

    .venv/bin/python bench/bench_demo_lakes.py [--riders 150] [--days 3] [--rounds 1]
        [--lakes hive,iceberg]

Rounds alternate the order (hive, iceberg, then iceberg, hive...) so neither lake always
runs first on a machine warming up. Each demo must pass (exit 0: its reconciliation holds);
the phases are the ones the demo prints on its ``timings:`` line. Prints one table per
phase (seconds per lake, median over rounds) and the ratio of each lake to the first.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TIMINGS = re.compile(r"^timings: (.*)$", re.MULTILINE)
PHASE = re.compile(r"^(.*?) (\d+)s$")


def run_demo(lake: str, riders: int, days: int, home: Path) -> dict[str, float]:
    """One demo in its own process; its phase timings (the lake's name dropped from the
    phase names, so phases compare across lakes)."""
    env = {**os.environ, "KAPPA_HOME": str(home), "COLUMNS": "200"}
    kappa = [sys.executable, "-m", "kappaplus.cli"]
    command = [*kappa, "demo", "--lake", lake, "--riders", str(riders), "--days", str(days)]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=3600)
    finally:
        subprocess.run([*kappa, "down"], env=env, capture_output=True, timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"kappa demo --lake {lake} failed:\n{done.stdout[-3000:]}")
    found = TIMINGS.search(done.stdout)
    if found is None:
        raise SystemExit(f"kappa demo --lake {lake}: no timings line")
    phases: dict[str, float] = {}
    for part in found.group(1).split("; "):
        matched = PHASE.match(part.strip())
        if matched:
            name = re.sub(r" \((Hive|Iceberg|Delta)\)$", "", matched.group(1))
            phases[name] = float(matched.group(2))
    return phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--riders", type=int, default=150)
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--lakes", default="hive,iceberg")
    args = parser.parse_args()
    lakes = args.lakes.split(",")
    seen: dict[str, list[dict[str, float]]] = {lake: [] for lake in lakes}
    with tempfile.TemporaryDirectory(prefix="bench-demo-lakes-") as work:
        for round_ in range(args.rounds):
            for lake in lakes if round_ % 2 == 0 else list(reversed(lakes)):
                phases = run_demo(lake, args.riders, args.days, Path(work) / f"{lake}-{round_}")
                print(f"round {round_ + 1} {lake}: {phases}", flush=True)
                seen[lake].append(phases)
    first = lakes[0]
    names = list(seen[first][0])
    print(f"\n{args.riders} riders, {args.days} days, {args.rounds} round(s), median seconds")
    print(f"| phase | {' | '.join(lakes)} | {' | '.join(f'{x}/{first}' for x in lakes[1:])} |")
    print(f"|---|{'---|' * (2 * len(lakes) - 1)}")
    for name in names:
        values = [statistics.median(r.get(name, 0.0) for r in seen[lake]) for lake in lakes]
        ratios = [f"{v / values[0]:.2f}" if values[0] else "-" for v in values[1:]]
        cells = " | ".join(f"{v:.0f}" for v in values)
        print(f"| {name} | {cells} | {' | '.join(ratios)} |")


if __name__ == "__main__":
    main()
