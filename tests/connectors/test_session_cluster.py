"""On a cluster, ``create_session`` leaves ``spark-defaults.conf`` and the caller's settings
alone: the session's standalone master and worker (``standalone_cluster``, conftest.py), a
``spark-defaults.conf`` that sets some of what ``create_session`` sets in local mode, and a
session whose settings are read back."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from standalone_cluster import JOB_TIMEOUT, Cluster, daemon_env

HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
DEFAULTS = {
    "spark.sql.shuffle.partitions": "7",
    "spark.ui.enabled": "true",
    "spark.ui.port": "0",
    "spark.driver.memory": "700m",
    "spark.pyspark.python": sys.executable,
    "spark.sql.parquet.outputTimestampType": "INT96",
    "spark.python.worker.reuse": "false",
    # the cluster's state store: kappa run's default (RocksDB) must not replace it
    "spark.sql.streaming.stateStore.providerClass": HDFS_PROVIDER,
}
CALLER = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.executor.memory": "512m",
    "spark.cores.max": "1",
    "spark.sql.session.timeZone": "Asia/Tokyo",
}

JOB = textwrap.dedent(
    """
    import json, sys
    from kappaplus.session import SESSION_SETTINGS, create_session
    from kappaplus.state_store import STATE_STORE_SETTINGS

    master, home = sys.argv[1], sys.argv[2]
    keys, caller = json.loads(sys.argv[3]), json.loads(sys.argv[4])
    spark = create_session(
        "defaults-win", master=master, home=home, conf=caller, hive=False,
        defaults=STATE_STORE_SETTINGS,
    )
    conf = spark.sparkContext.getConf()
    seen = {
        k: spark.conf.get(k, None) or conf.get(k, None)
        for k in [*keys, *caller, *SESSION_SETTINGS, *STATE_STORE_SETTINGS]
    }
    seen["ui"] = spark.sparkContext.uiWebUrl is not None
    seen["executor_python"] = sorted(set(
        spark.sparkContext.parallelize(range(2), 2)
        .mapPartitions(lambda _: [sys.executable]).collect()
    ))
    print("RESULT " + json.dumps(seen), flush=True)
    spark.stop()
    """
)


@pytest.mark.timeout(JOB_TIMEOUT + 180)
def test_spark_defaults_and_caller_win_on_a_cluster(
    standalone_cluster: Cluster, tmp_path: Path
) -> None:
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        "".join(f"{key} {value}\n" for key, value in DEFAULTS.items())
    )
    env = daemon_env(standalone_cluster.home)
    env["SPARK_CONF_DIR"] = str(conf_dir)
    env["KAPPA_HOME"] = str(tmp_path / "home")
    for name in ("KAPPA_SPARK_MASTER", "KAPPA_DRIVER_MEMORY"):
        env.pop(name, None)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            JOB,
            standalone_cluster.url,
            str(tmp_path / "home"),
            json.dumps(list(DEFAULTS)),
            json.dumps(CALLER),
        ],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=JOB_TIMEOUT,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, (
        f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}\n"
        f"{standalone_cluster.diagnostics()}"
    )
    seen = json.loads(lines[-1].removeprefix("RESULT "))
    # spark-defaults.conf wins over every local default of create_session ...
    for key, value in DEFAULTS.items():
        assert seen[key] == value, key
    assert seen["ui"] is True, "the UI runs: spark.ui.enabled=true from spark-defaults.conf"
    assert seen["executor_python"] == [sys.executable]
    # ... the caller's settings win too ...
    for key, value in CALLER.items():
        assert seen[key] == value, key
    # ... and kappaplus's own settings fill only the gaps
    assert seen["spark.sql.execution.arrow.pyspark.enabled"] == "true"
    assert seen["spark.sql.streaming.stateStore.stateSchemaCheck"] == "true"
    # kappa run's state store settings as well: the provider stays the cluster's, the
    # changelog checkpointing nobody set is filled in
    assert seen["spark.sql.streaming.stateStore.providerClass"] == HDFS_PROVIDER
    assert seen["spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"] == "true"
