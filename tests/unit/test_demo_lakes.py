"""The lake strategies of ``kappa demo --lake`` (:mod:`kappaplus.local.demo_lakes`): each
gives a job configuration whose backfill reads its own table format, with the demo's slice
size, and whose stream mode still reads Kafka alone (no Spark, no services)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kappaplus.config import config_from_dict, resolve
from kappaplus.core.errors import ConfigError
from kappaplus.examples import sessionization
from kappaplus.local.demo import EVENTS_TABLE, _config_dict
from kappaplus.local.demo_lakes import LAKES, demo_lake


@pytest.mark.parametrize("name", list(LAKES))
def test_each_lake_binds_the_backfill_to_its_format(name: str, tmp_path: Path) -> None:
    lake = demo_lake(name, tmp_path)
    raw = _config_dict(lake, "127.0.0.1:9092", tmp_path / "checkpoints", 6, 500)
    config = config_from_dict(raw)
    backfill = resolve(config, "backfill", sessionization.JOB).inputs["rider_events"]
    bound = [fmt for fmt in ("hive", "iceberg", "delta") if getattr(backfill, fmt) is not None]
    assert bound == [name]
    history = getattr(backfill, name)
    table = history.path if name == "delta" else history.table
    assert table == (lake.location(EVENTS_TABLE) if name == "delta" else EVENTS_TABLE)
    assert history.max_event_time_per_trigger.micros == 6 * 3600 * 1_000_000
    stream = resolve(config, "stream", sessionization.JOB).inputs["rider_events"]
    assert stream.kafka is not None and stream.hive is None and stream.iceberg is None
    assert lake.archive_options()["table_format"] == name


def test_the_iceberg_lake_lives_in_the_embedded_catalog_of_the_state_dir(tmp_path: Path) -> None:
    lake = demo_lake("iceberg", tmp_path)
    catalog = lake.archive_options()["iceberg_catalog"]
    assert catalog["uri"] == f"sqlite:///{tmp_path / 'iceberg' / 'catalog.db'}"
    binding, override = lake.input_binding(EVENTS_TABLE, "event_time", 12)
    assert binding["iceberg"]["catalog"] == catalog and override is None


def test_a_lake_the_demo_does_not_have_is_refused_naming_the_option(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        demo_lake("delta" if "delta" not in LAKES else "orc", tmp_path, option="--lake")
    assert caught.value.option == "--lake" and caught.value.exit_code == 2
    assert ", ".join(LAKES) in str(caught.value)
