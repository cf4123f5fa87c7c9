"""``kappa archive --table-format iceberg`` (issue 22 items 2-3): every Kafka record once in
the Iceberg table, with its Kafka coordinates, across SIGKILLs of the archiver at random
moments (the 20-kill loop is slow; the default run archives once and reads it back)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from iceberg_tables import catalog_props, open_catalog  # noqa: E402

from kappaplus.examples.generate import RIDER_EVENT_DDL, arrival_order, produce, rider_events

START = "2024-03-01T00:00:00"


def _archiver(  # type: ignore[no-untyped-def]
    topic: str, bootstrap: str, props: dict[str, str], home: Path, trigger: str, per_batch: int
):
    command = [sys.executable, "-m", "kappaplus", "archive", topic]
    command += ["--table", "lake.archived", "--table-format", "iceberg"]
    command += ["--iceberg-catalog", json.dumps(props), "--event-time", "event_time"]
    command += ["--schema", RIDER_EVENT_DDL, "--bootstrap", bootstrap, "--no-progress"]
    command += ["--checkpoint", str(home / "checkpoints"), "--trigger", trigger]
    command += ["--max-offsets-per-trigger", str(per_batch)]
    env = {**os.environ, "KAPPA_HOME": str(home)}
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _archived_offsets(props: dict[str, str]) -> list[int]:
    catalog = open_catalog(props)
    if not catalog.table_exists("lake.archived"):
        return []
    table = catalog.load_table("lake.archived").scan().to_arrow()
    assert set(table.column("kafka_partition").to_pylist()) <= {0}
    return sorted(table.column("kafka_offset").to_pylist())


@pytest.mark.parametrize(
    "kills",
    [
        pytest.param(0, id="archive"),
        pytest.param(20, id="20-kills", marks=[pytest.mark.slow, pytest.mark.timeout(3000)]),
    ],
)
def test_archive_into_iceberg_keeps_every_record_once(
    kafka_bootstrap: str, new_topic, tmp_path: Path, kills: int
) -> None:  # type: ignore[no-untyped-def]
    events = arrival_order(rider_events(riders=60, start=START, hours=12, seed=9))
    topic = new_topic(prefix="arch-ice")
    produce(kafka_bootstrap, topic, events)
    props = catalog_props(tmp_path / "catalog")
    home = tmp_path / "home"
    rng = random.Random(kills)
    seen_progress = []
    for _ in range(kills):
        archiver = _archiver(topic, kafka_bootstrap, props, home, "1 second", 40)
        # kill while it works: once it committed a batch of its own (Spark's start-up takes
        # 10-40 s on a loaded machine), at a random moment of the next batches
        before, waited = len(_archived_offsets(props)), time.monotonic()
        while len(_archived_offsets(props)) == before and time.monotonic() - waited < 120:
            time.sleep(0.5)
        time.sleep(rng.uniform(0, 4))
        archiver.send_signal(signal.SIGKILL)
        archiver.wait(30)
        seen_progress.append(len(_archived_offsets(props)))
    final = _archiver(topic, kafka_bootstrap, props, home, "available-now", 40 if kills else 600)
    output, _ = final.communicate(timeout=900)
    assert final.returncode == 0, output[-3000:]
    offsets = _archived_offsets(props)
    assert len(offsets) == len(set(offsets)), "no record twice"
    assert offsets == list(range(len(events))), "every record once"
    if kills:
        assert any(0 < n < len(events) for n in seen_progress), seen_progress  # killed mid-way
    table = open_catalog(props).load_table("lake.archived")
    archived = table.scan().to_arrow()
    assert sorted(archived.column("event_id").to_pylist()) == sorted(e["event_id"] for e in events)
    # one snapshot per committed micro-batch, each naming its query and batch
    assert all("kappa.batch" in s.summary.additional_properties for s in table.snapshots())
    print(f"{kills} kills, archived after each: {seen_progress}")
