"""The getting-started guide (``docs/getting-started.md``), followed literally in an empty
folder.

The code blocks between ``<!-- guide:start -->`` and ``<!-- guide:end -->`` are taken from
the page as they are: a block whose first line is ``# <path>`` is that file, the bash
blocks run in order in one shell (so ``eval "$(kappa up --print-env)"`` carries over). The
backfilled windows are then compared with counts computed from the Parquet files by hand,
so the test breaks when the guide drifts from the code.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.dataset as ds
import pytest

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "getting-started.md"
FENCE = re.compile(r"```(\w+)\n(.*?)```", re.S)


def guide_blocks() -> list[tuple[str, str]]:
    text = GUIDE.read_text(encoding="utf-8")
    start, end = text.index("<!-- guide:start -->"), text.index("<!-- guide:end -->")
    return FENCE.findall(text[start:end])


def test_the_guide_has_files_and_commands() -> None:
    blocks = guide_blocks()
    files = [body.split("\n", 1)[0] for kind, body in blocks if kind in ("python", "toml")]
    assert "# myjobs/rides.py" in files and "# myjobs/rides.toml" in files
    commands = "\n".join(body for kind, body in blocks if kind == "bash")
    for step in (
        "kappa up",
        "kappa table register",
        "kappa topic create",
        "kappa run",
        "kappa check",
    ):
        assert step in commands


# slow (~3 min: `kappa up` and six `kappa` commands); the README steps run by default
# (tests/test_readme.py)
@pytest.mark.slow
def test_the_users_guide_backfills_as_written(tmp_path: Path) -> None:
    script = ["set -euo pipefail"]
    for kind, body in guide_blocks():
        first = body.split("\n", 1)[0]
        if kind in ("python", "toml") and first.startswith("# "):
            target = tmp_path / first[2:].strip()
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(body)
        elif kind == "bash":
            script.append(body)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAPPA_")}
    # but the quick JIT tier of every test `kappa` process (tests/conftest.py): JVM flags
    # only, nothing the guide's commands read or find
    env["KAPPA_DRIVER_JAVA_OPTIONS"] = os.environ.get("KAPPA_DRIVER_JAVA_OPTIONS", "")
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    env["COLUMNS"] = "80"
    try:
        done = subprocess.run(
            ["bash", "-c", "\n".join(script)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=1500,
        )
    finally:
        subprocess.run(["kappa", "down"], cwd=tmp_path, env=env, capture_output=True, timeout=120)
    output = done.stdout + done.stderr[-4000:]
    assert done.returncode == 0, output
    assert "registered lake.rides" in done.stdout, output
    assert "rows         3,000 (from file metadata)" in done.stdout, output
    assert "created topic 'rides' with 1 partition(s)" in done.stdout, output
    assert "ride-counts" in done.stdout and "finished" in done.stdout, output
    # a quiet CLI: Spark's own output (JVM start-up warnings, log4j) is in the state
    # directory's log, not on the terminal
    for noise in ("Using incubator modules", "WARN Utils", "SQLQueryContextLogger"):
        assert noise not in done.stderr, output
    spark_log = tmp_path / ".kappa" / "logs" / "spark-driver.log"
    assert "Using incubator modules" in spark_log.read_text(), spark_log

    lake = ds.dataset(tmp_path / "lake" / "rides", format="parquet", partitioning="hive")
    truth: Counter[tuple[int, str]] = Counter()
    for row in lake.to_table(columns=["city", "event_time"]).to_pylist():
        seconds = int(row["event_time"].timestamp())
        truth[(seconds - seconds % 600, row["city"])] += 1
    out = tmp_path / ".kappa" / "warehouse" / "agg.db" / "ride_counts_backfill"
    rows = ds.dataset(out, format="parquet", partitioning="hive").to_table().to_pylist()
    produced = Counter({(int(r["start"].timestamp()), r["city"]): r["count"] for r in rows})
    assert len(rows) == len(produced)  # each window once
    assert produced == truth
    assert sum(produced.values()) == 3000
    # step 6's `kappa sql`: the first windows, from the catalog the run wrote them into
    first = min(produced)
    shown = f"{datetime.fromtimestamp(first[0], UTC):%Y-%m-%d %H:%M:%S}"
    assert "first 5 rows" in done.stdout and shown in done.stdout, output
    assert f"│ {first[1]}" in done.stdout and f"{produced[first]} " in done.stdout, output

    # step 7: the same rides in another pipeline's shape (renamed, epoch ms), mapped by the
    # config, give the same windows
    assert "ts_ms" in done.stdout and "city_name" in done.stdout, output  # kappa check
    raw = tmp_path / ".kappa" / "warehouse" / "agg.db" / "ride_counts_raw_backfill"
    rows = ds.dataset(raw, format="parquet", partitioning="hive").to_table().to_pylist()
    mapped = Counter({(int(r["start"].timestamp()), r["city"]): r["count"] for r in rows})
    assert len(rows) == len(mapped) and mapped == truth
