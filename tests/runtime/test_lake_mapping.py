"""Schema unification for Iceberg and Delta bindings: a hold-out-style table written by
another pipeline (flattened, renamed: ``ride_no``, ``city_name``, the event time as
``ts_ms bigint`` epoch milliseconds or as text; ``tip`` added half-way, null before) read
through the binding's ``columns``, ``event_time = { column, unit | format }`` and
``mappings``; the windowed job's output equals the pandas truth of
``test_schema_mapping`` (computed from the rows written, not re-read). A narrowing type is
named by ``kappa check`` (``describe_bindings``) and refused by ``kappa run`` with the same
line before any query starts. A bootstrap over such a lake then a nested ISO topic hands
over exactly at a cutoff between two rides 1 ms (1 s for text) apart."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import test_schema_mapping as case
from pyspark.sql import SparkSession
from runtime_helpers import uid

from kappaplus.config import config_from_dict
from kappaplus.core.errors import ConfigError
from kappaplus.jobs import InputSpec, Job
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job

sys.path.insert(0, str(Path(__file__).parents[1]))
from iceberg_tables import catalog_props, open_catalog  # noqa: E402

START, HOURS = case.START, case.HOURS
END = (START + timedelta(hours=HOURS)).isoformat()
COLUMNS = {"ride_id": "cast(ride_no as string)", "city": "city_name"}


def _hours(rows: pd.DataFrame) -> list[tuple[int, pd.DataFrame]]:
    """The rows by hour index (0 .. HOURS-1) of their event time."""
    index = rows["ts_ms"] // 3_600_000 - int(START.timestamp()) // 3600
    return [(int(h), part) for h, part in rows.groupby(index)]


def _text(ts_ms: pd.Series) -> pd.Series:
    return pd.to_datetime(ts_ms, unit="ms", utc=True).dt.strftime("%Y-%m-%d %H:%M:%S")


def write_iceberg_lake(props: dict[str, str], name: str, rows: pd.DataFrame, text: bool) -> None:
    """One append per hour, out of event-time order. The first half: ``ride_no`` an *int*,
    no ``tip``; then the schema evolves (``ride_no`` widened to long, ``tip`` added) and the
    second half is appended. ``text``: the event time as ``ts_text`` strings."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import DoubleType, IntegerType, LongType, NestedField, StringType

    catalog = open_catalog(props)
    catalog.create_namespace_if_not_exists(name.split(".")[0])
    stamp = "ts_text" if text else "ts_ms"
    schema = Schema(
        NestedField(1, "ride_no", IntegerType(), required=False),
        NestedField(2, "city_name", StringType(), required=False),
        NestedField(3, stamp, StringType() if text else LongType(), required=False),
    )
    table = catalog.create_table(name, schema=schema)

    def arrow(part: pd.DataFrame, wide: bool) -> pa.Table:
        columns = {
            "ride_no": pa.array(part["ride_no"], pa.int64() if wide else pa.int32()),
            "city_name": pa.array(part["city_name"], pa.string()),
            stamp: pa.array(_text(part["ts_ms"]) if text else part["ts_ms"], table_type),
        }
        if wide:
            columns["tip"] = pa.array(part["tip"].astype(np.float64), pa.float64())
        return pa.table(columns)

    table_type = pa.string() if text else pa.int64()
    hours = dict(_hours(rows))
    for hour in (3, 1, 0, 2):
        table.append(arrow(hours[hour], wide=False))
    with table.update_schema() as update:
        update.update_column("ride_no", LongType())
        update.add_column("tip", DoubleType())
    table = catalog.load_table(name)
    for hour in (7, 5, 4, 6):
        table.append(arrow(hours[hour], wide=True))


