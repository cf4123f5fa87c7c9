"""``kappa demo`` end to end in its own process (a small version): stack up, produce,
archive, stream, backfill, reconcile; then ``kappa down`` leaves nothing running. With
``--lake iceberg`` the archive is an Iceberg table and the figures are checked against the
events generated again here."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pyarrow.dataset import dataset as pq_dataset

from kappaplus.connectors.iceberg.catalog import default_catalog, load_catalog
from kappaplus.examples.generate import rider_events
from kappaplus.local.demo import GAP_MINUTES, LATE_DELAY, START
from kappaplus.local.demo_lakes import demo_lake
from kappaplus.local.processes import pid_alive
from kappaplus.local.s3 import ObjectStore

sys.path.insert(0, str(Path(__file__).parent / "runtime"))
from runtime_helpers import micros, sessions_by_hand  # noqa: E402


def test_demo_reconciles_and_down_stops_everything(tmp_path: Path) -> None:
    env = {**os.environ, "KAPPA_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    kappa = [sys.executable, "-m", "kappaplus.cli"]
    done = subprocess.run(
        [
            *kappa,
            "demo",
            "--riders",
            "40",
            "--days",
            "1",
            "--slice-hours",
            "6",
            # the demo's default: ~8 stream batches of 3 hours of arrivals (1 hour: 20
            # batches, 25 s more); the 6-12 hours late events still land behind the watermark
            "--batch-hours",
            "3",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    assert "demo passed" in out
    recovered = re.search(r"late events recovered by the backfill \((\d+)\)", out)
    reported = re.search(r"late rows the stream reported \((\d+)\)", out)
    assert recovered and reported and recovered.group(1) == reported.group(1)
    assert int(recovered.group(1)) > 0, "the stream dropped some late events"
    assert "every event once" in out

    # kappa reconcile on the demo's outputs gives the demo's figures
    config = tmp_path / "home" / "demo" / "sessionization.toml"
    again = subprocess.run(
        [
            *kappa,
            "reconcile",
            "sessionization",
            "--config",
            str(config),
            "--json",
            "--chart",
            str(tmp_path / "reconcile.html"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    figures = json.loads(again.stdout[again.stdout.index("{") :])
    for label, key in (
        ("windows identical in both", "identical"),
        ("windows that differ (same key)", "different"),
        ("windows only in the backfill", "only_backfill"),
        ("windows still open in production (end after its watermark)", "open_in_production"),
    ):
        shown = re.search(re.escape(label) + r"\W+(\d+)", out)
        assert shown and int(shown.group(1)) == figures[key], (label, figures[key])
    assert figures["recovered"] == int(recovered.group(1)) == figures["late_rows_reported"]
    assert figures["late_rows_kept"] == figures["recovered"], "the dropped rows were kept"
    assert figures["late_table"] == "demo.rider_sessions_late"
    assert (tmp_path / "reconcile.html").read_text().startswith("<!doctype html>")

    pids = [json.loads(p.read_text())["pid"] for p in (tmp_path / "home").glob("*/*.pid")]
    assert pids and all(pid_alive(pid) for pid in pids), "services keep running after the demo"
    down = subprocess.run([*kappa, "down"], env=env, capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not any(pid_alive(pid) for pid in pids), "kappa down stops broker and metastore"


def _demo_events(riders: int, days: int) -> list[dict[str, Any]]:
    """The events ``kappa demo`` produces, generated again here (the same seed)."""
    return rider_events(
        riders=riders,
        start=START,
        hours=days * 24,
        seed=7,
        late_fraction=0.3,
        late_delay=LATE_DELAY,
    )


def _archived(lake: str, home: Path, on_s3: bool = False) -> Any:
    """The demo's archive as an Arrow table, read with the format's own library (an
    Iceberg table ``on_s3``: through the catalog of the demo's object store)."""
    if lake == "iceberg":
        catalog = default_catalog(home)
        if on_s3:
            store = ObjectStore(home)
            endpoint = store.endpoint()
            assert endpoint is not None, "the demo's object store runs"
            catalog = store.iceberg_catalog(endpoint)
        table = load_catalog(catalog).load_table("demo.rider_events")
        assert table.location().startswith("s3://" if on_s3 else "file:")
        return table.scan().to_arrow()
    from kappaplus.connectors.delta.log import open_delta

    return open_delta(
        demo_lake("delta", home).location("demo.rider_events"), None
    ).to_pyarrow_table()


# slow: the Hive demo (above) runs the loop in the default suite; `make test-all` runs these
@pytest.mark.slow
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("lake", ["iceberg", "delta", "iceberg-s3"])
def test_lake_demo_reconciles_against_the_generated_events(lake: str, tmp_path: Path) -> None:
    """``kappa demo --lake iceberg|delta`` (and ``--lake iceberg --s3``: the table in the
    embedded object store, gone with it at ``kappa down``): the archive is a table of that
    format holding
    every generated event once (read with pyiceberg / delta-rs), the backfill's sessions are
    the sessions of the generated events by hand (read from the table's Parquet files), the
    reconciliation figures add up to them, and the audit pairs the archive with the
    backfill's lake reads."""
    home = tmp_path / "home"
    env = {**os.environ, "KAPPA_HOME": str(home), "COLUMNS": "200"}
    kappa = [sys.executable, "-m", "kappaplus.cli"]
    bad = subprocess.run(
        [*kappa, "demo", "--lake", "orc"], env=env, capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "'--lake' = 'orc'" in bad.stdout and "hive, iceberg, delta" in bad.stdout
    assert not (home / "demo").exists(), "a bad --lake starts nothing"

    riders, days = 40, 1
    size = ["--riders", str(riders), "--days", str(days), "--slice-hours", "6"]
    on_s3 = lake == "iceberg-s3"
    lake = lake.removesuffix("-s3")
    lake_options = ["--lake", lake] + (["--s3"] if on_s3 else [])
    if on_s3:
        refused = subprocess.run(
            [*kappa, "demo", "--lake", "delta", "--s3"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert refused.returncode == 2 and "'--s3'" in refused.stdout, refused.stdout
        assert not (home / "s3").exists(), "a refused --s3 starts nothing"
    try:
        done = subprocess.run(
            [*kappa, "demo", *lake_options, *size, "--batch-hours", "1"],
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
        )
        out = done.stdout
        assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
        title = demo_lake(lake, home).title
        assert "demo passed" in out and f"backfill from {title}" in out

        events = _demo_events(riders, days)
        end = START + timedelta(days=days)
        assert all(START <= e["event_time"] < end for e in events)
        # the archive: a table of that format (not Hive) with every event once, in Kafka order
        archived = _archived(lake, home, on_s3)
        ids = archived.column("event_id").to_pylist()
        assert len(ids) == len(set(ids)) and set(ids) == {e["event_id"] for e in events}
        assert sorted(archived.column("kafka_offset").to_pylist()) == list(range(len(events)))
        assert not (home / "warehouse" / "demo.db" / "rider_events").exists()
        shown = re.search(r"the lake holds ([\d,]+) in the range", out)
        assert shown and int(shown.group(1).replace(",", "")) == len(events)

        # the backfill's sessions are the sessions of the generated events
        by_hand = {row[:4] for row in sessions_by_hand(events, GAP_MINUTES * 60)}
        backfill = _sessions(home, "rider_sessions_backfill")
        assert len(backfill) == len(set(backfill)), "no session twice"
        assert set(backfill) == by_hand
        # the stream's: each the session by hand of its key, or fewer events (late ones)
        stream = _sessions(home, "rider_sessions")
        truth = {row[:2]: row for row in by_hand}
        assert len(stream) == len(set(stream)) and all(row[:2] in truth for row in stream)
        identical = [row for row in stream if row in by_hand]
        short = {row[:2]: truth[row[:2]][3] - row[3] for row in stream if row not in by_hand}
        assert all(missing > 0 for missing in short.values())

        # kappa reconcile on the demo's outputs: its figures are those counted here
        figures = _reconcile_json(kappa, env, home, tmp_path)
        assert figures["backfill_rows"] == len(by_hand)
        assert figures["backfill_measure"] == len(events), "every event once in the backfill"
        assert figures["production_rows"] == len(stream)
        assert figures["identical"] == len(identical)
        assert figures["different"] == len(short)
        assert figures["only_production"] == 0
        assert figures["only_backfill"] + figures["open_in_production"] == len(by_hand) - len(
            stream
        )
        assert figures["recovered"] == sum(short.values()) > 0, "the stream dropped late events"
        assert figures["recovered"] == figures["late_rows_reported"] == figures["late_rows_kept"]
        assert figures["explained"]
        for label, key in (
            ("windows identical in both", "identical"),
            ("windows that differ (same key)", "different"),
            ("late rows the backfill recovered (event_count)", "recovered"),
        ):
            printed = re.search(re.escape(label) + r"\W+(\d+)", out)
            assert printed and int(printed.group(1)) == figures[key], (label, figures[key])

        # kappa audit --table pairs the archive with the backfill that read it
        name = demo_lake(lake, home).audit_name("demo.rider_events")
        audit = subprocess.run(
            [*kappa, "audit", "--table", name, "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
        assert audit.returncode == 0, audit.stdout[-3000:] + audit.stderr[-3000:]
        report = json.loads(audit.stdout[audit.stdout.index("{") :])
        lake_reads = [
            s for s in report["series"] if s["stage"] == "lake" and s["mode"] == "backfill"
        ]
        assert [(s["dataset"], s["total"]) for s in lake_reads] == [(name, len(events))]
        assert report["ok"] and not report["unexplained"]
    finally:
        subprocess.run([*kappa, "down"], env=env, capture_output=True, text=True, timeout=120)
    assert not ObjectStore(home).status().running, "kappa down stops the object store"


def _reconcile_json(kappa: list[str], env: dict[str, str], home: Path, tmp: Path) -> Any:
    config = home / "demo" / "sessionization.toml"
    again = subprocess.run(
        [*kappa, "reconcile", "sessionization", "--config", str(config), "--json"]
        + ["--chart", str(tmp / "reconcile.html")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    return json.loads(again.stdout[again.stdout.index("{") :])


def _sessions(home: Path, table: str) -> list[tuple[Any, ...]]:
    """(rider_id, start, end in micros, event_count) of a Hive output of the demo, read
    from its Parquet files (pyarrow; the commit log directory ``_kappa_commits`` is
    skipped as hidden)."""
    written = pq_dataset(home / "warehouse" / "demo.db" / table, partitioning="hive").to_table(
        columns=["rider_id", "session_start", "session_end", "event_count"]
    )
    return [
        (r["rider_id"], micros(r["session_start"]), micros(r["session_end"]), r["event_count"])
        for r in written.to_pylist()
    ]
