"""A lake file's column read as the table's type: widenings cast, a value the type cannot
hold is one line naming the table, file, column and both types (never truncated)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from kappaplus.connectors.lake.delivery import _widen
from kappaplus.core.errors import DataError
from kappaplus.slicing.manifest import ManifestEntry

ENTRY = ManifestEntry("lake/part-0.parquet", 10, 0, {}, 0, 1, [0])
OPTIONS: Any = SimpleNamespace(table="lake.rides")


def test_widenings_cast() -> None:
    ints = pa.chunked_array([pa.array([1, 2, None], pa.int32())])
    assert _widen(ints, pa.field("n", pa.int64()), ENTRY, OPTIONS).to_pylist() == [1, 2, None]
    floats = pa.chunked_array([pa.array([1.5], pa.float32())])
    assert _widen(floats, pa.field("x", pa.float64()), ENTRY, OPTIONS).to_pylist() == [1.5]
    nanos = pa.chunked_array([pa.array([1_000_001_234], pa.timestamp("ns", tz="UTC"))])
    micros = _widen(nanos, pa.field("ts", pa.timestamp("us", tz="UTC")), ENTRY, OPTIONS)
    assert micros.cast(pa.int64()).to_pylist() == [1_000_001]


@pytest.mark.parametrize(
    ("values", "kind"),
    [
        (pa.array([1.5, 2.0], pa.float64()), pa.int64()),  # fractions would be cut off
        (pa.array([2**40], pa.int64()), pa.int32()),  # would overflow
        (pa.array(["x"], pa.string()), pa.int64()),  # incompatible
    ],
)
def test_a_value_the_type_cannot_hold_names_the_file(values: pa.Array, kind: pa.DataType) -> None:
    with pytest.raises(DataError) as caught:
        _widen(pa.chunked_array([values]), pa.field("v", kind), ENTRY, OPTIONS)
    text = str(caught.value)
    assert "'lake.rides'" in text and "'v'" in text and "lake/part-0.parquet" in text
    assert str(values.type) in text and str(kind) in text