def write_delta_lake(path: str, rows: pd.DataFrame, renamed_at: int | None = None) -> None:
    """One append per hour, out of event-time order; ``tip`` added (schema merge) from the
    fifth hour on. ``renamed_at`` (epoch ms): rows before it carry ``city_name`` and a
    legacy ``city`` code that is not the city, rows from it on ``city`` only."""
    from deltalake import write_deltalake

    first = True
    for hour, part in sorted(_hours(rows), key=lambda item: (item[0] % 3, item[0])):
        frames = [part]
        if renamed_at is not None:
            frames = [part[part["ts_ms"] < renamed_at], part[part["ts_ms"] >= renamed_at]]
        for k, piece in enumerate(frames):
            if not len(piece):
                continue
            columns: dict[str, pa.Array] = {
                "ride_no": pa.array(piece["ride_no"], pa.int64()),
                "ts_ms": pa.array(piece["ts_ms"], pa.int64()),
            }
            if renamed_at is not None and k == 1:
                columns["city"] = pa.array(piece["city_name"], pa.string())
            else:
                columns["city_name"] = pa.array(piece["city_name"], pa.string())
                if renamed_at is not None:
                    codes = [f"code-{n % 13}" for n in piece["ride_no"]]
                    columns["city"] = pa.array(codes, pa.string())
            if hour >= HOURS // 2:
                columns["tip"] = pa.array(piece["tip"].astype(np.float64), pa.float64())
            write_deltalake(
                path,
                pa.table(columns),
                mode="error" if first else "append",
                schema_mode=None if first else "merge",
            )
            first = False


def lake_config(kind: str, lake: dict[str, Any], out: str, scratch: Path, **extra: Any) -> Any:
    return config_from_dict(
        {
            "checkpoint_dir": str(scratch / "checkpoints"),
            "inputs": {"rides": {kind: {**lake, **extra}}},
            "outputs": {"counts": {"hive": {"table": out}}},
        }
    )


def iceberg_binding(scratch: Path, rows: pd.DataFrame, text: bool = False) -> dict[str, Any]:
    props = catalog_props(scratch / "catalog")
    name = f"db.rides_{uid()}"
    write_iceberg_lake(props, name, rows, text)
    stored = (
        {"column": "ts_text", "format": "yyyy-MM-dd HH:mm:ss"}
        if text
        else {"column": "ts_ms", "unit": "ms"}
    )
    return {"table": name, "catalog": props, "event_time": stored, "columns": COLUMNS}


def delta_binding(
    scratch: Path, rows: pd.DataFrame, renamed_at: int | None = None
) -> dict[str, Any]:
    path = str(scratch / f"delta_{uid()}")
    write_delta_lake(path, rows, renamed_at)
    return {"path": path, "event_time": {"column": "ts_ms", "unit": "ms"}, "columns": COLUMNS}


@pytest.mark.parametrize("kind", ["iceberg", "delta"])
def test_backfill_of_a_renamed_epoch_millis_table_with_a_column_added_half_way(
    spark: SparkSession, scratch: Path, kind: str
) -> None:
    """Iceberg (``ride_no`` int in the old files, widened to long) and Delta (``tip`` added
    by a schema merge): ``kappa check`` shows where each column comes from with no
    mismatch, the backfill equals the truth (``tip`` null before it existed)."""
    from kappaplus.runtime.binding.unify import describe_bindings

    rows = case.lake_rows(seed=11)
    lake = iceberg_binding(scratch, rows) if kind == "iceberg" else delta_binding(scratch, rows)
    out = f"{kind}_mapped_{uid()}"
    cfg = lake_config(kind, lake, out, scratch, maxEventTimePerTrigger="90 minutes")
    (shown,) = describe_bindings(spark, case.JOB, cfg)
    assert shown.binding == f"inputs.rides.{kind}"
    lines = [c.line() for c in shown.columns]
    assert "ride_id string <- cast(ride_no as string) (string)" in lines, lines
    assert "ride_time timestamp <- `ts_ms` (timestamp)" in lines, lines
    assert "tip double <- `tip` (double)" in lines, lines
    assert sorted(shown.reads) == ["city_name", "ride_no", "tip", "ts_ms"], shown.reads
    assert not shown.mismatches, shown.mismatches

    result = run_job(spark, case.JOB, cfg, RunOptions("backfill", START.isoformat(), END))
    assert result.status == "finished"
    assert case.read_counts(spark, f"{out}_backfill", END) == case.truth(rows)


