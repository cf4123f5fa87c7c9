"""Each binding's mapping (:mod:`kappaplus.mapping`) resolved against its source's schema in
the caller's process: a lake table's schema (Hive's catalog, Iceberg's and Delta's own; its
stored event time delivered as a timestamp), the Kafka records' ``fields`` (or the job's
declared schema). Used by binding
(:mod:`kappaplus.runtime.binding.inputs`), ``kappa check`` and ``kappa run``'s pre-flight."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from kappaplus.core.errors import ConfigError
from kappaplus.mapping import Resolution, job_mapping, quoted, resolve_mapping
from kappaplus.slicing.files import UNBOUNDED_HI, UNBOUNDED_LO

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from kappaplus.config import DeltaInput, HiveInput, IcebergInput, JobConfig, KafkaInput
    from kappaplus.config.bindings import MappedLakeInput
    from kappaplus.connectors.hive.catalog import HiveTable
    from kappaplus.jobs import InputSpec, Job
    from kappaplus.slicing.files import DataFile


def kafka_event_field(spec: InputSpec, kafka: KafkaInput) -> str:
    """The records' event-time field: ``event_time.column``, else the job's column."""
    stored = kafka.event_time
    return stored.column if stored is not None and stored.column else spec.event_time_column


def kafka_fields(spec: InputSpec, kafka: KafkaInput) -> StructType:
    """The JSON records' schema: ``fields`` when the binding gives it, else the job's;
    a Protobuf topic's, its message's (derived from the descriptor)."""
    from pyspark.sql.types import DataType, StructType

    if kafka.format == "protobuf":
        from kappaplus.runtime.binding.kafka_inputs import decoder_spec

        return decoder_spec(spec, kafka).event_schema
    if kafka.fields is None:
        return spec.struct_type()
    try:
        parsed = DataType.fromDDL(kafka.fields)
    except Exception as exc:  # noqa: BLE001 - the parser's own message
        raise ConfigError(
            f"inputs.{spec.name}.kafka.fields", kafka.fields, str(exc).splitlines()[0][:200]
        ) from None
    assert isinstance(parsed, StructType)
    return parsed


def kafka_resolution(spark: SparkSession, spec: InputSpec, kafka: KafkaInput) -> Resolution:
    """The Kafka binding's mapping checked against its records' fields."""
    binding = f"inputs.{spec.name}.kafka"
    event = kafka_event_field(spec, kafka)
    explicit = kafka.event_time is not None and kafka.event_time.column is not None
    mapped = kafka.columns.get(spec.event_time_column)
    if not explicit and mapped is not None and mapped.strip() not in (event, quoted(event)):
        # the mapping runs on decoded events; the decoder has taken the event time from the
        # record's field of the job's column name already, a null one a dead letter
        raise ConfigError(
            f"{binding}.columns.{spec.event_time_column}",
            mapped,
            f"never applied to the event time: the decoder reads it from the records' field "
            f"{event!r} and dead-letters a record where that is null before any mapping "
            "runs; name the records' event-time field with event_time = { column = "
            '"<field>" } (and unit for epoch numbers), or produce records that carry it',
        )
    mapping = job_mapping(spec, binding, kafka.columns, event if explicit else None)
    return resolve_mapping(spark, spec, binding, mapping, kafka_fields(spec, kafka))


def lake_source_schema(lake: MappedLakeInput, table_schema: StructType) -> StructType:
    """A lake table's columns as its reader delivers them: a stored event time (epoch
    numbers, formatted strings) as a timestamp, the rest as the table has them."""
    from pyspark.sql.types import StructField, StructType, TimestampType

    stored = lake.event_time
    converted = stored is not None and (stored.unit is not None or stored.format is not None)
    return StructType(
        [
            StructField(f.name, TimestampType(), True)
            if converted and f.name == lake.event_time_column
            else f
            for f in table_schema.fields
        ]
    )


def hive_source_schema(spark: SparkSession, hive: HiveInput) -> StructType:
    """The table's columns as its reader delivers them (a stored event time as timestamp)."""
    from kappaplus.connectors.hive import resolve_table

    return lake_source_schema(hive, resolve_table(spark, hive.table).schema)


