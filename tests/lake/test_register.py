"""``register_table`` / ``describe_table``: a Parquet directory a user already has, as a
partitioned table of the catalog the runs use, described from file metadata."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from catalog_notes import noted_elsewhere
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from kappaplus.cli import app
from kappaplus.connectors.hive.catalog import resolve_table
from kappaplus.core.errors import ConfigError, DataError, TableError, TableNameTaken, TableNotFound
from kappaplus.core.settings import state_dir
from kappaplus.lake.describe import describe_lines, describe_table
from kappaplus.lake.register import register_table

BASE = datetime(2024, 3, 1, tzinfo=UTC)
US = 1_000_000


def write_hour(root: Path, hour: int, files: int = 1, skew_minutes: int = 0) -> int:
    """Rows of arrival hour ``hour`` (10 per file); the first row of each file's event time
    is ``skew_minutes`` after the partition's end. Returns the rows written."""
    at = BASE + timedelta(hours=hour)
    folder = root / f"dt={at:%Y-%m-%d}" / f"hr={at:%H}"
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(files):
        times = [at + timedelta(minutes=5 * i) for i in range(10)]
        if skew_minutes:
            times[0] = at + timedelta(hours=1, minutes=skew_minutes)
        table = pa.table(
            {
                "ride_id": [f"{hour}-{n}-{i}" for i in range(10)],
                "city": ["a"] * 10,
                "event_time": pa.array(times, pa.timestamp("us", tz="UTC")),
            }
        )
        pq.write_table(table, folder / f"part-{n}.parquet")
    return 10 * files


def test_register_and_describe_a_lake_directory(spark: SparkSession, tmp_path: Path) -> None:
    root = tmp_path / "rides"
    rows = sum(write_hour(root, h, files=1 + h % 2) for h in range(30))
    rows += write_hour(root, 30, skew_minutes=33)
    name = f"lake_{uuid.uuid4().hex[:6]}.rides"
    done = register_table(spark, name, str(root), partition_format="dt=%Y-%m-%d/hr=%H")
    assert (done.partitions, done.added) == (31, 31)
    assert done.partition_columns == ("dt", "hr")
    assert dict(done.columns)["event_time"] == "timestamp"
    assert spark.sql(f"SHOW PARTITIONS {name}").count() == 31
    assert spark.table(name).count() == rows
    assert spark.table(name).where("dt = '2024-03-02' and hr = '05'").count() == 20

    # registering again adds only what appeared since
    rows += write_hour(root, 31)
    again = register_table(spark, name, str(root))
    assert (again.partitions, again.added) == (32, 1)
    assert spark.table(name).count() == rows

    seen = describe_table(spark, name)
    assert (seen.partitions, seen.rows, seen.event_time_column) == (32, rows, "event_time")
    assert seen.files == 15 * 2 + 17 * 1
    assert seen.event_time_min == int(BASE.timestamp()) * US
    assert seen.event_time_max == int((BASE + timedelta(hours=31, minutes=45)).timestamp()) * US
    assert seen.partition_format == "dt=%Y-%m-%d/hr=%H"
    assert seen.after_partition == 33 * 60 * US + 1  # max_earliness must exceed 33 minutes
    assert seen.before_partition == 0 and seen.null_event_times == 0
    text = describe_lines(seen)
    assert all(
        len(line) <= 80 for line in text if not line.startswith(("location", "table", "columns"))
    )
    assert any("33m00s after" in line for line in text), text
    json.dumps(seen.as_json())


def test_register_names_a_directory_that_does_not_fit(spark: SparkSession, tmp_path: Path) -> None:
    root = tmp_path / "odd"
    write_hour(root, 0)
    (root / "dt=2024-03-01" / "hour=07").mkdir()
    pq.write_table(pa.table({"x": [1]}), root / "dt=2024-03-01" / "hour=07" / "p.parquet")
    with pytest.raises(DataError, match="hour=07|hr=00"):
        register_table(spark, f"odd_{uuid.uuid4().hex[:6]}", str(root))
    bad_time = tmp_path / "bad_time"
    write_hour(bad_time, 0)
    (bad_time / "dt=2024-13-01" / "hr=00").mkdir(parents=True)
    pq.write_table(pa.table({"x": [1]}), bad_time / "dt=2024-13-01" / "hr=00" / "p.parquet")
    with pytest.raises(ConfigError, match="'--partition-format'.*dt=2024-13-01") as caught:
        register_table(
            spark,
            f"bad_{uuid.uuid4().hex[:6]}",
            str(bad_time),
            partition_format="dt=%Y-%m-%d/hr=%H",
        )
    assert caught.value.exit_code == 2


