"""Which reader reads an Iceberg table (``kappaplus.connectors.iceberg.jvm_path``): the JVM
reader (Spark's Parquet reader, columns by name) where that reads what pyiceberg reads by
field id, the Python reader otherwise, with the reason.

Each rule is shown on a real table written with pyiceberg; the JVM path's rows are compared
with the rows as written (a column added after the first files: null in the old ones).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from iceberg_tables import (
    arrow_rows,
    catalog_props,
    make_rows,
    open_catalog,
    position_delete,
    tumbling,
    write_table,
)
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kappaplus.connectors.iceberg import read_iceberg_stream
from kappaplus.connectors.iceberg.catalog import iceberg_lake_options
from kappaplus.connectors.iceberg.jvm_path import jvm_unsupported_iceberg
from kappaplus.connectors.iceberg.options import IcebergSourceOptions
from kappaplus.connectors.lake.jvm_reader import file_scheme
from kappaplus.connectors.lake.jvm_reader import lake_file_uri as jvm_file_uri
from kappaplus.core.errors import ConfigError

END = "2024-03-06"


def local(scheme: str) -> bool:
    return scheme == "file"


def why_not(written: Any, scratch: Path, reachable: Any = local, **options: Any) -> str | None:
    resolved = iceberg_lake_options(
        written.name,
        written.props,
        None,
        event_time_column="ts",
        manifestDir=str(scratch / "manifests"),
        **options,
    )
    return jvm_unsupported_iceberg(IcebergSourceOptions.parse(resolved), reachable)


def test_file_schemes_and_uris() -> None:
    assert file_scheme("/w/t/a.parquet") == "file"
    assert file_scheme("file:///w/t/a.parquet") == "file"
    assert file_scheme("s3://bucket/t/a.parquet") == "s3"
    assert jvm_file_uri("/w/t/a.parquet") == "file:///w/t/a.parquet"
    assert jvm_file_uri("file:///w/t/a.parquet") == "file:///w/t/a.parquet"
    assert jvm_file_uri("file:/w/t/a.parquet") == "file:/w/t/a.parquet"  # a metastore's form
    assert file_scheme("file:/w/t/a.parquet") == "file"
    assert jvm_file_uri("hdfs://nn:8020/t/a.parquet") == "hdfs://nn:8020/t/a.parquet"


def test_plain_tables_take_the_jvm_reader(scratch: Path) -> None:
    for partitioning in ("none", "day", "bucket"):
        props = catalog_props(scratch / "catalog")
        written = write_table(props, f"db.plain_{partitioning}", partitioning, per_day=20)
        assert why_not(written, scratch / partitioning) is None, partitioning


def test_what_sends_a_table_to_the_python_reader(scratch: Path) -> None:
    """A widened type, a name mapping, delete files, a store the JVM cannot open, dead
    letters: each one named. A rename or a name reused is no reason (the JVM reader matches
    field ids), nor is it when read by name would be wrong (``by_field_id=False``)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import DoubleType, IntegerType, LongType, NestedField, TimestamptzType

    from kappaplus.connectors.iceberg.jvm_path import schema_history_problem

    props = catalog_props(scratch / "catalog")

    renamed = write_table(props, "db.renamed", "none", per_day=20)
    with renamed.table().update_schema() as update:
        update.rename_column("v", "value")
    assert why_not(renamed, scratch / "r") is None
    columns = ["id", "key", "ts", "value"]
    by_name = schema_history_problem(renamed.table().metadata, columns, by_field_id=False)
    assert by_name == "column 'value' was named 'v' in schema 0"

    reused = write_table(props, "db.reused", "none", per_day=20)
    with reused.table().update_schema() as update:
        update.delete_column("v")
    with reused.table().update_schema() as update:
        update.add_column("v", DoubleType())
    assert why_not(reused, scratch / "u") is None
    by_name = schema_history_problem(
        reused.table().metadata, ["id", "key", "ts", "v"], by_field_id=False
    )
    assert by_name is not None and "the name 'v' belonged to another column (field id 4)" in by_name

    mapped = write_table(props, "db.mapped", "none", per_day=20)
    with mapped.table().transaction() as tx:
        tx.set_properties({"schema.name-mapping.default": "[]"})
    why = why_not(mapped, scratch / "nm")
    assert why is not None and why.startswith("the table has a name mapping")

    catalog = open_catalog(props)
    widened = catalog.create_table(
        "db.widened",
        schema=Schema(
            NestedField(1, "ts", TimestamptzType(), required=False),
            NestedField(2, "n", IntegerType(), required=False),
        ),
    )
    widened.append(
        pa.table(
            {
                "ts": pa.array([0], pa.timestamp("us", tz="UTC")),
                "n": pa.array([1], pa.int32()),
            }
        )
    )
    with widened.update_schema() as update:
        update.update_column("n", LongType())
    why = why_not(type("W", (), {"name": "db.widened", "props": props})(), scratch / "w")
    assert why == "column 'n' was int in schema 0 (now long)"

    deleted = position_delete(write_table(props, "db.deleted", "none", per_day=20))
    why = why_not(deleted, scratch / "d")
    assert why is not None and why.startswith("delete files apply to data file")

    plain = write_table(props, "db.plain", "none", per_day=20)
    nothing = why_not(plain, scratch / "s3", reachable=lambda scheme: False)
    assert nothing is not None and "no file system for file://" in nothing
    assert why_not(plain, scratch / "p") is None
    dead = why_not(
        plain, scratch / "dl", nullEventTimePolicy="deadLetter", deadLetterPath=str(scratch / "dlq")
    )
    assert dead == "unplaceable rows go to dead letters, which only the Python reader writes"


