"""The Iceberg catalogs besides the embedded SQL one, each a real server: ``rest`` (the REST
server of tests/iceberg_rest_server.py on loopback, over HTTP) and ``hive`` (the Hive
metastore ``kappa up`` starts: Hive 2.3 from pyspark's jars, Derby, over thrift).

For each: a table reached only through that catalog (the job's config names nothing else),
a backfill of the sessionization job (session windows) equal to the sessions computed by
hand from the events written, ``kappa table describe --iceberg --catalog`` through it, and
one-line errors naming the catalog's URI or the table. Through REST a snapshot committed
between two starts of a run is counted and not mixed in; a fresh run reads it.

Through Hive every commit (append, schema change) takes a metastore lock: the server of
``kappa up`` has the transaction tables behind its lock API (created once before its first
start, kappaplus.local.metastore.prepare_txn_tables). A table written elsewhere is also
registered (``register_table``) and read.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from runtime_helpers import example_config, sessions_by_hand, table_rows, uid
from test_iceberg_runtime import COLUMNS, GAP, START, write_events
from typer.testing import CliRunner

from kappaplus.cli import app
from kappaplus.connectors.iceberg import read_iceberg_stream
from kappaplus.connectors.iceberg.catalog import load_catalog, load_table
from kappaplus.core.errors import TableError, TableNotFound
from kappaplus.examples import sessionization
from kappaplus.examples.generate import rider_events
from kappaplus.local.metastore import MetastoreServer
from kappaplus.local.processes import free_port
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job

sys.path.insert(0, str(Path(__file__).parents[1]))
from iceberg_rest_server import RestCatalogServer  # noqa: E402
from iceberg_tables import (  # noqa: E402
    WrittenTable,
    arrow_rows,
    catalog_props,
    make_rows,
    open_catalog,
    tumbling,
    write_table,
)


@pytest.fixture()
def rest(tmp_path: Path) -> Iterator[RestCatalogServer]:
    with RestCatalogServer(tmp_path / "rest") as server:
        yield server


@pytest.fixture(scope="module")
def metastore(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The metastore server ``kappa up`` starts, on a free port of its own."""
    server = MetastoreServer(tmp_path_factory.mktemp("hms") / "home", port=free_port())
    try:
        yield server.start()
    finally:
        server.stop()


def hive_props(uri: str) -> dict[str, str]:
    """What a job's config says: no more than the type and the URI."""
    return {"type": "hive", "uri": uri}


def hive_writer(uri: str) -> dict[str, str]:
    """pyiceberg's own HiveCatalog writing to Hive 2.3 (kappa's load_catalog sets this)."""
    return {**hive_props(uri), "hive.hive2-compatible": "true"}


def backfill(
    spark: SparkSession,
    props: dict[str, str],
    name: str,
    scratch: Path,
    iceberg_output: dict[str, Any] | None = None,
) -> list:
    """Backfill the sessionization job from Iceberg table ``name`` through ``props``; its
    rows, from a Hive table, or from ``iceberg_output`` (an Iceberg output table, read with
    pyiceberg; the comparable columns only: no trip_requested)."""
    out = f"sessions_{uid()}"
    output = (
        {"hive": None, "iceberg": iceberg_output} if iceberg_output else {"hive": {"table": out}}
    )
    config = example_config(
        "sessionization",
        {
            "inputs": {
                "rider_events": {
                    "hive": None,
                    "iceberg": {"table": name, "event_time_column": "event_time", "catalog": props},
                }
            },
            "outputs": {"sessions": output},
            "mode": {"backfill": {"inputs": {"rider_events": {"hive": None}}}},
        },
        scratch,
    )
    result = run_job(
        spark,
        sessionization.JOB,
        config,
        RunOptions("backfill", start=START, end="2024-03-01T08:00:00", trigger="available-now"),
    )
    assert result.status == "finished"
    if iceberg_output is None:
        return table_rows(spark, f"{out}_backfill", COLUMNS)
    target = load_catalog(iceberg_output["catalog"]).load_table(
        f"{iceberg_output['table']}_backfill"
    )
    return [
        (r["rider_id"], micros(r["session_start"]), micros(r["session_end"]), r["event_count"])
        + (tuple(r["event_types"]),)
        for r in target.scan().to_arrow().to_pylist()
    ]


