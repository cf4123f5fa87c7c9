"""``kappa run`` imports job modules from the working directory, as the getting-started
guide shows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

JOB = """
from pyspark.sql import functions as F
from kappaplus.jobs import InputSpec, Job, OutputSpec

def counts(inputs, params):
    return {"counts": inputs["rides"].groupBy("city").count()}

JOB = Job(
    name="ride-counts",
    inputs=[InputSpec("rides", "ride_id string, city string, event_time timestamp", "event_time")],
    outputs=[OutputSpec("counts", output_mode="update")],
    transform=counts,
    watermark_delay="10 seconds",
)
"""


def test_kappa_run_imports_the_job_module_from_the_working_directory(tmp_path: Path) -> None:
    package = tmp_path / "myjobs"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "rides.py").write_text(JOB)
    # the TOML next to the module is found and validated: its unknown key is the error,
    # so the module was imported (and nothing started Spark)
    (package / "rides.toml").write_text("no_such_key = 1\n")
    kappa = Path(sys.executable).with_name("kappa")
    result = subprocess.run(
        [str(kappa), "run", "myjobs.rides:JOB", "--mode", "backfill"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "KAPPA_HOME": str(tmp_path / ".kappa")},
    )
    output = result.stdout + result.stderr
    assert "cannot import" not in output, output
    assert result.returncode == 2, output
    assert "no_such_key" in output, output
