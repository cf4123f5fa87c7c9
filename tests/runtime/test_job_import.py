"""``kappa run`` imports job modules from the working directory, as the getting-started
guide shows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import kappaplus

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


def test_a_job_module_that_fails_while_importing_a_missing_package_is_named(
    tmp_path: Path,
) -> None:
    """Issue 47 item 6: the job's module was found; a package it imports is missing. The
    error names the job module, the package it failed on and the error's first line (it
    named the missing package as if it were the job's module, "run from the folder...")."""
    package = tmp_path / "myjobs"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "broken.py").write_text("import nonexistent_module_xyz\n" + JOB)
    (package / "broken.toml").write_text("")
    kappa = Path(sys.executable).with_name("kappa")
    result = subprocess.run(
        [str(kappa), "run", "myjobs.broken:JOB", "--mode", "backfill"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "PATH": "/usr/bin:/bin",
            "KAPPA_HOME": str(tmp_path / ".kappa"),
            # the kappaplus under test (a checkout's, not only the installed one)
            "PYTHONPATH": str(Path(kappaplus.__file__).parents[1]),
        },
    )
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 2, output
    assert "Traceback" not in output, output
    assert "'myjobs.broken' failed while importing 'nonexistent_module_xyz'" in output, output
    assert "No module named 'nonexistent_module_xyz'" in output, output
    assert "run from the folder" not in output, output
