"""Schema unification: a binding's source fields -> the job's declared columns.

A lake written by another pipeline flattens, renames and keeps event times as epoch
numbers; a topic carries nested records. A binding says once how its source's fields make
the job's columns (``columns = { ride_id = "cast(ride_no as string)", city = "payload.city" }``
and ``event_time = { column = "ts_ms", unit = "ms" }``); the runtime applies it in one place
for every mode, before the watermark (:func:`apply_mapping`), and checks it with Spark's
analyzer against the source's schema in the caller's process before any query starts
(:func:`resolve_mapping`): every expression resolves, the source columns it reads are known
(the lake readers read only those), and its type is the job's or widens to it. A narrowing
or incompatible type is one line naming the binding, the column, both types and the way out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kappaplus.core.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

    from kappaplus.jobs import InputSpec

_RANK = {"tinyint": 1, "smallint": 2, "int": 3, "bigint": 4}


@dataclass(frozen=True)
class ColumnSource:
    """Where one job column comes from: its expression, the source columns it reads and
    the type it has before the cast to the job's type."""

    column: str
    expression: str
    reads: tuple[str, ...]
    source_type: str
    job_type: str
    ranges: tuple[tuple[str, ColumnSource], ...] = ()
    """For a mapping per date range (``mappings``): each range's label (``before ...``,
    ``from ...``) and its own source; ``expression`` then chooses by event time."""

    def line(self) -> str:
        if self.ranges:
            parts = "; ".join(
                f"{label}: {c.expression} ({c.source_type})" for label, c in self.ranges
            )
            return f"{self.column} {self.job_type} <- {parts}"
        return f"{self.column} {self.job_type} <- {self.expression} ({self.source_type})"


@dataclass(frozen=True)
class Resolution:
    """A binding's mapping checked against its source schema."""

    binding: str
    columns: list[ColumnSource]
    mismatches: list[str] = field(default_factory=list)

    @property
    def reads(self) -> list[str]:
        """The source's top-level columns the mapping reads (what a lake reader reads)."""
        seen: dict[str, None] = {}
        for source in self.columns:
            seen.update(dict.fromkeys(source.reads))
        return list(seen)


def quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def job_mapping(
    spec: InputSpec, binding: str, columns: Mapping[str, str], event_time_field: str | None
) -> dict[str, str]:
    """Every declared column of ``spec`` -> its expression over the source (a column not
    in ``columns`` is read by its own name; the event time from ``event_time_field``)."""
    declared = spec.struct_type().fieldNames()
    for name in columns:
        if name not in declared:
            raise ConfigError(
                f"{binding}.columns.{name}",
                columns[name],
                f"not a declared column of input {spec.name!r} (declared: {', '.join(declared)})",
            )
    event = spec.event_time_column
    if event_time_field is not None and event in columns:
        raise ConfigError(
            f"{binding}.columns.{event}",
            columns[event],
            "the event time comes from event_time.column (with its unit or format): "
            "map it there, not in columns",
        )
    mapping = {name: columns.get(name, quoted(name)) for name in declared}
    if event_time_field is not None:
        mapping[event] = quoted(event_time_field)
    return mapping


def widens(source: DataType, target: DataType) -> bool:
    """Whether ``source`` converts to ``target`` without loss: equal, a wider integer,
    float to double, an integer to a double/decimal wide enough, anything to string."""
    from pyspark.sql import types as T

    if source == target or isinstance(source, T.NullType):
        return True
    s, t = source.simpleString(), target.simpleString()
    if s in _RANK and t in _RANK:
        return _RANK[s] <= _RANK[t]
    if isinstance(target, T.DoubleType):
        return s in ("float", "tinyint", "smallint", "int")
    if isinstance(target, T.StringType):
        return not isinstance(source, T.StructType | T.ArrayType | T.MapType | T.BinaryType)
    if isinstance(source, T.TimestampNTZType) and isinstance(target, T.TimestampType):
        return True
    if isinstance(target, T.DecimalType) and s in _RANK:
        return target.precision - target.scale >= {1: 3, 2: 5, 3: 10, 4: 19}[_RANK[s]]
    if isinstance(source, T.StructType) and isinstance(target, T.StructType):
        names = {f.name: f.dataType for f in source.fields}
        return all(widens(names[f.name], f.dataType) for f in target.fields if f.name in names)
    return False