def test_register_user_errors_exit_2_in_one_or_two_lines(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Issue 24 item 7: a wrong --partition-format, or a name taken at another location,
    exited 1 (user errors are exit 2 elsewhere)."""
    root = tmp_path / "rides"
    write_hour(root, 0)
    wrong = CliRunner().invoke(
        app,
        ["table", "register", "x_wrong", "--location", str(root), "--partition-format", "day=%d"],
    )
    assert wrong.exit_code == 2, wrong.output
    assert "--partition-format" in wrong.output and "dt=2024-03-01" in wrong.output
    assert len(wrong.output.strip().splitlines()) <= 3  # one message, wrapped at 80 columns

    name = f"taken_{uuid.uuid4().hex[:6]}"
    register_table(spark, name, str(root))
    other = tmp_path / "other"
    write_hour(other, 1)
    with pytest.raises(TableNameTaken) as taken:
        register_table(spark, name, str(other))
    assert str(root) in str(taken.value) and "--replace" in str(taken.value)
    assert taken.value.exit_code == 2
    with pytest.raises(TableNotFound) as missing:
        resolve_table(spark, f"no_such_{uuid.uuid4().hex[:6]}")
    assert missing.value.exit_code == 2 and "kappa table register" in str(missing.value)


def test_a_table_of_the_other_catalog_is_named(spark: SparkSession) -> None:
    name = f"default.elsewhere_{uuid.uuid4().hex[:6]}"
    with noted_elsewhere(name):
        with pytest.raises(TableError) as missing:
            resolve_table(spark, name)
        assert "registered in the metastore server thrift://127.0.0.1:1" in str(missing.value)
        assert "kappa table register" in str(missing.value)
        assert str(state_dir() / "metastore_db") in str(missing.value)  # not a function name
        # the local stack's metastore server, stopped (`kappa down`): `kappa up` brings it back
        stack = state_dir() / "metastore"
        made = not stack.exists()
        stack.mkdir(exist_ok=True)
        try:
            with pytest.raises(TableError) as stopped:
                resolve_table(spark, name)
            assert "start it again with `kappa up`" in str(stopped.value)
        finally:
            if made:
                stack.rmdir()
    managed = f"made_elsewhere_{uuid.uuid4().hex[:6]}"
    (state_dir() / "warehouse" / managed).mkdir(parents=True)
    with pytest.raises(TableError, match="probably created through the metastore server"):
        resolve_table(spark, managed)


def test_a_preparation_scope_asks_the_catalog_once_per_table(spark: SparkSession) -> None:
    from kappaplus.connectors.hive.catalog import resolution_scope

    name = f"scoped_{uuid.uuid4().hex[:6]}"
    spark.sql(
        f"CREATE TABLE {name} (id bigint, ts timestamp, dt string) "
        "USING parquet PARTITIONED BY (dt)"
    )
    with resolution_scope():
        first = resolve_table(spark, name)
        assert resolve_table(spark, name) is first  # kept, not asked again
        with pytest.raises(TableNotFound):  # a failure is not kept either way
            resolve_table(spark, f"no_such_{uuid.uuid4().hex[:6]}")
    spark.sql(f"ALTER TABLE {name} ADD COLUMNS (extra int)")
    after = resolve_table(spark, name)  # outside the scope: the catalog's answer of now
    assert after is not first
    assert "extra" in after.schema.fieldNames() and "extra" not in first.schema.fieldNames()
    assert after.partition_columns == first.partition_columns == ("dt",)


def test_a_preparation_scope_checks_a_hive_input_once_whatever_its_slice_size(
    spark: SparkSession, tmp_path: Path
) -> None:
    """kappa run binds a second time with larger slices: the mapping and every file's
    schema are checked once per preparation, again for another binding or outside one."""
    from kappaplus.config.bindings import HiveInput
    from kappaplus.connectors.hive.catalog import resolution_scope
    from kappaplus.jobs import InputSpec
    from kappaplus.runtime.binding.unify import hive_resolution

    root = tmp_path / "rides"
    write_hour(root, 0)
    name = f"checked_{uuid.uuid4().hex[:6]}"
    register_table(spark, name, str(root), partition_format="dt=%Y-%m-%d/hr=%H")
    spec = InputSpec("rides", "ride_id string, city string, event_time timestamp", "event_time")
    hive = HiveInput.model_validate({"table": name, "event_time_column": "event_time"})
    larger = hive.model_copy(update={"target_rows_per_trigger": 4_000_000})
    renamed = HiveInput.model_validate(
        {"table": name, "event_time_column": "event_time", "columns": {"city": "upper(city)"}}
    )
    with resolution_scope():
        first = hive_resolution(spark, spec, hive)
        assert hive_resolution(spark, spec, larger) is first
        assert hive_resolution(spark, spec, renamed) is not first
    assert hive_resolution(spark, spec, hive) is not first
    assert [c.column for c in first.columns] == ["ride_id", "city", "event_time"]
    assert not first.mismatches


def test_a_run_checks_the_schemas_of_the_files_its_range_may_read_and_no_others(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A file whose column no longer fits the job, in an hour outside the run's range, does
    not stop the run; a run whose range reaches it, and the check without a range (``kappa
    check``), name it."""
    from kappaplus.config.bindings import HiveInput
    from kappaplus.jobs import InputSpec
    from kappaplus.runtime.binding.inputs import hive_options
    from kappaplus.runtime.binding.unify import hive_resolution
    from kappaplus.runtime.options import RunOptions

    root = tmp_path / "rides"
    for hour in (0, 1, 2):
        write_hour(root, hour)
    at = BASE + timedelta(hours=5)
    folder = root / f"dt={at:%Y-%m-%d}" / f"hr={at:%H}"
    folder.mkdir(parents=True)
    pq.write_table(  # city stored as a struct: read as a string it fits no longer
        pa.table(
            {
                "ride_id": ["x"],
                "city": pa.array([{"name": "a"}]),
                "event_time": pa.array([at], pa.timestamp("us", tz="UTC")),
            }
        ),
        folder / "part-0.parquet",
    )
    name = f"ranged_{uuid.uuid4().hex[:6]}"
    register_table(spark, name, str(root), partition_format="dt=%Y-%m-%d/hr=%H")
    spec = InputSpec("rides", "ride_id string, city string, event_time timestamp", "event_time")
    hive = HiveInput.model_validate({"table": name, "event_time_column": "event_time"})

    def mismatches(end_hour: int | None) -> list[str]:
        if end_hour is None:
            return hive_resolution(spark, spec, hive).mismatches
        end = (BASE + timedelta(hours=end_hour)).isoformat()
        run = RunOptions("backfill", BASE.isoformat(), end)
        return hive_resolution(spark, spec, hive, hive_options(hive, run, "2 minutes")).mismatches

    assert mismatches(3) == []
    for end_hour in (6, None):
        found = mismatches(end_hour)
        assert len(found) == 1 and "'city'" in found[0], found
        assert str(folder / "part-0.parquet") in found[0], found


def test_the_catalog_answers_as_describe_does(spark: SparkSession, tmp_path: Path) -> None:
    """A table's partition columns, type, format and location asked of the session catalog
    directly (no SQL statement) equal what ``DESCRIBE TABLE EXTENDED`` says, for every kind
    of table the sources and sinks meet; a name it cannot take goes through ``DESCRIBE``."""
    from kappaplus.core.table.catalogs import catalog_sections, describe_sections, described

    tag = uuid.uuid4().hex[:6]
    database = f"db_{tag}"
    spark.sql(f"CREATE DATABASE {database}")
    tables = {
        f"hive_{tag}": "(a int, ts timestamp) PARTITIONED BY (dt string, hr int) STORED AS PARQUET",
        f"{database}.source_{tag}": "(a int, dt string) USING parquet PARTITIONED BY (dt)",
        f"spaced_{tag}": f"(a int) USING parquet LOCATION '{tmp_path / 'a b' / 'c%d'}'",
        f"orc_{tag}": "(a int) STORED AS ORC",
    }
    for name, body in tables.items():
        spark.sql(f"CREATE TABLE {name} {body}")
    spark.sql(f"CREATE VIEW view_{tag} AS SELECT * FROM hive_{tag}")
    keys = ("Type", "Provider", "InputFormat", "Location")
    for name in [*tables, f"view_{tag}", f"`{database}`.`source_{tag}`", f"HIVE_{tag}"]:
        columns, details = describe_sections(spark.sql(f"DESCRIBE TABLE EXTENDED {name}").collect())
        expected = (columns, {k: v for k, v in details.items() if k in keys})
        assert catalog_sections(spark, name) == expected, name
        assert described(spark, name) == expected
    assert catalog_sections(spark, f"hive_{tag}")[0] == ["dt", "hr"]
    assert "a b" in catalog_sections(spark, f"spaced_{tag}")[1]["Location"]  # not a%20b
    # three-part names and missing tables: DESCRIBE's answer and error
    three = f"spark_catalog.default.hive_{tag}"
    assert catalog_sections(spark, three) is None
    assert described(spark, three)[0] == ["dt", "hr"]
    assert catalog_sections(spark, f"missing_{tag}") is None
    with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND"):
        described(spark, f"missing_{tag}")


def test_replace_moves_a_registration_and_refuses_a_managed_table(
    spark: SparkSession, tmp_path: Path
) -> None:
    name = f"moved_{uuid.uuid4().hex[:6]}"
    first, second = tmp_path / "first", tmp_path / "second"
    write_hour(first, 1)
    write_hour(second, 2)
    register_table(spark, name, str(first))
    register_table(spark, name, str(second), replace=True)
    assert resolve_table(spark, name).location.removeprefix("file:").rstrip("/") == str(second)
    assert (first / "dt=2024-03-01").is_dir()  # its files stay where they are
    managed = f"managed_{uuid.uuid4().hex[:6]}"
    spark.sql(f"CREATE TABLE {managed} (id bigint) USING parquet")
    with pytest.raises(TableNameTaken, match="managed table"):
        register_table(spark, managed, str(second), replace=True)
    assert spark.catalog.tableExists(managed)


def test_describe_of_a_table_with_two_timestamp_columns_names_the_option(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Issue 47 item 10: ``option '--event-time' = None: ...`` named a value no one gave; the
    error says to name the event-time column with --event-time (Hive, Delta and Iceberg)."""
    name = f"lake_{uuid.uuid4().hex[:6]}.two_stamps"
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {name.split('.')[0]}")
    spark.sql(f"CREATE TABLE {name} (id string, picked timestamp, dropped timestamp) USING parquet")
    with pytest.raises(ConfigError) as raised:
        describe_table(spark, name)
    text = str(raised.value)
    assert "None" not in text and raised.value.exit_code == 2, text
    assert "2 timestamp columns (picked, dropped)" in text, text
    assert "name the event-time column with --event-time" in text, text

    from deltalake import write_deltalake
    from iceberg_tables import catalog_props
    from pyiceberg.catalog import load_catalog

    stamps = pa.table(
        {
            "picked": pa.array([BASE], pa.timestamp("us", tz="UTC")),
            "dropped": pa.array([BASE], pa.timestamp("us", tz="UTC")),
        }
    )
    write_deltalake(str(tmp_path / "delta"), stamps)
    props = catalog_props(tmp_path / "catalog")
    catalog = load_catalog("kappa", **props)
    catalog.create_namespace("db")
    catalog.create_table("db.two_stamps", stamps.schema).append(stamps)
    for args in (
        [str(tmp_path / "delta"), "--delta"],
        ["db.two_stamps", "--iceberg", "--catalog", json.dumps(props)],
    ):
        result = CliRunner().invoke(app, ["table", "describe", *args])
        text = " ".join(result.output.split())
        assert result.exit_code == 2 and "None" not in text, text
        assert "name the event-time column with --event-time" in text, text
