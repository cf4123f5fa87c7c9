"""Event times stored as epoch numbers or formatted strings: the planner's statistics,
the budget planning's event times and the reader's filter all see microseconds."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kappaplus.connectors.hive.files import event_times, file_stats
from kappaplus.core.errors import ConfigError
from kappaplus.slicing.stored_time import (
    column_micros,
    sortable,
    stat_micros,
    storage_of,
    stored_bounds,
    strptime_format,
)

T0 = datetime(2013, 1, 1, 5, tzinfo=UTC)
US = int(T0.timestamp()) * 1_000_000


@pytest.mark.parametrize(
    ("unit", "values"),
    [
        ("s", [1357016400, 1357016401]),
        ("ms", [1357016400000, 1357016401000]),
        ("us", [1357016400000000, 1357016401000000]),
    ],
)
def test_epoch_units_convert_statistics_and_values(
    tmp_path: Path, unit: str, values: list[int]
) -> None:
    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({"ts": pa.array(values + [None], pa.int64())}), path)
    storage = storage_of(unit, None)
    size, mtime = path.stat().st_size, path.stat().st_mtime_ns
    (group,) = file_stats(str(path), size, mtime, "parquet", "ts", str(tmp_path), storage)
    assert (group.ts_min, group.ts_max, group.null_count) == (US, US + 1_000_000, 1)
    times = event_times(str(path), size, mtime, "parquet", "ts", str(tmp_path), 0, storage)
    assert times.tolist() == [US, US + 1_000_000]
    # without the unit the numbers would not be read as times at all
    (plain,) = file_stats(str(path), size, mtime, "parquet", "ts", str(tmp_path))
    assert plain.ts_min is None


def test_formatted_strings_convert_and_only_sortable_formats_bound_a_file(tmp_path: Path) -> None:
    pattern = "yyyy-MM-dd HH:mm:ss"
    assert strptime_format(pattern) == "%Y-%m-%d %H:%M:%S"
    assert sortable(pattern) and not sortable("dd/MM/yyyy HH:mm")
    storage = storage_of(None, pattern)
    column = pa.array(["2013-01-01 05:00:00", "2013-01-01 05:00:01", "garbage", None])
    assert column_micros(column, storage).to_pylist() == [US, US + 1_000_000, None, None]
    assert stat_micros("2013-01-01 05:00:00", storage) == US
    assert stat_micros("01/01/2013 05:00", storage_of(None, "dd/MM/yyyy HH:mm")) is None
    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({"ts": column}), path)
    size, mtime = path.stat().st_size, path.stat().st_mtime_ns
    (group,) = file_stats(str(path), size, mtime, "parquet", "ts", str(tmp_path), storage)
    assert group.ts_min is None  # "garbage" is the max: not a time, so the range is unknown
    clean = tmp_path / "g.parquet"
    pq.write_table(pa.table({"ts": column[:2]}), clean)
    size, mtime = clean.stat().st_size, clean.stat().st_mtime_ns
    (group,) = file_stats(str(clean), size, mtime, "parquet", "ts", str(tmp_path), storage)
    assert (group.ts_min, group.ts_max) == (US, US + 1_000_000)
    with pytest.raises(ConfigError, match="unsupported"):
        strptime_format("yyyy-MM-dd EEE")


def test_slice_bounds_convert_to_the_stored_unit_or_format_exactly() -> None:
    """A reader's filter ``low <= stored < high`` keeps exactly the rows whose time is in
    ``[lo, hi)``: epoch bounds rounded up to the unit, text bounds at the next second."""
    lo, hi = US + 1, US + 2_000_000  # 1 us after 05:00:00, 05:00:02
    assert stored_bounds(lo, hi, "unit:ms") == (1357016400001, 1357016402000)
    assert stored_bounds(lo, hi, "unit:s") == (1357016401, 1357016402)
    assert stored_bounds(US, hi, "unit:us") == (US, hi)
    text = storage_of(None, "yyyy-MM-dd HH:mm:ss")
    assert stored_bounds(lo, hi, text) == ("2013-01-01 05:00:01", "2013-01-01 05:00:02")
    assert stored_bounds(lo, hi, storage_of(None, "dd/MM/yyyy HH:mm:ss")) is None
    # against every value around the bounds: the converted filter = the filter on times
    for storage, step in (("unit:ms", 1_000), ("unit:s", 1_000_000)):
        low, high = stored_bounds(lo, hi, storage)  # type: ignore[misc]
        for v in range(US // step - 3, US // step + 3_000_000 // step):
            assert (low <= v < high) == (lo <= v * step < hi), (storage, v)


def test_a_string_bound_cut_short_still_bounds_the_times() -> None:
    """Iceberg keeps 16 characters of a string bound (an upper bound's last one
    incremented): completed with each field's smallest value, both still bound."""
    text = storage_of(None, "yyyy-MM-dd HH:mm:ss")
    assert stat_micros("2013-01-01 05:00", text) == US  # <= every 05:00:xx
    assert stat_micros("2013-01-01 05:01", text) == US + 60_000_000  # > every 05:00:xx
    assert stat_micros("2013-01-01 05:0:", text) is None  # an increment past a digit
    # the maximum 05:09:58 cut to "2013-01-01 05:0" + "9" + 1 = ":": above every 05:0x:xx
    past = stat_micros("2013-01-01 05:0:", text, upper=True)
    assert past is not None and past >= US + 10 * 60_000_000
    assert stat_micros("201:", text, upper=True) is None  # cut inside the year