def test_delta_column_renamed_at_a_known_date_is_mapped_per_range(
    spark: SparkSession, scratch: Path
) -> None:
    """``[[inputs.rides.delta.mappings]]``: ``city`` from ``city_name`` before the date, from
    ``city`` after; slices of 2 hours and an hour spanning the date map each row by its own
    event time. Equal to the truth; the binding without ``mappings`` is not."""
    from kappaplus.runtime.binding.unify import describe_bindings

    renamed = case.RENAMED_AT
    rows = case.lake_rows(seed=12)
    lake = delta_binding(scratch, rows, renamed_at=int(renamed.timestamp() * 1000))
    out = f"delta_renamed_{uid()}"
    ranges = [{"from": renamed.isoformat(), "columns": {"city": "city"}}]
    cfg = lake_config(
        "delta", lake, out, scratch, mappings=ranges, maxEventTimePerTrigger="2 hours"
    )
    (shown,) = describe_bindings(spark, case.JOB, cfg)
    city = next(c for c in shown.columns if c.column == "city")
    assert city.line() == (
        "city string <- before 2013-01-01T03:30:00Z: city_name (string); "
        "from 2013-01-01T03:30:00Z: city (string)"
    ), city.line()
    assert run_job(spark, case.JOB, cfg, RunOptions("backfill", START.isoformat(), END)).status == (
        "finished"
    )
    expected = case.truth(rows)
    assert case.read_counts(spark, f"{out}_backfill", END) == expected

    single = lake_config(
        "delta", lake, f"one_{out}", scratch / "one", maxEventTimePerTrigger="2 hours"
    )
    run_job(spark, case.JOB, single, RunOptions("backfill", START.isoformat(), END))
    assert case.read_counts(spark, f"one_{out}_backfill", END) != expected


NARROW = Job(
    name="narrow-ride-counts",
    inputs=[
        InputSpec("rides", "ride_id int, city string, tip double, ride_time timestamp", "ride_time")
    ],
    outputs=case.JOB.outputs,
    transform=case.per_window,
    watermark_delay="10 minutes",
)


@pytest.mark.parametrize("kind", ["iceberg", "delta"])
def test_a_narrowing_type_is_named_by_check_and_refused_by_run_with_the_same_line(
    spark: SparkSession, scratch: Path, kind: str
) -> None:
    from kappaplus.runtime.binding.unify import describe_bindings

    rows = case.lake_rows(seed=13).iloc[::12]  # 200 rows over every hour
    lake = iceberg_binding(scratch, rows) if kind == "iceberg" else delta_binding(scratch, rows)
    lake["columns"] = {"ride_id": "ride_no", "city": "city_name"}
    out = f"{kind}_narrow_{uid()}"
    cfg = lake_config(kind, lake, out, scratch)
    (shown,) = describe_bindings(spark, NARROW, cfg)
    (line,) = shown.mismatches
    assert line.startswith(f"inputs.rides.{kind}: column 'ride_id' <- ride_no is bigint"), line
    assert "the job declares int" in line, line
    with pytest.raises(ConfigError) as refused:
        run_job(spark, NARROW, cfg, RunOptions("backfill", START.isoformat(), END))
    assert line in str(refused.value)
    assert not spark.catalog.tableExists(f"{out}_backfill")

    # an event time stored as numbers without its unit: named as well, not read as a time
    lake = {**lake, "event_time": {"column": "ts_ms"}, "columns": COLUMNS}
    (shown,) = describe_bindings(spark, case.JOB, lake_config(kind, lake, out, scratch))
    assert any("event-time column 'ts_ms' is bigint" in m for m in shown.mismatches), shown


@pytest.mark.parametrize("kind", ["iceberg", "delta"])
def test_bootstrap_of_a_mapped_lake_then_a_nested_topic_hands_over_exactly(
    spark: SparkSession, kafka_bootstrap: str, new_topic: Any, scratch: Path, kind: str
) -> None:
    """Iceberg with text event times (``format``), Delta with epoch milliseconds; the topic
    nested, ISO timestamps, its own mapping. Two rides sit one stored step before and
    exactly at the cutoff (inside an hour and a 30-minute window): a cutoff converted to the
    wrong unit or format duplicates or loses one. Equal to the truth; the Kafka records the
    lake owns are skipped, the rest delivered."""
    text = kind == "iceberg"
    step = 1000 if text else 1
    cutoff = START + timedelta(hours=5, minutes=17)
    cutoff_ms = int(cutoff.timestamp() * 1000)
    rows = case.lake_rows(seed=14)
    if text:
        rows["ts_ms"] = rows["ts_ms"] // 1000 * 1000  # the text keeps seconds
    edge = pd.DataFrame(
        {
            "ride_no": np.array([99_998, 99_999], dtype=np.int64),
            "city_name": ["sf", "sf"],
            "ts_ms": np.array([cutoff_ms - step, cutoff_ms], dtype=np.int64),
            "tip": np.array([1.25, 2.5], dtype=np.float32),
        }
    )
    rows = pd.concat([rows, edge]).sort_values("ts_ms", kind="stable").reset_index(drop=True)
    topic = new_topic(prefix=f"nested-{kind}")
    produced = case.produce_nested(kafka_bootstrap, topic, rows)
    lake = iceberg_binding(scratch, rows, text) if text else delta_binding(scratch, rows)
    out = f"{kind}_boot_{uid()}"
    kafka = (
        case.both_bindings(spark, scratch, "t", out, topic, kafka_bootstrap)
        .inputs["rides"]
        .kafka.model_dump(exclude_none=True, by_alias=True)
    )
    cfg = config_from_dict(
        {
            "checkpoint_dir": str(scratch / "checkpoints"),
            "inputs": {
                "rides": {
                    kind: lake,
                    "kafka": kafka,
                    "event_time_bounds": {"max_future": "none"},
                }
            },
            "outputs": {"counts": {"hive": {"table": out}}},
        }
    )
    result = run_job(
        spark,
        case.JOB,
        cfg,
        RunOptions(
            "bootstrap", start=START.isoformat(), cutoff=cutoff.isoformat(), trigger="available-now"
        ),
    )
    assert result.status == "finished"
    assert case.read_counts(spark, out, END) == case.truth(rows)
    counts = result.record.inputs["rides"]
    owned = int((rows["ts_ms"] < cutoff_ms).sum())
    assert counts["skipped"] == owned and counts["delivered"] == produced - owned, counts
    assert counts["dead"] == 0, counts


