"""Shipping kappaplus the way Spark users do: a wheel with the JVM reader inside, the
``kappa`` command as ``python -m kappaplus`` and as a ``spark-submit`` script, the job package
shipped with ``--py-files``.

The wheel is built from this checkout, installed (without dependencies: the test's own
environment provides pyspark and the rest) into a folder nothing else imports from, and run
from there; the backfill under ``spark-submit`` reads a job that exists only inside a zip and
is compared with counts computed from the Parquet files by hand.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parent.parent

JOB = """
from pyspark.sql import functions as F

from kappaplus.jobs import InputSpec, Job, OutputSpec


def counts(inputs, params):
    rides = inputs["rides"]
    per_window = rides.groupBy(F.window("event_time", "10 minutes"), "city").count()
    return {"counts": per_window.select(F.col("window.start").alias("start"), "city", "count")}


JOB = Job(
    name="shipped-counts",
    inputs=[InputSpec("rides", "ride_id string, city string, event_time timestamp", "event_time")],
    outputs=[OutputSpec("counts", output_mode="append", event_time_column="start")],
    transform=counts,
    watermark_delay="1 minute",
)
"""

CONFIG = """
job = "shippedjobs.rides:JOB"

[inputs.rides.kafka]
topic = "rides"
bootstrap_servers = "127.0.0.1:1"

[inputs.rides.hive]
table = "lake.shipped_rides"
event_time_column = "event_time"
partition_format = "dt=%Y-%m-%d/hr=%H"

[outputs.counts.hive]
table = "agg.shipped_counts"
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout, installed into a folder of its own; returns the folder."""
    work = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(work)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = work.glob("kappaplus-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "kappaplus/jars/kappaplus-jvm.jar" in names, "the JVM reader is in the wheel"
    assert "kappaplus/conf/log4j2.properties" in names
    target = work / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target)]
        + [str(wheel)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return target


def _env(site: Path, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAPPA_", "PYSPARK_"))}
    env["PYTHONPATH"] = str(site)  # the wheel's kappaplus before the checkout's
    env["KAPPA_HOME"] = str(home)
    # JVM flags only: the tests' quick JIT tier and class archive (tests/conftest.py), for
    # a `kappa` driver (from KAPPA_DRIVER_JAVA_OPTIONS) and the one spark-submit starts
    jvm = os.environ.get("KAPPA_DRIVER_JAVA_OPTIONS", "")
    env["KAPPA_DRIVER_JAVA_OPTIONS"] = env["SPARK_SUBMIT_OPTS"] = jvm
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return env


def test_the_wheel_runs_as_a_module_with_its_jar(installed: Path, tmp_path: Path) -> None:
    code = "import kappaplus, kappaplus.jars as j; print(kappaplus.__file__); print(j.jvm_jar())"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=_env(installed, tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    module, jar = done.stdout.split()
    assert module.startswith(str(installed)) and jar.startswith(str(installed)), done.stdout
    helped = subprocess.run(
        [sys.executable, "-m", "kappaplus", "run", "--help"],
        cwd=tmp_path,
        env=_env(installed, tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert helped.returncode == 0 and "Usage: kappa run" in helped.stdout, helped.stderr


def _rides(lake: Path) -> Counter[tuple[int, str]]:
    """Two hours of rides in hourly partitions; returns the true counts per 10-minute window."""
    start = datetime(2024, 3, 1, tzinfo=UTC)
    truth: Counter[tuple[int, str]] = Counter()
    for hour in range(2):
        rows = []
        for i in range(300):
            event = start + timedelta(hours=hour, seconds=i * 12 + 3)
            city = ("paris", "lima", "oslo")[i % 3]
            rows.append({"ride_id": f"r{hour}-{i}", "city": city, "event_time": event})
            seconds = int(event.timestamp())
            truth[(seconds - seconds % 600, city)] += 1
        folder = lake / "dt=2024-03-01" / f"hr={hour:02d}"
        folder.mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(rows), folder / "part-0.parquet")
    return truth


# slow (~1 min: spark-submit of a zipped job); the wheel's own run stays in the default run
@pytest.mark.slow
def test_spark_submit_runs_a_backfill_of_a_job_shipped_as_a_zip(
    installed: Path, tmp_path: Path
) -> None:
    lake, home, work = tmp_path / "lake", tmp_path / "home", tmp_path / "work"
    work.mkdir()
    truth = _rides(lake)
    jobs = tmp_path / "shippedjobs.zip"
    with zipfile.ZipFile(jobs, "w") as z:
        z.writestr("shippedjobs/__init__.py", "")
        z.writestr("shippedjobs/rides.py", JOB)
    config = tmp_path / "rides.toml"
    config.write_text(CONFIG)
    env = _env(installed, home)
    register = subprocess.run(
        [sys.executable, "-m", "kappaplus", "table", "register", "lake.shipped_rides"]
        + ["--location", str(lake), "--partition-format", "dt=%Y-%m-%d/hr=%H"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert register.returncode == 0, register.stdout + register.stderr[-3000:]
    import pyspark

    spark_submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    script = installed / "kappaplus" / "submit.py"
    run = subprocess.run(
        [str(spark_submit), "--master", "local[1]", "--py-files", str(jobs), str(script)]
        + ["run", "shippedjobs.rides:JOB", "--config", str(config), "--mode", "backfill"]
        + ["--start", "2024-03-01T00:00:00Z", "--end", "2024-03-01T02:00:00Z", "--no-progress"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = run.stdout[-3000:] + run.stderr[-3000:]
    assert run.returncode == 0, output
    # spark-submit merges its Python driver's stderr into its own stdout
    ready = [line for line in run.stdout.splitlines() if "kappaplus.session" in line]
    assert ready and "master=local[1" in ready[0], ready or run.stdout[-3000:]
    out = home / "warehouse" / "agg.db" / "shipped_counts_backfill"
    rows = ds.dataset(out, format="parquet", partitioning="hive").to_table().to_pylist()
    produced = Counter({(int(r["start"].timestamp()), r["city"]): r["count"] for r in rows})
    assert len(rows) == len(produced)  # each window once
    assert produced == truth