def resolve_mapping(
    spark: SparkSession,
    spec: InputSpec,
    binding: str,
    mapping: Mapping[str, str],
    source: StructType,
) -> Resolution:
    """Check ``mapping`` against the ``source`` schema with Spark's analyzer (no data is
    read): :class:`ConfigError` naming the key for an expression that does not resolve;
    the type mismatches (narrowing, incompatible) in ``mismatches``, one line each."""
    from pyspark.errors import AnalysisException, ParseException
    from pyspark.sql import functions as F

    empty = spark.createDataFrame([], source)
    target = spec.struct_type()
    columns: list[ColumnSource] = []
    mismatches: list[str] = []
    _check_absent(spec, binding, mapping, source)
    for name, expression in mapping.items():
        key = f"{binding}.columns.{name}"
        try:
            projected = empty.select(F.expr(expression).alias(name))
            kind = projected.schema[name].dataType
            reads = _references(projected)
        except (AnalysisException, ParseException) as exc:
            first = str(exc).strip().splitlines()[0][:200]
            raise ConfigError(
                key,
                expression,
                f"does not resolve against the source's fields "
                f"({', '.join(source.fieldNames())}): {first}",
            ) from None
        wanted = target[name].dataType
        columns.append(
            ColumnSource(name, expression, reads, kind.simpleString(), wanted.simpleString())
        )
        if not widens(kind, wanted):
            mismatches.append(
                f"{binding}: column {name!r} <- {expression} is {kind.simpleString()} in the "
                f"source, the job declares {wanted.simpleString()}: a narrowing or incompatible "
                f'type; map it explicitly (columns.{name} = "cast(... as '
                f'{wanted.simpleString()})") if that is meant'
            )
    return Resolution(binding, columns, mismatches)


def by_date_range(
    event: str, ranges: list[tuple[int | None, str, Resolution]], binding: str
) -> Resolution:
    """One resolution of a mapping per date range: ``ranges`` are (the event time from
    which it holds in microseconds, None for the first; its label; its resolution), oldest
    first. A column mapped alike in every range stays as it is; else its expression picks
    each range's (cast to the job's type) by the row's event time ``event`` (an expression
    over the source), so a slice spanning a date maps each row by its own range. The
    mismatches of every range are kept, each naming its range's key."""
    first = ranges[0][2]
    columns: list[ColumnSource] = []
    for i, base in enumerate(first.columns):
        sources = [(label, r.columns[i]) for _, label, r in ranges]
        if len({c.expression for _, c in sources}) == 1:
            columns.append(base)
            continue
        whens = " ".join(
            f"WHEN {event} < timestamp_micros({ranges[k + 1][0]}) "
            f"THEN cast(({c.expression}) as {base.job_type})"
            for k, (_, c) in enumerate(sources[:-1])
        )
        last = sources[-1][1]
        composite = f"CASE {whens} ELSE cast(({last.expression}) as {base.job_type}) END"
        reads = tuple(sorted({r for _, c in sources for r in c.reads}))
        columns.append(
            ColumnSource(
                base.column, composite, reads, base.job_type, base.job_type, tuple(sources)
            )
        )
    mismatches = [line for _, _, r in ranges for line in r.mismatches]
    return Resolution(binding, columns, mismatches)