@pytest.mark.parametrize("kind", ["iceberg", "delta"])
def test_listers_convert_stored_statistics_and_readers_filter_in_the_stored_unit(
    scratch: Path, kind: str
) -> None:
    """Each file's statistics of a stored event time become microseconds for the planner:
    Delta's bigint epoch ms exactly (no timestamp truncation widening), Iceberg's text
    bounds (cut to 16 characters in the manifest) still bounding the file's times; a file
    read for a slice delivers exactly the rows whose time is in ``[lo, hi)``."""
    from kappaplus.connectors.lake.options import LakeSourceOptions
    from kappaplus.slicing.stored_time import column_micros

    rows = case.lake_rows(seed=15)
    text = kind == "iceberg"
    if text:
        rows["ts_ms"] = rows["ts_ms"] // 1000 * 1000
    if kind == "iceberg":
        from kappaplus.connectors.iceberg.catalog import iceberg_lake_options
        from kappaplus.connectors.iceberg.lister import IcebergFileLister as Lister
        from kappaplus.connectors.iceberg.lister import read_task
        from kappaplus.connectors.iceberg.options import IcebergSourceOptions as Options

        lake = iceberg_binding(scratch, rows, text=True)
        resolved = iceberg_lake_options(
            lake["table"],
            lake["catalog"],
            None,
            event_time_column="ts_text",
            eventTimeFormat="yyyy-MM-dd HH:mm:ss",
            manifestDir=str(scratch / "pin"),
        )
    else:
        from kappaplus.connectors.delta.lister import DeltaFileLister as Lister  # type: ignore[assignment]
        from kappaplus.connectors.delta.lister import read_delta_file
        from kappaplus.connectors.delta.options import DeltaSourceOptions as Options  # type: ignore[assignment]
        from kappaplus.connectors.delta.table import delta_lake_options

        lake = delta_binding(scratch, rows)
        resolved = delta_lake_options(
            lake["path"],
            None,
            None,
            event_time_column="ts_ms",
            eventTimeUnit="ms",
            manifestDir=str(scratch / "pin"),
        )
    options: LakeSourceOptions = Options.parse(resolved)
    lister = Lister(options)  # type: ignore[arg-type]
    files = lister.files()
    assert len(files) == HOURS
    column = "ts_text" if text else "ts_ms"
    seen = 0
    for f in files:
        (stats,) = lister.stats(f)
        times = lister.times(f, 0)
        assert stats.ts_min is not None and stats.ts_max is not None, f.path
        assert stats.ts_min <= times.min() and times.max() <= stats.ts_max
        hour = int(times.min()) // 3_600_000_000 * 3_600_000_000
        if not text:  # epoch numbers: the bounds are the file's exact min and max
            assert (stats.ts_min, stats.ts_max) == (times.min(), times.max())
        # a slice inside the file's hour, bounds between two stored steps
        lo, hi = hour + 600_000_000 + 1, hour + 1_800_000_000 + 1
        if kind == "iceberg":
            batches = read_task(options, f.path, [column], lo, hi)  # type: ignore[arg-type]
        else:
            batches = read_delta_file(options, f.path, f.size, [column], lo, hi)  # type: ignore[arg-type]
        read = pa.Table.from_batches(list(batches))
        got = sorted(column_micros(read.column(column), options.storage).to_pylist())
        assert got == sorted(int(t) for t in times if lo <= t < hi), f.path
        seen += len(got)
    assert seen > 0


