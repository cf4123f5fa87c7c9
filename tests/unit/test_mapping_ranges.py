"""A mapping per date range without Spark: the expression that picks each range's mapping
by the row's event time, what ``kappa check`` prints of it, and the config's checks."""

from __future__ import annotations

import pytest

from kappaplus.config import config_from_dict
from kappaplus.core.errors import ConfigError
from kappaplus.core.timeutil import parse_timestamp
from kappaplus.mapping import ColumnSource, Resolution, by_date_range

FROM = parse_timestamp("2024-03-05T00:00:00Z")


def resolution(binding: str, city: str, mismatches: list[str] | None = None) -> Resolution:
    return Resolution(
        binding,
        [
            ColumnSource("city", city, (city.strip("`"),), "string", "string"),
            ColumnSource("ts", "`ts_ms`", ("ts_ms",), "timestamp", "timestamp"),
        ],
        mismatches or [],
    )


def test_a_column_mapped_differently_per_range_is_chosen_by_event_time() -> None:
    merged = by_date_range(
        "`ts_ms`",
        [
            (None, "before 2024-03-05T00:00:00Z", resolution("b", "city_name")),
            (FROM, "from 2024-03-05T00:00:00Z", resolution("b.mappings[0]", "`city`", ["x"])),
        ],
        "b",
    )
    city, ts = merged.columns
    assert city.expression == (
        f"CASE WHEN `ts_ms` < timestamp_micros({FROM}) THEN cast((city_name) as string) "
        "ELSE cast((`city`) as string) END"
    )
    assert city.reads == ("city", "city_name")
    assert city.line() == (
        "city string <- before 2024-03-05T00:00:00Z: city_name (string); "
        "from 2024-03-05T00:00:00Z: `city` (string)"
    )
    assert ts.expression == "`ts_ms`" and not ts.ranges  # alike in every range: as it is
    assert merged.mismatches == ["x"]


def binding(mappings: list[dict[str, object]]) -> dict[str, object]:
    return {
        "inputs": {
            "rides": {
                "hive": {
                    "table": "lake.rides_raw",
                    "event_time": {"column": "ts_ms", "unit": "ms"},
                    "columns": {"city": "city_name"},
                    "mappings": mappings,
                }
            }
        },
        "outputs": {"counts": {"hive": {"table": "agg.counts"}}},
    }


def test_ranges_are_read_from_the_config_oldest_first() -> None:
    config = config_from_dict(binding([{"from": "2024-03-05", "columns": {"city": "city"}}]))
    (entry,) = config.inputs["rides"].hive.mappings
    assert entry.micros == FROM and entry.columns == {"city": "city"}
    with pytest.raises(ConfigError, match="later than the one before"):
        config_from_dict(binding([{"from": "2024-03-05"}, {"from": "2024-03-01"}]))
    with pytest.raises(ConfigError, match="mappings"):
        config_from_dict(binding([{"from": "not a date"}]))


def test_the_readme_block_on_a_renamed_column_is_a_valid_config() -> None:
    """The schema-mapping page's ``[[inputs.rides.hive.mappings]]`` example
    (``docs/how-to/schema-mapping.md``) loads as written and says
    what its comment says (``city_name`` before 2024-03-05, ``city`` from then on)."""
    import re
    import tomllib
    from pathlib import Path

    page = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "schema-mapping.md"
    section = page.read_text(encoding="utf-8")
    blocks = re.findall(r"```toml\n(.*?)```", section, re.S)
    (block,) = [b for b in blocks if "[[inputs.rides.hive.mappings]]" in b]
    written = tomllib.loads(block)
    written["outputs"] = {"counts": {"hive": {"table": "agg.counts"}}}
    hive = config_from_dict(written).inputs["rides"].hive
    assert hive.columns["city"] == "city_name"
    (entry,) = hive.mappings
    assert entry.micros == FROM and entry.columns == {"city": "city"}