def test_identity_partition_column_not_in_a_file_is_read_by_pyiceberg(scratch: Path) -> None:
    """A file that holds no values of an identity partition's column (no size recorded for
    it: a file added from a Hive layout keeps the value in its path) goes to pyiceberg,
    which fills the value in; Spark would read null. pyiceberg itself always writes the
    column, so the file entry is the real one with the column's size taken out."""
    from types import SimpleNamespace

    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import DoubleType, LongType, NestedField, TimestamptzType

    from kappaplus.connectors.iceberg.jvm_path import _missing_partition_column

    props = catalog_props(scratch / "catalog")
    catalog = open_catalog(props)
    catalog.create_namespace_if_not_exists("db")
    table = catalog.create_table(
        "db.identity",
        schema=Schema(
            NestedField(1, "id", LongType(), required=False),
            NestedField(2, "key", LongType(), required=False),
            NestedField(3, "ts", TimestamptzType(), required=False),
            NestedField(4, "v", DoubleType(), required=False),
        ),
        partition_spec=PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "key")),
    )
    table.append(arrow_rows(make_rows(1, 20, 3)))
    columns = ["id", "key", "ts", "v"]
    files = {t.file.file_path: t.file for t in table.scan().plan_files()}
    tasks = {path: SimpleNamespace(file=f) for path, f in files.items()}
    assert _missing_partition_column(table.metadata, tasks, columns) is None
    path, real = next(iter(files.items()))
    sizes = {k: v for k, v in dict(real.column_sizes).items() if k != 2}
    counts = {k: v for k, v in dict(real.value_counts or {}).items() if k != 2}
    hive_style = SimpleNamespace(spec_id=real.spec_id, column_sizes=sizes, value_counts=counts)
    tasks[path] = SimpleNamespace(file=hive_style)
    why = _missing_partition_column(table.metadata, tasks, columns)
    assert why == (
        f"file {path!r} has no statistics for partition column 'key' (it may keep its "
        "value in its path only)"
    )
    assert _missing_partition_column(table.metadata, tasks, ["id", "ts", "v"]) is None


def reader_of(df: DataFrame) -> str:
    plan = df._jdf.queryExecution().analyzed().toString()
    return "jvm" if "kappa_hive_jvm" in plan else "python"


def test_reader_jvm_names_why_not(spark: SparkSession, scratch: Path) -> None:
    written = write_table(catalog_props(scratch / "catalog"), "db.named", "none", per_day=20)
    with written.table().transaction() as tx:
        tx.set_properties({"schema.name-mapping.default": "[]"})
    with pytest.raises(ConfigError) as caught:
        read_iceberg_stream(
            spark,
            written.name,
            event_time_column="ts",
            catalog=written.props,
            manifest_dir=str(scratch / "m"),
            reader="jvm",
        )
    text = str(caught.value)
    assert "reader" in text and "db.named" in text and "name mapping" in text
    df = read_iceberg_stream(
        spark,
        written.name,
        event_time_column="ts",
        catalog=written.props,
        manifest_dir=str(scratch / "m2"),
    )
    assert reader_of(df) == "python"


def test_jvm_reader_matches_columns_by_field_id(spark: SparkSession, scratch: Path) -> None:
    """After the first files: ``v`` renamed ``value``, ``key`` dropped and added again (a new
    field id under the old name), ``note`` added. The JVM reader takes the table and
    delivers the rows as written: ``value`` from the old files' ``v``, ``key`` and ``note``
    null in the old files (read by name, ``key`` would bring back the dropped values), every
    id once, several slices."""
    import pandas as pd
    from pyiceberg.types import LongType, StringType

    written = write_table(catalog_props(scratch / "catalog"), "db.evolved", "day", per_day=150)
    with written.table().update_schema() as update:
        update.rename_column("v", "value")
        update.delete_column("key")
    with written.table().update_schema() as update:
        update.add_column("key", LongType())
        update.add_column("note", StringType())
    extra = make_rows(3, 40, 9)
    extra["id"] += 100_000
    notes = [f"n{i}" for i in extra["id"]]
    written.table().append(arrow_rows(extra, "value").append_column("note", pa.array(notes)))
    rows = pd.concat(
        [written.rows.assign(key=None, note=None), extra.assign(note=notes)], ignore_index=True
    )
    df = read_iceberg_stream(
        spark,
        written.name,
        event_time_column="ts",
        catalog=written.props,
        watermark_delay="30 minutes",
        end=END,
        manifest_dir=str(scratch / "manifests"),
        targetRowsPerTrigger="300",
    )
    assert reader_of(df) == "jvm"
    query = (
        df.writeStream.format("memory")
        .queryName("evolved_rows")
        .option("checkpointLocation", str(scratch / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert sum(1 for p in query.recentProgress if p["numInputRows"]) >= 3, "several slices"
    got = spark.table("evolved_rows").filter(F.col("id").isNotNull()).toPandas()
    assert len(got) == len(rows) and got["id"].is_unique

    def by_id(frame: pd.DataFrame) -> dict[int, tuple]:
        return {
            int(r.id): (None if pd.isna(r.key) else int(r.key), float(r.v), r.note)
            for r in frame.itertuples()
        }

    assert by_id(got.rename(columns={"value": "v"})) == by_id(rows)
    assert got["key"].isna().sum() == len(written.rows), "the dropped key is not read back"
    got["ts"] = got["ts"].dt.tz_localize("UTC")  # the session's time zone is UTC
    assert tumbling(got.rename(columns={"value": "v"}), 10) == tumbling(rows, 10)