@pytest.mark.parametrize("kind", ["iceberg", "delta"])
def test_the_stored_unit_is_part_of_the_run_identity(scratch: Path, kind: str) -> None:
    """The same table read as epoch seconds or milliseconds puts other rows into the same
    slices: another run, another checkpoint; a timestamp binding's identity is unchanged."""
    from kappaplus.config import resolve
    from kappaplus.runtime.state.identity import run_identity

    where = {"table": "db.rides"} if kind == "iceberg" else {"path": str(scratch / "t")}
    run = RunOptions("backfill", START.isoformat(), END)

    def identity(**binding: Any) -> Any:
        cfg = lake_config(kind, {**where, **binding}, "o", scratch)
        return run_identity(case.JOB, resolve(cfg, "backfill"), run)

    ms = identity(event_time={"column": "ts_ms", "unit": "ms"}, columns=COLUMNS)
    s = identity(event_time={"column": "ts_ms", "unit": "s"}, columns=COLUMNS)
    assert ms.key() != s.key()
    assert ms.binding()["inputs"]["rides"][f"{kind}.event_time"] == "unit ms"
    plain = identity(event_time_column="ride_time")
    assert f"{kind}.event_time" not in plain.binding()["inputs"]["rides"]


@pytest.mark.slow  # two commands, each its own Spark: about 60 s
def test_kappa_check_and_kappa_run_name_an_iceberg_mismatch_with_the_same_line(
    spark: SparkSession, scratch: Path
) -> None:
    """The commands themselves (own processes, own state directory): ``kappa check`` prints
    the Iceberg binding's columns and the mismatch, ``kappa run`` refuses with the same line,
    both exit 2 before any query starts."""
    import os
    import subprocess
    import tomllib

    from kappaplus.runtime.binding.unify import describe_bindings

    rows = case.lake_rows(seed=16).iloc[::12]
    lake = iceberg_binding(scratch, rows)
    lake["columns"] = {"ride_id": "ride_no", "city": "city_name"}
    out = f"cli_narrow_{uid()}"
    (shown,) = describe_bindings(spark, NARROW, lake_config("iceberg", lake, out, scratch))
    (line,) = shown.mismatches
    here = Path(__file__).parent
    (scratch / "narrowjob.py").write_text(
        f"import sys\nsys.path[:0] = [{str(here)!r}, {str(here.parent)!r}]\n"
        "from test_lake_mapping import NARROW as JOB\n"
    )
    catalog = ", ".join(f"{k} = {v!r}".replace("'", '"') for k, v in lake["catalog"].items())
    (scratch / "narrowjob.toml").write_text(
        f'checkpoint_dir = "{scratch / "cp"}"\n'
        "[inputs.rides.iceberg]\n"
        f'table = "{lake["table"]}"\n'
        f"catalog = {{ {catalog} }}\n"
        'event_time = { column = "ts_ms", unit = "ms" }\n'
        'columns = { ride_id = "ride_no", city = "city_name" }\n'
        "[outputs.counts.hive]\n"
        f'table = "{out}"\n'
    )
    tomllib.loads((scratch / "narrowjob.toml").read_text())  # written right
    env = {
        **os.environ,
        "KAPPA_HOME": str(scratch / "home"),
        "COLUMNS": "400",
        "PYTHONPATH": os.pathsep.join([str(here.parents[1]), str(scratch)]),
    }
    base = [sys.executable, "-m", "kappaplus"]
    config = ["-c", str(scratch / "narrowjob.toml")]
    checked = subprocess.run(
        [*base, "check", "narrowjob:JOB", *config],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert "ride_id int <- ride_no (bigint)" in checked.stdout, checked.stdout
    assert line in " ".join(checked.stdout.split()), checked.stdout
    ran = subprocess.run(
        [*base, "run", "narrowjob:JOB", *config, "--mode", "backfill"]
        + ["--start", START.isoformat(), "--end", END],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert line in " ".join((ran.stdout + ran.stderr).split()), ran.stdout + ran.stderr