def _check_absent(
    spec: InputSpec, binding: str, mapping: Mapping[str, str], source: StructType
) -> None:
    """Every job column read by its own name that the source lacks, named in one error
    with the mapping that makes each null (an error per column, one run at a time, hid the
    rest)."""
    have = set(source.fieldNames())
    absent = [
        name
        for name, expression in mapping.items()
        if expression == quoted(name) and name not in have
    ]
    if not absent:
        return
    target = spec.struct_type()
    nulls = ", ".join(
        f'{name} = "cast(null as {target[name].dataType.simpleString()})"'
        for name in absent
        if name != spec.event_time_column
    )
    ways = ["map them from its fields in columns"]
    if nulls:
        ways.append(f"make them null with columns = {{ {nulls} }}")
    if spec.event_time_column in absent:
        ways.append(f"map the event time {spec.event_time_column!r} with event_time.column")
    way_out = ", or ".join(ways)
    raise ConfigError(
        f"{binding}.columns",
        absent,
        f"the source lacks the job's columns {', '.join(absent)} (it has "
        f"{', '.join(source.fieldNames())}): {way_out}",
    )


def _references(projected: DataFrame) -> tuple[str, ...]:
    """The top-level source columns an analyzed projection reads."""
    plan = projected._jdf.queryExecution().analyzed()
    refs = plan.references().toSeq()
    return tuple(sorted({refs.apply(i).name() for i in range(refs.size())}))


def apply_mapping(df: DataFrame, mapping: Mapping[str, str], keep: list[str]) -> DataFrame:
    """``df`` as the job's columns (each its expression) plus the ``keep`` columns as they
    are (the end-of-input marker); the types are conformed afterwards."""
    from pyspark.sql import functions as F

    exprs = [F.expr(expression).alias(name) for name, expression in mapping.items()]
    return df.select(*exprs, *[F.col(quoted(c)) for c in keep if c in df.columns])


def is_identity(mapping: Mapping[str, str]) -> bool:
    """Every column read by its own name: nothing to map."""
    return all(expression == quoted(name) for name, expression in mapping.items())


def apply_phase_mappings(
    df: DataFrame,
    target: StructType,
    lake: Mapping[str, str],
    kafka: Mapping[str, str],
    *,
    phase: str,
    lake_phase: str,
    lake_prefix: str,
    kafka_prefix: str,
) -> DataFrame:
    """The rows of a mapped bootstrap as the job's ``target`` columns.

    Lake rows and Kafka rows come side by side, each side's fields under its prefix, the
    ``phase`` column equal to ``lake_phase`` for a lake row. A lake row goes through the
    lake binding's mapping, a Kafka row through the Kafka binding's: each mapping is
    evaluated with its own side's fields at top level (as the binding's expressions are
    written), then each column is chosen by the phase and cast to the job's type. One
    scan: Spark collapses the projections."""
    from pyspark.sql import functions as F

    lake_fields = [c for c in df.columns if c.startswith(lake_prefix)]
    kafka_fields = [c for c in df.columns if c.startswith(kafka_prefix)]
    held = {name: f"__kappa_lake_value_{i}" for i, name in enumerate(target.fieldNames())}
    keep_kafka = [F.col(quoted(c)) for c in kafka_fields]
    lake_side = df.select(
        F.col(phase),
        *[F.col(quoted(c)).alias(c[len(lake_prefix) :]) for c in lake_fields],
        *keep_kafka,
    )
    lake_done = lake_side.select(
        F.col(phase), *[F.expr(lake[n]).alias(held[n]) for n in target.fieldNames()], *keep_kafka
    )
    kafka_side = lake_done.select(
        F.col(phase),
        *[F.col(held[n]) for n in target.fieldNames()],
        *[F.col(quoted(c)).alias(c[len(kafka_prefix) :]) for c in kafka_fields],
    )
    from_lake = F.col(phase) == F.lit(lake_phase)
    return kafka_side.select(
        *[
            F.when(from_lake, F.col(held[f.name]).cast(f.dataType))
            .otherwise(F.expr(kafka[f.name]).cast(f.dataType))
            .alias(f.name)
            for f in target.fields
        ]
    )
