"""``kappa reconcile``: a job's production output against its backfill output.

For one output of a job (``[outputs.<name>.reconcile]`` in the job config declares the
``key`` columns, the ``window_end`` column and an optional ``measure``), rows of the
production table and the backfill table within ``[start, end)`` (of the output's
event-time column) are matched by key:

- **still open in production**: backfill rows whose ``window_end`` is after the
  production run's watermark (from its checkpoint): production has not emitted them yet;
- **identical** / **different**: closed windows present in both, equal or not (every
  column but the sink's partition columns);
- **only in the backfill** / **only in production**.

The late rows explain the differences: the backfill reads the lake in event-time order
and drops nothing, so ``sum(measure)`` over the closed backfill windows minus over the
production windows (the rows the backfill *recovered*) must equal the input rows the
production stream dropped as late. Rows are compared with rows only:

- when the stream keeps its late rows (``[outputs.<name>.late]``), the rows kept in the
  range (by the input's event time) are counted where they were kept -- in the Hive table,
  or read back from the Kafka topic (everything from its earliest offset, one per record
  key, so a replayed batch's second copy is not counted twice; records the topic's
  retention already deleted are not counted) -- and the recovered rows must equal them;
  the audit's ``late_kept`` rows (per 10-minute bucket, in the range) are shown beside;
- Spark's own figure (``numRowsDroppedByWatermark``, the audit's ``late`` stage) counts
  groups after partial aggregation, not rows (several late rows of one key and window in
  one micro-batch count once): it is shown, labelled so, and never explains a difference.
  A stream that does not keep its late rows can only be reconciled when nothing differs.

Each differing key is listed with its measure in both outputs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kappaplus.core.errors import ConfigError, TableNotFound

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


#: Columns a Hive sink adds; never part of a comparison.
SINK_COLUMNS = ("dt", "hr", "kappa_batch")


@dataclass(frozen=True)
class ReconcileTarget:
    """What to compare: the tables, the declared keys and the production watermark."""

    job: str
    output: str
    production: str
    backfill: str
    key: tuple[str, ...]
    window_end: str | None
    measure: str | None
    event_time_column: str | None
    watermark_micros: int | None
    start: datetime | None = None
    end: datetime | None = None
    late_table: str | None = None
    """Where production kept the rows its watermark dropped (``[outputs.<o>.late]``)."""
    late_event_time_column: str | None = None
    """The event-time column of those rows (the job's input's)."""
    late_topic: str | None = None
    """... or the Kafka topic it kept them in, with its brokers and client options."""
    late_bootstrap: str | None = None
    late_options: dict[str, str] = field(default_factory=dict, repr=False)


@dataclass
class Reconciliation:
    """The comparison's figures, the differing keys and whether late rows explain them."""

    target: ReconcileTarget
    production_rows: int = 0
    backfill_rows: int = 0
    identical: int = 0
    different: int = 0
    only_backfill: int = 0
    only_production: int = 0
    open_in_production: int = 0
    production_measure: int = 0
    backfill_measure: int = 0
    recovered: int = 0
    late_rows: int | None = None
    """Late input rows production reported keeping, by its audit (``late_kept``, in the
    range); None when it kept none (no ``[outputs.<o>.late]``)."""
    late_groups: int | None = None
    """Spark's count of dropped *groups* (the audit's ``late`` stage): never rows."""
    late_rows_kept: int | None = None
    """Rows in the late-rows table or topic (in the range, when one is given)."""
    differences: list[dict[str, Any]] = field(default_factory=list)
    per_hour: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def late_rows_known(self) -> int | None:
        """The late rows production kept, in rows: counted where they were kept, else as
        its audit recorded them; None when it kept none."""
        return self.late_rows_kept if self.late_rows_kept is not None else self.late_rows

    @property
    def explained(self) -> bool:
        """Every difference accounted for by the late rows production kept, rows against
        rows (needs a measure); nothing differs when they were not kept."""
        if self.only_production:
            return False
        if self.different == 0 and self.only_backfill == 0:
            return True
        if self.target.measure is None or self.late_rows_known is None:
            return False
        return self.recovered == self.late_rows_known

    @property
    def verdict(self) -> str:
        """One line: why the differences are (or are not) explained, and the way out."""
        t = self.target
        if self.only_production:
            return (
                f"{self.only_production} windows are in {t.production} only: a backfill drops "
                f"nothing, so these are not late rows (check the range and {t.backfill})"
            )
        if self.different == 0 and self.only_backfill == 0:
            return "nothing differs"
        if t.measure is None:
            return (
                f"declare outputs.{t.output}.reconcile.measure (a count column) so the "
                "differences can be compared with the late rows"
            )
        kept = self.late_rows_known
        if kept is None:
            groups = "" if self.late_groups is None else f" (Spark dropped {self.late_groups} "
            groups += "" if self.late_groups is None else "groups, a count of groups, not rows)"
            return (
                f"production kept no late rows{groups}: keep them ([outputs.{t.output}.late]) "
                "to explain differences row for row"
            )
        where = t.late_table or t.late_topic or "its audit"
        if self.recovered == kept:
            return f"the backfill recovered {self.recovered} rows: the late rows kept in {where}"
        return (
            f"the backfill recovered {self.recovered} rows but production kept {kept} late rows "
            f"in {where}: {abs(self.recovered - kept)} rows are not late rows"
        )

    def as_json(self) -> dict[str, Any]:
        t = self.target
        return {
            "job": t.job,
            "output": t.output,
            "production_table": t.production,
            "backfill_table": t.backfill,
            "key": list(t.key),
            "range": [
                None if t.start is None else t.start.isoformat(),
                None if t.end is None else t.end.isoformat(),
            ],
            "production_watermark": _iso(t.watermark_micros),
            "production_rows": self.production_rows,
            "backfill_rows": self.backfill_rows,
            "identical": self.identical,
            "different": self.different,
            "only_backfill": self.only_backfill,
            "only_production": self.only_production,
            "open_in_production": self.open_in_production,
            "measure": t.measure,
            "production_measure": self.production_measure,
            "backfill_measure": self.backfill_measure,
            "recovered": self.recovered,
            "late_rows_reported": self.late_rows,
            "late_groups_dropped_spark": self.late_groups,
            "late_table": t.late_table,
            "late_topic": t.late_topic,
            "late_rows_kept": self.late_rows_kept,
            "explained": self.explained,
            "verdict": self.verdict,
            "differences": self.differences,
            "per_hour": self.per_hour,
        }


