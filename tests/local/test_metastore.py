"""The local metastore server: start/status/stop, and two Spark processes sharing it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kappaplus.local.metastore import MetastoreServer, hive_site
from kappaplus.local.processes import pid_alive

# Runs in its own Python process with its own SparkSession against the server: creates
# its table, waits until the other process's table exists, then reads it.
CLIENT = textwrap.dedent(
    """
    import json, sys, time
    from kappaplus.session import create_session

    me, other, rows, uri, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
    spark = create_session("client-" + me, metastore_uri=uri)
    spark.sql(f"CREATE TABLE {me} (id BIGINT, who STRING) USING parquet")
    spark.range(rows).selectExpr("id", f"'{me}' AS who").write.insertInto(me)
    deadline = time.time() + 240
    while not spark.catalog.tableExists(other):
        if time.time() > deadline:
            raise SystemExit(f"{me}: table {other} never appeared")
        time.sleep(0.5)
    # the other process may still be inserting: wait for its rows
    while True:
        spark.catalog.refreshTable(other)
        got = spark.table(other).groupBy("who").count().collect()
        if got or time.time() > deadline:
            break
        time.sleep(0.5)
    tables = sorted(t.name for t in spark.catalog.listTables("default"))
    json.dump({"other": [tuple(r) for r in got], "tables": tables,
               "mine": spark.table(me).count()}, open(out, "w"))
    spark.stop()
    """
)


@pytest.fixture()
def server_home(tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "home"
    yield home
    MetastoreServer(home).stop()  # never leave a server behind, even on failure


def test_hive_site_points_at_the_state_dir(tmp_path: Path) -> None:
    text = hive_site(tmp_path / "metastore_db", tmp_path / "warehouse")
    assert f"jdbc:derby:;databaseName={tmp_path}/metastore_db;create=true" in text
    assert f"<value>{tmp_path}/warehouse</value>" in text
    assert "<name>datanucleus.schema.autoCreateAll</name><value>true</value>" in text


def test_start_status_reuse_and_down(server_home: Path) -> None:
    from kappaplus.cli import app

    server = MetastoreServer(server_home)
    began = time.monotonic()
    uri = server.start()
    started_in = time.monotonic() - began
    state = server.status()
    assert state.running and state.uri == uri and state.pid is not None
    assert (server_home / "metastore" / "metastore.pid").is_file()
    assert (server_home / "metastore" / "conf" / "hive-site.xml").is_file()
    # a second start (another process, same home) reuses the running server
    assert MetastoreServer(server_home).start() == uri
    assert MetastoreServer(server_home).status().pid == state.pid

    runner = CliRunner()
    result = runner.invoke(app, ["metastore", "status", "--home", str(server_home)])
    assert result.exit_code == 0 and uri in result.output
    result = runner.invoke(app, ["down", "--home", str(server_home)])
    assert result.exit_code == 0, result.output
    assert "metastore stopped" in result.output
    assert not pid_alive(state.pid)
    assert not MetastoreServer(server_home).status().running
    result = runner.invoke(app, ["metastore", "status", "--home", str(server_home)])
    assert result.exit_code == 1 and "no metastore running" in result.output
    print(f"metastore started in {started_in:.1f}s")


@pytest.mark.slow
def test_two_processes_share_the_catalog(server_home: Path, tmp_path: Path) -> None:
    uri = MetastoreServer(server_home).start()
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    env = {**os.environ, "KAPPA_HOME": str(server_home)}
    env.pop("KAPPA_METASTORE_URI", None)
    outputs = {name: tmp_path / f"{name}.json" for name in ("alpha", "beta")}
    rows = {"alpha": 120, "beta": 75}
    began = time.monotonic()
    procs = {
        name: subprocess.Popen(
            [sys.executable, str(script), name, other, str(rows[name]), uri, str(outputs[name])],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for name, other in (("alpha", "beta"), ("beta", "alpha"))
    }
    logs = {
        name: proc.communicate(timeout=400)[0].decode(errors="replace")
        for name, proc in procs.items()
    }
    elapsed = time.monotonic() - began
    for name, proc in procs.items():
        assert proc.returncode == 0, f"{name} failed:\n{logs[name][-3000:]}"
    alpha = json.loads(outputs["alpha"].read_text())
    beta = json.loads(outputs["beta"].read_text())
    # each process read the table the other one created, with all its rows
    assert alpha["other"] == [["beta", 75]] and alpha["mine"] == 120
    assert beta["other"] == [["alpha", 120]] and beta["mine"] == 75
    assert {"alpha", "beta"} <= set(alpha["tables"]) and {"alpha", "beta"} <= set(beta["tables"])
    # the tables live in the server's warehouse under the state directory
    assert (server_home / "warehouse" / "alpha").is_dir()
    assert (server_home / "warehouse" / "beta").is_dir()
    print(f"two client processes finished in {elapsed:.1f}s")


def _derby_has_table(database: Path, table: str) -> bool:
    """Whether the Derby database's files hold ``table``'s name (its system catalog stores
    table names as plain bytes); the server itself shows the tables work (the lock API in
    tests/runtime/test_iceberg_catalogs.py)."""
    name = table.encode()
    return any(name in path.read_bytes() for path in (database / "seg0").iterdir())


def test_txn_tables_come_from_one_template_per_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first fresh database runs ``TxnDbUtil.prepDb`` once, into the per-user template;
    the next one is a copy of it (no JVM: no PrepareTxnTables.java in its directory), with
    the transaction tables."""
    from kappaplus.local.metastore import TXN_MARKER, prepare_txn_tables, txn_template

    monkeypatch.setenv("KAPPA_CACHE_DIR", str(tmp_path / "cache"))
    homes = {}
    for name in ("first", "second"):
        home = tmp_path / name
        conf = home / "conf"
        conf.mkdir(parents=True)
        (conf / "hive-site.xml").write_text(hive_site(home / "metastore_db", home / "wh"))
        assert prepare_txn_tables(home, conf, home / "metastore_db")
        assert (home / TXN_MARKER).is_file()
        assert not (home / "PrepareTxnTables.java").exists()  # copied, no JVM run here
        assert _derby_has_table(home / "metastore_db", "HIVE_LOCKS")
        homes[name] = home
    template = txn_template()
    assert template is not None and template.parent.parent == tmp_path / "cache" / (
        "metastore-template"
    )
    assert [p.name for p in template.parent.parent.iterdir()] == [template.parent.name]
    assert _derby_has_table(template, "HIVE_LOCKS")
    # a marker already there: nothing to do (no database made, no JVM)
    assert prepare_txn_tables(homes["first"], homes["first"] / "conf", homes["first"] / "x")
    assert not (homes["first"] / "x").exists()
