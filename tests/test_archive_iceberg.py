"""``kappa archive --table-format iceberg`` (issue 22 items 2-3): every Kafka record once in
the Iceberg table, with its Kafka coordinates, across SIGKILLs of the archiver at random
moments (the 20-kill loop is slow; the default run archives once and reads it back)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from archive_kills import KILLS, archive_through_kills, archiver, iceberg_options  # noqa: E402
from iceberg_tables import catalog_props, open_catalog  # noqa: E402

from kappaplus.examples.generate import arrival_order, produce, rider_events

START = "2024-03-01T00:00:00"


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
        pytest.param(
            KILLS, id=f"{KILLS}-kills", marks=[pytest.mark.slow, pytest.mark.timeout(3000)]
        ),
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
    archive_through_kills(
        lambda trigger, per_batch: archiver(
            topic, kafka_bootstrap, home, iceberg_options(props), trigger, per_batch
        ),
        lambda: _archived_offsets(props),
        kills,
        len(events),
    )
    table = open_catalog(props).load_table("lake.archived")
    archived = table.scan().to_arrow()
    assert sorted(archived.column("event_id").to_pylist()) == sorted(e["event_id"] for e in events)
    # one snapshot per committed micro-batch, each naming its query and batch
    assert all("kappa.batch" in s.summary.additional_properties for s in table.snapshots())
