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

    pids = [json.loads(p.read_text())["pid"] for p in (tmp_path / "home").glob("*/*.pid")]
    assert pids and all(pid_alive(pid) for pid in pids), "services keep running after the demo"
    down = subprocess.run([*kappa, "down"], env=env, capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not any(pid_alive(pid) for pid in pids), "kappa down stops broker and metastore"