def hive_resolution(
    spark: SparkSession,
    spec: InputSpec,
    hive: HiveInput,
    source_options: Mapping[str, Any] | None = None,
) -> Resolution:
    """The Hive binding's mapping checked against the table's schema, and the columns it
    reads against the schema of every data file the run may read (an evolved lake: a file
    lacking a column reads it as null, a narrower type widens; a wider or incompatible type
    is a mismatch).

    ``source_options``: the run's source keywords (``read_hive_stream``'s, as
    :func:`~kappaplus.runtime.binding.inputs.hive_options` gives them): only files whose
    partition admits the run's ``[start, end)`` are checked, as the planner sees them; a
    one-day backfill of a years-long table reads a day's footers, not the table's. Without
    them, every file of the table.

    Within a :func:`~kappaplus.connectors.hive.catalog.resolution_scope` it is computed once
    per input and binding whatever its slice size: ``kappa run`` binds a second time with
    larger slices, and reading every file's footer again is a cost paid for nothing."""
    from kappaplus.connectors.hive import resolve_table
    from kappaplus.connectors.hive.catalog import within_scope

    def compute() -> Resolution:
        table = resolve_table(spark, hive.table).schema
        resolution = lake_resolution(spark, spec, "hive", hive, table)
        resolution.mismatches.extend(file_mismatches(spark, spec, hive, resolution, source_options))
        return resolution

    unsized = hive.model_dump_json(exclude={"target_rows_per_trigger"})
    # the source options decide which files are checked; the slice size does not
    options_key = sorted(
        (k, str(v)) for k, v in (source_options or {}).items() if k != "targetRowsPerTrigger"
    )
    key = ("hive_resolution", id(spark), id(spec), unsized, repr(options_key))
    return within_scope(key, compute)


def iceberg_resolution(spark: SparkSession, spec: InputSpec, iceberg: IcebergInput) -> Resolution:
    """The Iceberg binding's mapping checked against the table's current schema. Columns
    are matched by field id and files read in that schema (pyiceberg promotes an old file's
    int to a long, a float to a double): a widened column is fine across old files; what
    the schema says is what every file is read as."""
    from kappaplus.connectors.iceberg.catalog import table_schema

    schema = table_schema(iceberg.table, iceberg.catalog)
    return lake_resolution(spark, spec, "iceberg", iceberg, schema)


def delta_resolution(spark: SparkSession, spec: InputSpec, delta: DeltaInput) -> Resolution:
    """The Delta binding's mapping checked against the table's current schema."""
    from kappaplus.connectors.delta.table import table_schema

    schema = table_schema(delta.path, delta.storage_options)
    return lake_resolution(spark, spec, "delta", delta, schema)


def lake_resolution(
    spark: SparkSession,
    spec: InputSpec,
    kind: str,
    lake: MappedLakeInput,
    table_schema: StructType,
) -> Resolution:
    """A lake binding's mapping (Hive, Iceberg, Delta alike) checked against its table's
    schema: ``columns`` and the ``mappings`` per date range, and the stored event time's
    type (epoch numbers need an integer column, a format a string one, else a timestamp)."""
    from kappaplus.connectors.lake.options import stored_type_ok
    from kappaplus.slicing.stored_time import storage_of

    binding = f"inputs.{spec.name}.{kind}"
    schema = lake_source_schema(lake, table_schema)
    mapping = job_mapping(spec, binding, lake.columns, lake.event_time_column)
    resolution = resolve_mapping(spark, spec, binding, mapping, schema)
    if lake.mappings:
        resolution = _by_date_range(spark, spec, binding, lake, schema, resolution)
    stored = lake.event_time
    storage = storage_of(stored.unit, stored.format) if stored is not None else ""
    column = lake.event_time_column
    if column in table_schema.fieldNames():
        kind_of = table_schema[column].dataType
        if not stored_type_ok(kind_of, storage):
            wanted = {"": "a timestamp (or set event_time.unit / event_time.format)"}.get(
                storage,
                "an integer for event_time.unit"
                if storage.startswith("unit:")
                else "a string for event_time.format",
            )
            resolution.mismatches.append(
                f"{binding}: event-time column {column!r} is {kind_of.simpleString()} in the "
                f"source, the job declares timestamp: needs {wanted}"
            )
    return resolution


def _by_date_range(
    spark: SparkSession,
    spec: InputSpec,
    binding: str,
    lake: MappedLakeInput,
    schema: StructType,
    first: Resolution,
) -> Resolution:
    """The binding's ``columns`` before the first ``mappings`` entry, then from each entry's
    ``from`` on those columns with the entry's (and the entries' before it) replacing
    theirs, as one resolution choosing by the row's event time."""
    from kappaplus.core.timeutil import iso
    from kappaplus.mapping import by_date_range

    ranges: list[tuple[int | None, str, Resolution]] = [
        (None, f"before {iso(lake.mappings[0].micros)}", first)
    ]
    columns = dict(lake.columns)
    for i, entry in enumerate(lake.mappings):
        key = f"{binding}.mappings[{i}]"
        columns.update(entry.columns)  # each range changes only what it lists
        mapping = job_mapping(spec, key, columns, lake.event_time_column)
        resolved = resolve_mapping(spark, spec, key, mapping, schema)
        ranges.append((entry.micros, f"from {iso(entry.micros)}", resolved))
    event = next(c.expression for c in first.columns if c.column == spec.event_time_column)
    return by_date_range(event, ranges, binding)