def micros(value: datetime) -> int:
    return int(value.timestamp() * 1_000_000)


def events_for(seed: int) -> list[dict[str, Any]]:
    return rider_events(riders=20, start=START, hours=6, seed=seed, late_fraction=0.0)


# -- a SQL catalog's name ---------------------------------------------------------------


def test_a_sql_catalog_named_lake_is_opened_under_its_name(
    spark: SparkSession, scratch: Path
) -> None:
    """Issue 47 item 3: a SQL catalog (pyiceberg's, Iceberg's JDBC catalog) keys every table
    by its catalog's name; catalogs were always opened as ``kappa``, so a table written
    through one named ``lake`` was not found, and ``name = "lake"`` failed "load_catalog()
    got multiple values for argument 'name'". With ``name`` the backfill equals the truth;
    without it, the error says the catalog holds the table under the name ``lake``."""
    events = events_for(47)
    plain = catalog_props(scratch / "catalog")
    lake, name = {**plain, "name": "lake"}, f"db.rides_{uid()}"
    write_events(lake, name, events)  # through pyiceberg's SqlCatalog named "lake"
    rows = backfill(spark, lake, name, scratch)
    assert len(rows) == len(set(rows)), "no duplicate sessions"
    assert set(rows) == sessions_by_hand(events, GAP)

    with pytest.raises(TableNotFound) as missing:
        load_table(load_catalog(plain), name)
    text = str(missing.value)
    assert f"{name!r} not found under the catalog name 'kappa'" in text, text
    assert "holds it under the name 'lake'" in text and 'name = "lake"' in text, text
    result = CliRunner().invoke(
        app, ["table", "describe", name, "--iceberg", "--catalog", json.dumps(plain)]
    )
    assert result.exit_code == 2 and "under the name 'lake'" in " ".join(result.output.split())
    result = CliRunner().invoke(
        app, ["table", "describe", name, "--iceberg", "--catalog", json.dumps(lake), "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["rows"] == len(events)


# -- REST ---------------------------------------------------------------------------------


def test_backfill_through_rest_catalog_equals_truth(
    spark: SparkSession, rest: RestCatalogServer, scratch: Path
) -> None:
    events = events_for(21)
    props, name = rest.catalog_props(), f"db.rides_{uid()}"
    write_events(props, name, events)  # created and appended through the REST server
    commits = rest.requests["POST /v1/namespaces/{namespace}/tables/{table}"]
    assert commits == 4, "the four appends were commits over HTTP"
    loads = rest.requests["GET /v1/namespaces/{namespace}/tables/{table}"]
    rows = backfill(spark, props, name, scratch)
    assert rest.requests["GET /v1/namespaces/{namespace}/tables/{table}"] > loads
    assert len(rows) == len(set(rows)), "no duplicate sessions"
    assert set(rows) == sessions_by_hand(events, GAP)


def test_cli_describe_through_rest_catalog(rest: RestCatalogServer) -> None:
    props = rest.catalog_props()
    written = write_table(props, "db.described", "day", per_day=60)
    result = CliRunner().invoke(
        app,
        ["table", "describe", "db.described", "--iceberg", "--catalog", json.dumps(props)]
        + ["--json"],
    )
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["rows"] == len(written.rows) and shown["data_files"] == 6
    assert shown["snapshot_id"] == written.table().current_snapshot().snapshot_id


def stream(spark: SparkSession, props: dict[str, str], name: str, manifests: Path) -> DataFrame:
    return read_iceberg_stream(
        spark,
        name,
        event_time_column="ts",
        catalog=props,
        watermark_delay="30 minutes",
        end="2024-03-06",
        manifest_dir=str(manifests),
        targetRowsPerTrigger="400",
    )


def windows(spark: SparkSession, df: DataFrame, out: Path, cp: Path, trigger: dict) -> Any:
    agg = df.groupBy(F.window("ts", "10 minutes")).agg(
        F.count("*").alias("n"), F.sum("v").alias("s")
    )
    writer = (
        agg.writeStream.format("parquet")
        .outputMode("append")
        .option("path", str(out))
        .option("checkpointLocation", str(cp))
    )
    return writer.trigger(**trigger).start()


def utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def read_windows(spark: SparkSession, out: Path) -> list[tuple]:
    return sorted(
        (utc(r.window.start), r.n, round(r.s, 6)) for r in spark.read.parquet(str(out)).collect()
    )


def test_snapshot_committed_through_rest_between_runs_is_counted_not_mixed(
    spark: SparkSession, rest: RestCatalogServer, scratch: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A run stopped after two micro-batches, a snapshot appended through the REST server,
    the run started again on its checkpoint: the output is the pinned snapshot's truth and
    the new snapshot is logged with its rows; a fresh run reads the new rows too."""
    import pandas as pd

    props = rest.catalog_props()
    written = write_table(props, "db.between", "none")
    out, cp, manifests = scratch / "out", scratch / "cp", scratch / "manifests"
    first = windows(
        spark,
        stream(spark, props, written.name, manifests),
        out,
        cp,
        {"processingTime": "0 seconds"},
    )
    try:
        while len([p for p in first.recentProgress if p["numInputRows"]]) < 2:
            first.awaitTermination(0.5)
    finally:
        first.stop()
    extra = make_rows(3, 50, seed=99)
    extra["id"] += 500_000
    open_catalog(props).load_table(written.name).append(arrow_rows(extra))
    with caplog.at_level(logging.WARNING, logger="kappaplus.connectors.iceberg.catalog"):
        second = windows(
            spark, stream(spark, props, written.name, manifests), out, cp, {"availableNow": True}
        )
        second.awaitTermination()
    assert any(
        "1 snapshot(s) committed after the pinned snapshot" in m and "+150 rows" in m
        for m in caplog.messages
    ), caplog.messages
    assert read_windows(spark, out) == tumbling(written.rows, 10), "the pinned snapshot only"
    fresh_out = scratch / "fresh_out"
    fresh = windows(
        spark,
        stream(spark, props, written.name, scratch / "fresh"),
        fresh_out,
        scratch / "fresh_cp",
        {"availableNow": True},
    )
    fresh.awaitTermination()
    everything = pd.concat([written.rows, extra], ignore_index=True)
    assert read_windows(spark, fresh_out) == tumbling(everything, 10)


def test_rest_catalog_errors_name_the_uri_and_the_table(rest: RestCatalogServer) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(TableError) as unreachable:
        load_catalog({"type": "rest", "uri": closed})
    message = str(unreachable.value)
    assert closed in message and "\n" not in message
    with pytest.raises(TableNotFound) as missing:
        load_table(load_catalog(rest.catalog_props()), "db.nope")
    message = str(missing.value)
    assert "'db.nope'" in message and rest.uri in message and "\n" not in message
    shown = CliRunner().invoke(
        app,
        [
            "table",
            "describe",
            "db.nope",
            "--iceberg",
            "--catalog",
            json.dumps(rest.catalog_props()),
        ],
    )
    assert shown.exit_code == 2 and "'db.nope'" in shown.output and rest.uri in shown.output


def test_rest_server_refuses_a_stale_commit(
    rest: RestCatalogServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Commits go through the server's requirement checks (SqlCatalog.commit_table): an
    append from a table handle older than the current snapshot is the spec's 409, which
    pyiceberg answers by rebasing on the new snapshot and committing again: both appends
    land, once each."""
    commit = "POST /v1/namespaces/{namespace}/tables/{table}"
    written = write_table(rest.catalog_props(), "db.stale", "none", per_day=20, files=1)
    catalog = open_catalog(rest.catalog_props())
    first, stale = catalog.load_table("db.stale"), catalog.load_table("db.stale")
    extra = make_rows(1, 10, seed=4)
    extra["id"] += 10_000
    first.append(arrow_rows(extra))
    before = rest.requests[commit]
    with caplog.at_level(logging.WARNING, logger="pyiceberg.table"):
        stale.append(arrow_rows(extra.assign(id=extra["id"] + 10_000)))
    assert any("concurrent update" in m for m in caplog.messages), "the 409 was seen"
    assert rest.requests[commit] == before + 2, "refused once, then committed"
    ids = catalog.load_table("db.stale").scan().to_arrow().column("id").to_pylist()
    assert len(ids) == len(set(ids)) == len(written.rows) + 2 * len(extra)


# -- Hive metastore (kappa up's) ----------------------------------------------------------


def test_backfill_through_hive_catalog_equals_truth(
    spark: SparkSession, metastore: str, scratch: Path
) -> None:
    events = events_for(23)
    name = f"db.rides_{uid()}"
    write_events(hive_writer(metastore), name, events)  # four commits, each under a lock
    table = open_catalog(hive_props(metastore)).load_table(name)
    assert len(table.history()) == 4, "four appends, four snapshots"
    # the output too goes to an Iceberg table through the metastore: kappa's own commits
    # (one snapshot per micro-batch, the batch mark in the same commit) under its lock
    output = {"table": f"db.sessions_{uid()}", "catalog": hive_props(metastore)}
    rows = backfill(spark, hive_props(metastore), name, scratch, iceberg_output=output)
    assert len(rows) == len(set(rows)), "no duplicate sessions"
    assert set(rows) == {r[:5] for r in sessions_by_hand(events, GAP)}
    target = open_catalog(hive_props(metastore)).load_table(f"{output['table']}_backfill")
    assert len(target.snapshots()) >= 1
    assert all("kappa.batch" in s.summary.additional_properties for s in target.snapshots())


def test_cli_describe_through_hive_catalog(metastore: str) -> None:
    written = write_table(hive_writer(metastore), f"db.described_{uid()}", "day", per_day=60)
    result = CliRunner().invoke(
        app,
        ["table", "describe", written.name, "--iceberg", "--json"]
        + ["--catalog", json.dumps(hive_props(metastore))],
    )
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["rows"] == len(written.rows) and shown["data_files"] == 6
    assert shown["snapshot_id"] == written.table().current_snapshot().snapshot_id


def test_hive_catalog_registers_evolves_and_reads(metastore: str, scratch: Path) -> None:
    """A table written by another catalog, registered in the metastore, then evolved
    through it (column renamed and added, rows appended, rows deleted): the rows read back
    through the Hive catalog are the rows as evolved."""
    from iceberg_tables import evolve

    outside = write_table(catalog_props(scratch / "writer"), f"db.reg_{uid()}", "none", per_day=50)
    hive = open_catalog(hive_writer(metastore))
    hive.create_namespace_if_not_exists("db")
    hive.register_table(outside.name, outside.table().metadata_location)
    evolved = evolve(WrittenTable(outside.name, hive_writer(metastore), outside.rows))
    read = hive.load_table(outside.name).scan().to_pandas()
    assert sorted(read["id"]) == sorted(evolved.rows["id"])
    assert list(read.columns) == ["id", "key", "ts", "value", "note"]


def test_hive_catalog_errors_name_the_uri_and_the_table(metastore: str) -> None:
    closed = f"thrift://127.0.0.1:{free_port()}"
    with pytest.raises(TableError) as unreachable:
        load_table(load_catalog(hive_props(closed)), "db.anything")
    message = str(unreachable.value)
    assert closed in message and "'db.anything'" in message and "\n" not in message
    with pytest.raises(TableNotFound) as missing:
        load_table(load_catalog(hive_props(metastore)), "db.nope")
    message = str(missing.value)
    assert "'db.nope'" in message and metastore in message and "\n" not in message
