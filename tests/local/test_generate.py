"""``python -m kappaplus.local.generate``: the demo data command over the example generators."""

from __future__ import annotations

import subprocess
import sys

from kappaplus.examples.generate import driver_events, rider_events


def test_the_command_generates_what_the_generators_give() -> None:
    args = ["--start", "2024-03-01T00:00:00", "--hours", "24", "--riders", "5", "--drivers", "2"]
    args += ["--seed", "3"]
    done = subprocess.run(
        [sys.executable, "-m", "kappaplus.local.generate", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    riders = rider_events(riders=5, start="2024-03-01T00:00:00", hours=24, seed=3)
    drivers = driver_events(drivers=2, start="2024-03-01T00:00:00", hours=24, seed=3)
    assert riders and drivers
    assert done.stdout.strip() == f"{len(riders)} rider events, {len(drivers)} driver events"
