"""``kappa demo`` end to end in its own process (a small version): stack up, produce,
archive, stream, backfill, reconcile; then ``kappa down`` leaves nothing running."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from kappaplus.local.processes import pid_alive


def test_demo_reconciles_and_down_stops_everything(tmp_path: Path) -> None:
    env = {**os.environ, "KAPPA_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    kappa = [sys.executable, "-m", "kappaplus.cli"]
    done = subprocess.run(
        [
            *kappa,
            "demo",
            "--riders",
            "40",
            "--days",
            "1",
            "--slice-hours",
            "6",
            "--batch-hours",
            "1",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    assert "demo passed" in out
    recovered = re.search(r"late events recovered by the backfill \((\d+)\)", out)
    reported = re.search(r"late rows the stream reported \((\d+)\)", out)
    assert recovered and reported and recovered.group(1) == reported.group(1)
    assert int(recovered.group(1)) > 0, "the stream dropped some late events"
    assert "every event once" in out

    # kappa reconcile on the demo's outputs gives the demo's figures
    config = tmp_path / "home" / "demo" / "sessionization.toml"
    again = subprocess.run(
        [
            *kappa,
            "reconcile",
            "sessionization",
            "--config",
            str(config),
            "--json",
            "--chart",
            str(tmp_path / "reconcile.html"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    figures = json.loads(again.stdout[again.stdout.index("{") :])
    for label, key in (
        ("windows identical in both", "identical"),
        ("windows that differ (same key)", "different"),
        ("windows only in the backfill", "only_backfill"),
        ("windows still open in production (end after its watermark)", "open_in_production"),
    ):
        shown = re.search(re.escape(label) + r"\W+(\d+)", out)
        assert shown and int(shown.group(1)) == figures[key], (label, figures[key])
    assert figures["recovered"] == int(recovered.group(1)) == figures["late_rows_reported"]
    assert figures["late_rows_kept"] == figures["recovered"], "the dropped rows were kept"
    assert figures["late_table"] == "demo.rider_sessions_late"
    assert (tmp_path / "reconcile.html").read_text().startswith("<!doctype html>")

    pids = [json.loads(p.read_text())["pid"] for p in (tmp_path / "home").glob("*/*.pid")]
    assert pids and all(pid_alive(pid) for pid in pids), "services keep running after the demo"
    down = subprocess.run([*kappa, "down"], env=env, capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not any(pid_alive(pid) for pid in pids), "kappa down stops broker and metastore"
