"""Every command that takes a job imports it from the working folder, as ``kappa run`` does
(issue 24 item 2: ``kappa reconcile`` failed "cannot import module 'flights_job'")."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from kappaplus.jobs import Job, load_job

JOB_MODULE = """
from kappaplus.jobs import Job
JOB = Job.__new__(Job)
"""


def test_load_job_imports_a_package_from_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "flights_job_cwd_probe"
    package.mkdir()
    (package / "__init__.py").write_text(JOB_MODULE)
    monkeypatch.chdir(tmp_path)
    # As under the `kappa` console script: neither '' nor the working folder on sys.path.
    cwd = os.getcwd()
    monkeypatch.setattr(
        sys, "path", [p for p in sys.path if p not in ("", cwd) and os.path.abspath(p) != cwd]
    )
    job = load_job("flights_job_cwd_probe:JOB")
    assert isinstance(job, Job)
    sys.modules.pop("flights_job_cwd_probe", None)
