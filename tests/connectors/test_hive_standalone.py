"""The Hive streaming source on a Spark standalone cluster, not only in local mode.

On the session's master and worker (``standalone_cluster``, conftest.py), the test runs
``standalone_job.py`` in a separate Python process (this process already holds the
local-mode session): it writes a partitioned table, streams it with ``read_hive_stream``
(1-hour tumbling count, ``Trigger.AvailableNow``) and compares the result with the same
aggregation as a batch query.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from standalone_cluster import JOB_TIMEOUT, Cluster, daemon_env

HERE = Path(__file__).resolve().parent
JOB = HERE / "standalone_job.py"


# slow (~1 min: a master and two workers); tests/connectors/test_session_cluster.py
# runs a cluster by default
@pytest.mark.slow
@pytest.mark.timeout(JOB_TIMEOUT + 180)
def test_hive_stream_on_standalone_cluster(standalone_cluster: Cluster, tmp_path: Path) -> None:
    job_home = tmp_path / "job"
    env = daemon_env(standalone_cluster.home)
    env["KAPPA_HOME"] = str(job_home)
    env.pop("KAPPA_SPARK_MASTER", None)
    try:
        done = subprocess.run(
            [
                sys.executable,
                str(JOB),
                "--master",
                standalone_cluster.url,
                "--home",
                str(job_home),
                "--rows",
                "4000",
                "--days",
                "2",
            ],
            capture_output=True,
            text=True,
            env=env,
            stdin=subprocess.DEVNULL,
            timeout=JOB_TIMEOUT,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr
        pytest.fail(
            f"standalone job timed out after {JOB_TIMEOUT}s\n--- stdout\n{out}\n--- stderr\n"
            f"{(err or '')[-6000:]}\n{standalone_cluster.diagnostics()}"
        )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    report = (
        f"exit {done.returncode}\n--- stdout\n{done.stdout[-4000:]}\n--- stderr\n"
        f"{done.stderr[-8000:]}\n{standalone_cluster.diagnostics()}"
    )
    assert done.returncode == 0 and lines, report
    result = json.loads(lines[-1].removeprefix("RESULT "))
    context = f"{json.dumps(result, indent=1)}\n{report}"

    assert result["master"] == standalone_cluster.url, context
    assert result["master"].startswith("spark://"), context
    assert result["executors"] >= 1, "an executor besides the driver"
    # Python workers on the executor ran this venv's interpreter, inside the worker's work dir.
    assert result["executor_pythons"] == [result["driver_python"]] == [sys.executable], context
    work = str(standalone_cluster.home / "work")
    assert all(cwd.startswith(work) for cwd in result["executor_cwds"]), context
    assert result["windows"] > 0, context
    assert result["batches"] > 1 and result["data_batches"] > 1, context
    assert result["rows_compared"] == result["windows"], context
    assert result["mismatches"] == 0, context