def _iso(micros: int | None) -> str | None:
    if micros is None:
        return None
    return datetime.fromtimestamp(micros / 1e6, UTC).isoformat()


def checkpoint_watermark(checkpoint: Path) -> int | None:
    """The watermark (epoch micros) of the latest batch planned in a query checkpoint."""
    offsets = checkpoint / "offsets"
    if not offsets.is_dir():
        return None
    batches = sorted((p for p in offsets.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    if not batches:
        return None
    for line in batches[-1].read_text().splitlines()[1:2]:
        meta = json.loads(line)
        if "batchWatermarkMs" in meta:
            return int(meta["batchWatermarkMs"]) * 1000
    return None


def _rows(
    spark: SparkSession, table: str, target: ReconcileTarget, role: str
) -> dict[tuple[Any, ...], dict[str, Any]]:
    from pyspark.sql import functions as F

    if not spark.catalog.tableExists(table):
        modes = "--mode backfill" if role == "backfill" else "--mode stream or bootstrap"
        raise TableNotFound(
            f"table {table!r} ({role} output {target.output!r}) not found in the catalog: "
            f"run the job with {modes} first, or pass the config that names the tables it "
            "wrote (--config)"
        )
    spark.catalog.refreshTable(table)
    df = spark.table(table)
    missing = [
        c for c in (*target.key, target.window_end, target.measure) if c and c not in df.columns
    ]
    if missing:
        raise ConfigError(
            f"outputs.{target.output}.reconcile", missing, f"columns not in table {table}"
        )
    column = target.event_time_column
    if column is not None and target.start is not None:
        df = df.where(F.col(column) >= F.lit(target.start))
    if column is not None and target.end is not None:
        df = df.where(F.col(column) < F.lit(target.end))
    columns = [c for c in df.columns if c not in SINK_COLUMNS]
    selected = [
        F.unix_micros(F.col(c)).alias(c)
        if df.schema[c].dataType.simpleString() == "timestamp"
        else F.col(c)
        for c in columns
    ]
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in df.select(*selected).collect():
        values = {k: (tuple(v) if isinstance(v, list) else v) for k, v in row.asDict().items()}
        out[tuple(values[k] for k in target.key)] = values
    return out


@dataclass(frozen=True)
class LateFigures:
    """What production's audit says it dropped as late in one output's query."""

    kept_rows: int | None
    """Input rows kept (stage ``late_kept``, buckets in the range); None: none kept."""
    spark_groups: int | None
    """Spark's ``numRowsDroppedByWatermark`` (stage ``late``): groups, not rows."""


def late_rows_reported(
    spark: SparkSession,
    job: str,
    output: str,
    start: datetime | None = None,
    end: datetime | None = None,
) -> LateFigures:
    """The late figures of the production stream of ``job`` in ``output``'s query, from the
    audit table (its latest query). The kept rows are counted per 10-minute bucket of the
    input's event time, buckets starting in ``[start, end)``; Spark's count has no bucket
    (its whole query)."""
    from pyspark.sql import functions as F

    from kappaplus.audit.table import read_counts

    in_range = F.lit(True)
    if start is not None:
        in_range = in_range & (F.col("bucket") >= F.lit(start))
    if end is not None:
        in_range = in_range & (F.col("bucket") < F.lit(end))
    rows = (
        read_counts(spark, jobs=[job])
        .where(
            (F.col("mode") == "stream")
            & (F.col("name") == output)
            & F.col("stage").isin("late", "late_kept", "output")
        )
        .select("query", "stage", "rows", "recorded_at", F.coalesce(in_range, F.lit(False)))
        .toDF("query", "stage", "rows", "recorded_at", "in_range")
        .collect()
    )
    if not rows:
        return LateFigures(None, None)
    latest = max(rows, key=lambda r: r.recorded_at).query.removesuffix("-late")
    groups = [int(r.rows) for r in rows if r.query == latest and r.stage == "late"]
    kept = [r for r in rows if r.query == f"{latest}-late" and r.stage == "late_kept"]
    return LateFigures(
        kept_rows=sum(int(r.rows) for r in kept if r.in_range) if kept else None,
        spark_groups=sum(groups) if groups else None,
    )


def reconcile(
    spark: SparkSession, target: ReconcileTarget, *, late_rows: int | None = None
) -> Reconciliation:
    """Compare the production and backfill outputs of ``target`` (module docstring)."""
    ours = _rows(spark, target.production, target, "production")
    theirs = _rows(spark, target.backfill, target, "backfill")
    result = Reconciliation(target, production_rows=len(ours), backfill_rows=len(theirs))
    watermark = target.watermark_micros
    end_col = target.window_end

    def closed(row: dict[str, Any]) -> bool:
        if end_col is None or watermark is None:
            return True
        return row[end_col] is not None and row[end_col] <= watermark

    measure = target.measure
    done = {k: r for k, r in theirs.items() if closed(r)}
    result.open_in_production = len(theirs) - len(done)
    result.only_production = sum(1 for k in ours if k not in theirs)

    def hour(key: tuple[Any, ...], row: dict[str, Any]) -> str:
        moment = row.get(target.event_time_column or "")
        if not isinstance(moment, int):
            return "-"
        return datetime.fromtimestamp(moment / 1e6, UTC).strftime("%Y-%m-%dT%H:00")

    for key, row in theirs.items():
        if key not in done:
            kind = "open"
        elif key not in ours:
            kind = "only_backfill"
        elif ours[key] == row:
            kind = "identical"
        else:
            kind = "different"
        counts = result.per_hour.setdefault(hour(key, row), {})
        counts[kind] = counts.get(kind, 0) + 1
        if kind == "identical":
            result.identical += 1
        elif kind in ("different", "only_backfill"):
            if kind == "different":
                result.different += 1
            else:
                result.only_backfill += 1
            mine = ours.get(key)
            result.differences.append(
                {
                    "key": [_plain(v) for v in key],
                    "kind": kind,
                    "production": None if mine is None or measure is None else mine[measure],
                    "backfill": None if measure is None else row[measure],
                    "columns": sorted(c for c in row if mine is not None and mine.get(c) != row[c]),
                }
            )
    for key, row in ours.items():
        if key not in theirs:
            counts = result.per_hour.setdefault(hour(key, row), {})
            counts["only_production"] = counts.get("only_production", 0) + 1
    if measure is not None:
        result.production_measure = sum(int(r[measure] or 0) for r in ours.values())
        result.backfill_measure = sum(int(r[measure] or 0) for r in theirs.values())
        result.recovered = (
            sum(int(r[measure] or 0) for r in done.values()) - result.production_measure
        )
    figures = late_rows_reported(spark, target.job, target.output, target.start, target.end)
    result.late_rows = late_rows if late_rows is not None else figures.kept_rows
    result.late_groups = figures.spark_groups
    result.late_rows_kept = late_rows_kept_in(spark, target)
    if result.late_rows_kept is not None:
        for at, n in late_rows_kept_per_hour(spark, target).items():
            counts = result.per_hour.setdefault(at, {})
            counts["late_kept"] = counts.get("late_kept", 0) + n
    result.differences.sort(key=lambda d: [str(v) for v in d["key"]])
    return result


def _late_rows_frame(spark: SparkSession, target: ReconcileTarget) -> tuple[Any, str | None]:
    """The late rows production kept, in the range: ``(frame, event-time column)``, or
    ``(None, None)`` when it kept none."""
    from pyspark.sql import functions as F

    column = target.late_event_time_column
    if target.late_topic is not None:
        from kappaplus.connectors.kafka import read_kafka

        options = {"subscribe": target.late_topic, "startingOffsets": "earliest"}
        options.update(target.late_options)
        records = read_kafka(spark, bootstrap=target.late_bootstrap, **options)
        late = records.dropDuplicates(["key"])
        if column is None:
            return late, None
        json_value = F.col("value").cast("string")
        late = late.select(F.get_json_object(json_value, f"$.{column}").cast("timestamp"))
        late, column = late.toDF("at"), "at"
    elif target.late_table is None or not spark.catalog.tableExists(target.late_table):
        return None, None
    else:
        spark.catalog.refreshTable(target.late_table)
        late = spark.table(target.late_table)
    if column is None or column not in late.columns:
        return late, None
    if target.start is not None:
        late = late.where(F.col(column) >= F.lit(target.start))
    if target.end is not None:
        late = late.where(F.col(column) < F.lit(target.end))
    return late, column


def late_rows_kept_in(spark: SparkSession, target: ReconcileTarget) -> int | None:
    """Rows of the late-rows table or topic whose event time is in the range (None: none)."""
    late, _ = _late_rows_frame(spark, target)
    return None if late is None else int(late.count())


def late_rows_kept_per_hour(spark: SparkSession, target: ReconcileTarget) -> dict[str, int]:
    """The late rows kept in the range per hour of their event time (``YYYY-MM-DDTHH:00``,
    UTC), as the reconciliation's chart shows them beside the windows."""
    from pyspark.sql import functions as F

    late, column = _late_rows_frame(spark, target)
    if late is None or column is None:
        return {}
    hours = late.groupBy(F.date_format(F.col(column), "yyyy-MM-dd'T'HH:00").alias("h")).count()
    return {str(r.h): int(r["count"]) for r in hours.collect() if r.h is not None}


def _plain(value: Any) -> Any:
    return value if isinstance(value, (int, float, str, bool)) or value is None else str(value)


def terminal_tables(result: Reconciliation, examples: int = 8) -> list[Any]:
    """``rich`` tables: the first differing keys, the two outputs side by side, the recap.
    Values and names are shown as written (:func:`~kappaplus.audit.report.add_text_row`)."""
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    from kappaplus.audit.report import add_text_row

    t = result.target
    diff = Table(title=f"windows that differ (first {examples})")
    for column in (
        "key",
        "kind",
        f"{t.measure or '-'} production",
        f"{t.measure or '-'} backfill",
        "columns",
    ):
        diff.add_column(escape(column))
    for item in result.differences[:examples]:
        add_text_row(
            diff,
            ", ".join(_show(v) for v in item["key"]),
            item["kind"],
            "-" if item["production"] is None else str(item["production"]),
            "-" if item["backfill"] is None else str(item["backfill"]),
            ", ".join(item["columns"]),
        )
    side = Table(title=escape(f"{t.job}: production vs backfill ({t.output})"))
    side.add_column("")
    side.add_column("production (stream)", justify="right")
    side.add_column("backfill", justify="right")
    add_text_row(side, "table", t.production, t.backfill)
    add_text_row(side, "rows", str(result.production_rows), str(result.backfill_rows))
    if t.measure:
        add_text_row(
            side,
            f"sum of {t.measure}",
            str(result.production_measure),
            str(result.backfill_measure),
        )
    add_text_row(side, "production watermark", _iso(t.watermark_micros) or "-", "")
    recap = Table(title="reconciliation", show_header=False)
    add_text_row(recap, "windows identical in both", str(result.identical))
    add_text_row(recap, "windows that differ (same key)", str(result.different))
    add_text_row(recap, "windows only in the backfill", str(result.only_backfill))
    add_text_row(recap, "windows only in production", str(result.only_production))
    add_text_row(
        recap,
        "windows still open in production (end after its watermark)",
        str(result.open_in_production),
    )
    if t.measure:
        recovered = f"late rows the backfill recovered ({t.measure})"
        add_text_row(recap, recovered, str(result.recovered))
    if result.late_rows_kept is not None:
        where = t.late_table or f"topic {t.late_topic}, one per key"
        add_text_row(recap, f"late rows kept ({where})", str(result.late_rows_kept))
    add_text_row(
        recap,
        "late rows production reported keeping (audit, rows)",
        "-" if result.late_rows is None else str(result.late_rows),
    )
    add_text_row(
        recap,
        "late groups Spark reported dropping (groups, not rows)",
        "-" if result.late_groups is None else str(result.late_groups),
    )
    explained = Text("yes", style="green") if result.explained else Text("NO", style="red")
    add_text_row(recap, "explained", explained)
    add_text_row(recap, "why", result.verdict)
    return [diff, side, recap]


def _show(value: Any) -> str:
    if isinstance(value, int) and value > 10**14:
        return datetime.fromtimestamp(value / 1e6, UTC).strftime("%Y-%m-%d %H:%M:%S")
    return str(value)


def chart_html(result: Reconciliation) -> str:
    """A self-contained HTML page: windows per hour by outcome, and the figures."""
    import html as html_lib

    from kappaplus.audit.report import html_page, svg_lines

    hours = sorted(h for h in result.per_hour if h != "-")
    kinds = ["identical", "different", "only_backfill", "only_production", "open", "late_kept"]
    series = [(k, [result.per_hour[h].get(k, 0) for h in hours]) for k in kinds]
    flagged = {
        i
        for i, h in enumerate(hours)
        if result.per_hour[h].get("different") or result.per_hour[h].get("only_backfill")
    }
    figures = "".join(
        f"<tr><td style='text-align:left'>{html_lib.escape(k)}</td>"
        f"<td>{html_lib.escape(str(v))}</td></tr>"
        for k, v in result.as_json().items()
        if k not in ("differences", "per_hour")
    )
    body = (
        f"<h2>reconcile {html_lib.escape(result.target.job)} / "
        f"{html_lib.escape(result.target.output)}</h2>"
        + svg_lines(
            "windows per hour of event time, by outcome", [h[5:] for h in hours], series, flagged
        )
        + f"<table>{figures}</table>"
    )
    return html_page(f"reconcile {result.target.job}", body)