def file_mismatches(
    spark: SparkSession,
    spec: InputSpec,
    hive: HiveInput,
    resolution: Resolution,
    source_options: Mapping[str, Any] | None = None,
) -> list[str]:
    """One line per (file, column) whose stored type does not widen to the type it is read
    as: the job's type for a column mapped by name, else the table's. Reads footers only,
    of the files the run may read (:func:`hive_resolution`)."""
    from pyspark.sql.pandas.types import from_arrow_type

    from kappaplus.connectors.hive import resolve_table
    from kappaplus.mapping import quoted, widens

    table = resolve_table(spark, hive.table)
    if table.format != "parquet":
        return []
    wanted = {f.name: f.dataType for f in table.schema.fields}
    declared = spec.struct_type()
    for source in resolution.columns:
        reads = source.reads
        direct = source.expression == quoted(reads[0]) if len(reads) == 1 else False
        if direct and reads[0] != hive.event_time_column:
            wanted[reads[0]] = declared[source.column].dataType
    read = [c for c in resolution.reads if c not in table.partition_columns]
    lines: list[str] = []
    for data_file, stored in _file_schemas(table, source_options):
        for column in read:
            if column not in stored.names or column == hive.event_time_column:
                continue
            try:
                kind = from_arrow_type(stored.field(column).type)
            except TypeError:
                kind = None
            if kind is None or not widens(kind, wanted[column]):
                shown = kind.simpleString() if kind is not None else str(stored.field(column).type)
                lines.append(
                    f"inputs.{spec.name}.hive: column {column!r} of file {data_file.path!r} is "
                    f"{shown}, read as {wanted[column].simpleString()}: a narrowing or "
                    "incompatible change; widen the declared type, or rewrite the file"
                )
    return lines


def _file_schemas(
    table: HiveTable, source_options: Mapping[str, Any] | None
) -> Iterator[tuple[DataFile, pa.Schema]]:
    """The data files of ``table`` a run with ``source_options`` may read (every file
    without them) with their stored schemas, in listing order."""
    import pyarrow.parquet as pq

    from kappaplus.connectors.hive.catalog import hive_stream_options
    from kappaplus.connectors.hive.files import list_data_files
    from kappaplus.connectors.hive.planner import HiveFileLister
    from kappaplus.connectors.lake.filesystems import filesystem_for
    from kappaplus.connectors.lake.options import LakeSourceOptions

    if source_options is None:
        partitions = tuple(table.partition_columns)
        files = list_data_files(table.location, partitions, None, 0, False, table.name)
    else:
        options = LakeSourceOptions.parse(hive_stream_options(table, **source_options))
        lo = options.starting_timestamp
        hi = options.ending_timestamp
        files = [
            f
            for f in HiveFileLister(options).files()
            if f.admits(UNBOUNDED_LO if lo is None else lo, UNBOUNDED_HI if hi is None else hi)
        ]
    fs, _ = filesystem_for(table.location)
    for data_file in files:
        with fs.open_input_file(data_file.path) as handle:
            yield data_file, pq.read_schema(handle)


def refuse_mismatches(resolution: Resolution) -> None:
    """:class:`ConfigError` listing the binding's mismatches, one line each (exit 2)."""
    if resolution.mismatches:
        raise ConfigError(
            resolution.binding + ".columns",
            None,
            "\n  ".join(["the source does not fit the job's columns:", *resolution.mismatches]),
        )


def stored_options(lake: MappedLakeInput) -> dict[str, str]:
    """The lake source options of a stored event time (``eventTimeUnit|Format``)."""
    stored = lake.event_time
    if stored is None:
        return {}
    if stored.unit is not None:
        return {"eventTimeUnit": stored.unit}
    if stored.format is not None:
        return {"eventTimeFormat": stored.format}
    return {}


def describe_bindings(spark: SparkSession, job: Job, config: JobConfig) -> list[Resolution]:
    """Every binding of every input of ``job`` resolved (what ``kappa check`` shows and
    ``kappa run`` refuses): Kafka bindings against their records' fields, Hive bindings
    against their table and its files, Iceberg and Delta bindings against their table."""
    out: list[Resolution] = []
    for spec in job.inputs:
        binding = config.inputs.get(spec.name)
        if binding is None:
            continue
        if binding.kafka is not None:
            out.append(kafka_resolution(spark, spec, binding.kafka))
        if binding.hive is not None:
            out.append(hive_resolution(spark, spec, binding.hive))
        if binding.iceberg is not None:
            out.append(iceberg_resolution(spark, spec, binding.iceberg))
        if binding.delta is not None:
            out.append(delta_resolution(spark, spec, binding.delta))
    return out
