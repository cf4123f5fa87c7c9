"""On a cluster the checkpoint root must be a path the executors see: a run whose checkpoints
would default into the driver's state directory is refused, naming ``checkpoint_dir``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kappaplus.config import config_from_dict
from kappaplus.core.errors import ConfigError
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.state.checkpoints import check_shared_checkpoint

RAW = {
    "job": "kappaplus.examples.sessionization:JOB",
    "inputs": {
        "rider_events": {
            "hive": {"table": "lake.rides", "event_time_column": "event_time"},
        }
    },
    "outputs": {"sessions": {"hive": {"table": "agg.sessions"}}},
}


def test_default_checkpoints_are_refused_on_a_cluster_only(tmp_path: Path) -> None:
    config = config_from_dict(RAW)
    run = RunOptions("backfill", "2024-03-01", "2024-03-02")
    with pytest.raises(ConfigError, match="checkpoint_dir.*executors see.*spark://h:7077"):
        check_shared_checkpoint(config, run, "spark://h:7077")
    with pytest.raises(ConfigError, match="--checkpoint"):
        check_shared_checkpoint(config, run, "yarn")
    for local in ("local[2]", "local", "local[2,4]"):
        check_shared_checkpoint(config, run, local)
    # named by the config or the command line: the user's word that it is shared
    check_shared_checkpoint(
        config_from_dict({**RAW, "checkpoint_dir": str(tmp_path)}), run, "spark://h:7077"
    )
    named = RunOptions("backfill", "2024-03-01", "2024-03-02", checkpoint_root=tmp_path)
    check_shared_checkpoint(config, named, "spark://h:7077")


def test_kappa_run_refuses_before_spark_starts(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAPPA_")}
    env["KAPPA_HOME"] = str(tmp_path / "home")
    done = subprocess.run(
        [sys.executable, "-m", "kappaplus", "run", "sessionization", "--mode", "backfill"]
        + ["--start", "2024-03-01", "--end", "2024-03-02", "--master", "spark://127.0.0.1:1"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "checkpoint_dir" in done.stdout and "executors see" in done.stdout, done.stdout
    assert not (tmp_path / "home" / "logs" / "spark-driver.log").exists(), "no Spark started"
