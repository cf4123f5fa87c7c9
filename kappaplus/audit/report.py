"""``kappa audit``: completeness per event-time bucket across the stages of a pipeline.

The audit rows of the selected jobs (:func:`kappaplus.audit.table.read_counts`) become
one *series* per ``(job, mode, stage, name, io)``; per ``(job, mode, stage, name)`` only
the most recently written query counts (a ``--fresh`` run replaces an older checkpoint's
counts instead of adding to them). The checks, per bucket:

1. ``kafka``: records read = decoded + dead-lettered (dead letters explain the rest);
2. each input: rows its source delivered (Kafka decoded, lake, bootstrap source) = rows
   the job received;
3. the archiver (``archive-<topic>``): rows received = rows written to the lake;
4. lake: rows the archiver wrote to a table = rows each backfill delivered from it.

Rows the watermark drops (``late``) are shown for each job; they sit after the job's
input and before aggregated outputs, whose rows are not comparable with input rows, so
they explain nothing in checks 1-4. A bucket where any check differs is *unexplained*;
``kappa audit`` then exits 1.
"""

from __future__ import annotations

import difflib
import html
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from kappaplus.audit.counts import BUCKET_SECONDS
from kappaplus.core.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ARCHIVE_PREFIX = "archive-"
Series = tuple[str, str, str, str, str]  # job, mode, stage, name, io


#: What a stage counts when it is not input rows: Spark's late figure counts groups.
UNITS = {"late": " (Spark: groups, not rows)"}


def series_label(key: Series) -> str:
    job, mode, stage, name, io = key
    label = f"{job}/{mode} {stage}.{io}" + ("" if name in ("", stage) else f" [{name}]")
    return label + UNITS.get(stage, "")


@dataclass(frozen=True)
class Check:
    """One failed equality in one bucket: ``expected`` (upstream) vs ``actual``."""

    bucket: datetime | None
    what: str
    expected: int
    actual: int

    @property
    def missing(self) -> int:
        return self.expected - self.actual

    def as_json(self) -> dict[str, Any]:
        return {
            "bucket": None if self.bucket is None else self.bucket.isoformat(),
            "check": self.what,
            "expected": self.expected,
            "actual": self.actual,
            "missing": self.missing,
        }


@dataclass
class AuditReport:
    """Counts per bucket per series, and the checks that failed."""

    title: str
    bucket_seconds: int
    buckets: list[datetime | None]
    series: dict[Series, dict[datetime | None, int]]
    datasets: dict[Series, str]
    failures: list[Check] = field(default_factory=list)
    inexact: int = 0

    @property
    def ok(self) -> bool:
        return not self.failures

    def flagged(self) -> list[datetime | None]:
        seen: dict[datetime | None, None] = {}
        for check in self.failures:
            seen.setdefault(check.bucket, None)
        return list(seen)

    def total(self, key: Series) -> int:
        return sum(self.series.get(key, {}).values())

    def as_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "bucket_seconds": self.bucket_seconds,
            "ok": self.ok,
            "series": [
                {
                    "label": series_label(key),
                    "job": key[0],
                    "mode": key[1],
                    "stage": key[2],
                    "name": key[3],
                    "io": key[4],
                    "dataset": self.datasets.get(key),
                    "total": self.total(key),
                    "counts": {
                        ("none" if b is None else b.isoformat()): n
                        for b, n in sorted(self.series[key].items(), key=_bucket_order)
                    },
                }
                for key in self.series
            ],
            "unexplained": [check.as_json() for check in self.failures],
            "inexact_batches": self.inexact,
        }


def _bucket_order(item: Any) -> Any:
    bucket = item[0] if isinstance(item, tuple) else item
    return (bucket is not None, bucket or datetime.min.replace(tzinfo=UTC))


def _floor(moment: datetime, seconds: int) -> datetime:
    epoch = int(moment.timestamp())
    return datetime.fromtimestamp(epoch - epoch % seconds, UTC)


def select_jobs(
    rows: Iterable[dict[str, Any]],
    job: str | None,
    topic: str | None,
    table: str | None,
) -> set[str]:
    """The jobs an audit of ``--job`` / ``--topic`` / ``--table`` covers."""
    chosen: set[str] = set()
    for row in rows:
        if job is not None and row["job"] == job:
            chosen.add(row["job"])
        if topic is not None and row["stage"] == "kafka" and row["dataset"] == topic:
            chosen.add(row["job"])
        if (
            table is not None
            and row["stage"] in ("lake", "source", "output")
            and table in str(row["dataset"]).split(",")
        ):
            chosen.add(row["job"])
    return chosen


def unknown_selection(
    rows: list[dict[str, Any]],
    job: str | None,
    topic: str | None,
    table: str | None,
    audit_table: str,
) -> ConfigError:
    """The error for an audit of a job, topic or table no run recorded counts of: a
    misspelt name must not read as "all buckets complete". Names what the audit table
    does hold, so the way out is in the message.

    >>> rows = [{"job": "rides", "stage": "kafka", "dataset": "rides"},
    ...         {"job": "rides", "stage": "lake", "dataset": "lake.rides"}]
    >>> error = unknown_selection(rows, None, None, "lake.ride", "kappa_audit.counts")
    >>> error.option, error.problem
    ('--table', 'no run recorded counts of it in kappa_audit.counts (did you mean lake.rides?)')
    >>> unknown_selection(rows, None, "other", None, "kappa_audit.counts").problem
    'no run recorded counts of it in kappa_audit.counts (topics there: rides)'
    """
    option, value, kind = next(
        (o, v, k)
        for o, v, k in (
            ("--job", job, "jobs"),
            ("--topic", topic, "topics"),
            ("--table", table, "tables"),
        )
        if v is not None
    )
    known: set[str] = set()
    for row in rows:
        if kind == "jobs":
            known.add(str(row["job"]))
        elif kind == "topics" and row["stage"] == "kafka":
            known.add(str(row["dataset"]))
        elif kind == "tables" and row["stage"] in ("lake", "source", "output"):
            known.update(name for name in str(row["dataset"]).split(",") if name)
    close = difflib.get_close_matches(str(value), sorted(known), n=3, cutoff=0.6)
    if close:
        hint = f"(did you mean {', '.join(close)}?)"
    elif known:
        hint = (
            f"({kind} there: {', '.join(sorted(known)[:12])}{', ...' if len(known) > 12 else ''})"
        )
    else:
        hint = "(no run has written counts there yet)"
    return ConfigError(option, value, f"no run recorded counts of it in {audit_table} {hint}")


def build_report(
    rows: list[dict[str, Any]],
    *,
    title: str,
    start: datetime | None = None,
    end: datetime | None = None,
    bucket_seconds: int = BUCKET_SECONDS,
) -> AuditReport:
    """The report of the (already selected, deduplicated) audit ``rows``."""
    if bucket_seconds % BUCKET_SECONDS:
        raise ConfigError(
            "--bucket",
            f"{bucket_seconds} s",
            f"must be a multiple of the recorded bucket ({BUCKET_SECONDS} s)",
        )
    # the latest query per (job, mode, stage, name)
    latest: dict[tuple[str, str, str, str], tuple[Any, str]] = {}
    for row in rows:
        key = (row["job"], row["mode"], row["stage"], row["name"])
        stamp = row["recorded_at"]
        if key not in latest or stamp > latest[key][0]:
            latest[key] = (stamp, row["query"])
    series: dict[Series, dict[datetime | None, int]] = defaultdict(lambda: defaultdict(int))
    datasets: dict[Series, str] = {}
    inexact: set[tuple[str, int]] = set()
    for row in rows:
        if latest[(row["job"], row["mode"], row["stage"], row["name"])][1] != row["query"]:
            continue
        bucket = row["bucket"]
        if bucket is not None:
            bucket = _floor(bucket.replace(tzinfo=bucket.tzinfo or UTC), bucket_seconds)
            if (start is not None and bucket < _floor(start, bucket_seconds)) or (
                end is not None and bucket >= end
            ):
                continue
        name: Series = (row["job"], row["mode"], row["stage"], row["name"], row["io"])
        series[name][bucket] += int(row["rows"])
        datasets[name] = str(row["dataset"])
        if not row["exact"]:
            inexact.add((row["query"], row["batch_id"]))
    buckets: set[datetime | None] = {b for counts in series.values() for b in counts}
    if start is not None and end is not None:
        moment = _floor(start, bucket_seconds)
        while moment < end:
            buckets.add(moment)
            moment += timedelta(seconds=bucket_seconds)
    report = AuditReport(
        title,
        bucket_seconds,
        sorted(buckets, key=_bucket_order),
        {k: dict(v) for k, v in series.items()},
        datasets,
        inexact=len(inexact),
    )
    report.failures = _checks(report)
    return report


def _checks(report: AuditReport) -> list[Check]:
    s = report.series
    pairs: list[tuple[str, list[Series], list[Series]]] = []
    inputs = {(job, mode, name) for job, mode, stage, name, _ in s if stage == "job"}
    for job, mode, name in sorted(inputs):
        read, decoded, dead = ((job, mode, "kafka", name, io) for io in ("read", "decoded", "dead"))
        if read in s:
            pairs.append(
                (f"{job}/{mode} [{name}] kafka read = decoded + dead", [read], [decoded, dead])
            )
        received = (job, mode, "job", name, "input")
        for upstream in (
            decoded,
            (job, mode, "lake", name, "delivered"),
            (job, mode, "source", name, "delivered"),
        ):
            if upstream in s:
                what = f"{job}/{mode} [{name}] {upstream[2]}.{upstream[4]} = job.input"
                pairs.append((what, [upstream], [received]))
        if job.startswith(ARCHIVE_PREFIX) and (job, mode, "output", "archive", "written") in s:
            written = (job, mode, "output", "archive", "written")
            pairs.append((f"{job} job.input = archive written", [received], [written]))
    # the lake: what archivers wrote to a table = what each backfill delivered from it
    for writer in [k for k in s if k[0].startswith(ARCHIVE_PREFIX) and k[2] == "output"]:
        table = report.datasets.get(writer)
        for reader in [k for k in s if k[2] == "lake" and report.datasets.get(k) == table]:
            pairs.append((f"lake {table}: archived = delivered to {reader[0]}", [writer], [reader]))
    failures: list[Check] = []
    for bucket in report.buckets:
        for what, left, right in pairs:
            expected = sum(s.get(k, {}).get(bucket, 0) for k in left)
            actual = sum(s.get(k, {}).get(bucket, 0) for k in right)
            if expected != actual:
                failures.append(Check(bucket, what, expected, actual))
    return failures


def load_report(
    spark: SparkSession,
    *,
    job: str | None = None,
    topic: str | None = None,
    table: str | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
    bucket_seconds: int = BUCKET_SECONDS,
    audit_table: str | None = None,
) -> AuditReport:
    """Read the audit table and build the report of ``--job/--topic/--table``."""
    from pyspark.sql import functions as F

    from kappaplus.audit.table import audit_table as default_audit_table
    from kappaplus.audit.table import read_counts

    counts = read_counts(spark, table=audit_table)
    # buckets as epoch micros: collect() would turn timestamps into local naive datetimes
    counts = counts.withColumn("bucket", F.unix_micros("bucket"))
    everything = []
    for row in counts.collect():
        values = row.asDict()
        if values["bucket"] is not None:
            values["bucket"] = datetime.fromtimestamp(values["bucket"] / 1e6, UTC)
        everything.append(values)
    jobs = select_jobs(everything, job, topic, table)
    if not jobs:
        raise unknown_selection(everything, job, topic, table, audit_table or default_audit_table())
    chosen = [row for row in everything if row["job"] in jobs]
    what = " ".join(
        f"--{k} {v}" for k, v in (("job", job), ("topic", topic), ("table", table)) if v
    )
    return build_report(
        chosen, title=f"audit {what}", start=start, end=end, bucket_seconds=bucket_seconds
    )


def _label(bucket: datetime | None) -> str:
    return "no time" if bucket is None else bucket.strftime("%Y-%m-%d %H:%M")


def add_text_row(table: Any, *cells: Any) -> None:
    """Add a row to a ``rich`` table with every ``str`` cell shown as written: ``rich``
    would read ``[rides]`` in a name as a style tag and print nothing for it. A cell that
    carries a style is a ``rich.text.Text`` and goes in as it is.

    >>> import io
    >>> from rich.console import Console
    >>> from rich.table import Table
    >>> table = Table(show_header=False)
    >>> add_text_row(table, "lake.delivered [rides]", "3")
    >>> out = Console(file=io.StringIO(), width=60)
    >>> out.print(table)
    >>> "lake.delivered [rides]" in out.file.getvalue()
    True
    """
    from rich.markup import escape

    table.add_row(*(escape(cell) if isinstance(cell, str) else cell for cell in cells))


def terminal_tables(report: AuditReport, *, show_all: bool = False) -> list[Any]:
    """``rich`` tables narrow enough for an 80-column terminal: the total of every stage
    (one row per job, mode, stage and count), then one row per unexplained bucket and
    check; with ``show_all`` every bucket's counts too (one row per bucket and stage).
    Names are shown as written (:func:`add_text_row`)."""
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    flagged = report.flagged()
    totals = Table(title=escape(report.title))
    for column, justify in (
        ("job", "left"),
        ("mode", "left"),
        ("stage", "left"),
        ("rows", "right"),
    ):
        totals.add_column(column, justify=justify)  # type: ignore[arg-type]
    for key in report.series:
        job, mode, stage, name, io = key
        what = f"{stage}.{io}" + ("" if name in ("", stage) else f" [{name}]")
        what += UNITS.get(stage, "")
        add_text_row(totals, job, mode, what, str(report.total(key)))
    totals.caption = (
        f"[red]{len(flagged)} of {len(report.buckets)} buckets unexplained[/]"
        if flagged
        else f"[green]all {len(report.buckets)} buckets complete[/]"
    )
    tables = [totals]
    if report.failures:
        checks = Table(title="unexplained buckets")
        for column, justify in (
            ("bucket (UTC)", "left"),
            ("check", "left"),
            ("expected", "right"),
            ("actual", "right"),
            ("missing", "right"),
        ):
            checks.add_column(column, justify=justify)  # type: ignore[arg-type]
        for check in report.failures:
            add_text_row(
                checks,
                _label(check.bucket),
                check.what,
                str(check.expected),
                str(check.actual),
                Text(str(check.missing), style="red"),
            )
        tables.append(checks)
    if show_all:
        every = Table(title="every bucket")
        for column, justify in (("bucket (UTC)", "left"), ("stage", "left"), ("rows", "right")):
            every.add_column(column, justify=justify)  # type: ignore[arg-type]
        for bucket in report.buckets:
            for key in report.series:
                count = report.series[key].get(bucket, 0)
                if count:
                    add_text_row(every, _label(bucket), series_label(key), str(count))
        tables.append(every)
    return tables


COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


def svg_lines(
    title: str,
    labels: list[str],
    series: list[tuple[str, list[int]]],
    flagged: set[int],
    width: int = 1100,
    height: int = 360,
) -> str:
    """A line chart as inline SVG: one line per series over ``labels``; flagged x red."""
    left, right, top, bottom = 60, 20, 30, 60
    count = max(1, len(labels))
    peak = max([1] + [v for _, values in series for v in values])
    step = (width - left - right) / max(1, count - 1)

    def x(i: int) -> float:
        return left + i * step

    def y(v: float) -> float:
        return top + (height - top - bottom) * (1 - v / peak)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height + 22 * len(series)}">',
        f'<text x="{left}" y="18" font-size="14" font-weight="bold">{html.escape(title)}</text>',
    ]
    for i in sorted(flagged):
        parts.append(
            f'<rect x="{x(i) - step / 2:.1f}" y="{top}" width="{max(step, 2):.1f}" '
            f'height="{height - top - bottom}" fill="#ffcccc"/>'
        )
    parts.append(
        f'<line x1="{left}" y1="{y(0)}" x2="{width - right}" y2="{y(0)}" stroke="#333"/>'
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{y(0)}" stroke="#333"/>'
        f'<text x="{left - 6}" y="{top + 4}" font-size="11" text-anchor="end">{peak}</text>'
        f'<text x="{left - 6}" y="{y(0)}" font-size="11" text-anchor="end">0</text>'
    )
    every = max(1, count // 12)
    for i, label in enumerate(labels):
        if i % every == 0:
            parts.append(
                f'<text x="{x(i):.1f}" y="{height - bottom + 16}" font-size="10" '
                f'text-anchor="middle">{html.escape(label)}</text>'
            )
    for n, (name, values) in enumerate(series):
        color = COLORS[n % len(COLORS)]
        dash = ' stroke-dasharray="6 3"' if n % 2 else ""
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
        parts.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="1.5"{dash} points="{points}"/>'
        )
        parts.append(
            f'<text x="{left}" y="{height + 22 * n}" font-size="12" fill="{color}">'
            f"&#9644; {html.escape(name)}</text>"
        )
    parts.append("</svg>")
    return "\n".join(parts)


def html_page(title: str, body: str) -> str:
    """A self-contained HTML page (no scripts, no external resources)."""
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;margin:20px} td,th{padding:2px 8px;"
        "text-align:right;border-bottom:1px solid #ddd} .bad{color:#c00}</style></head>"
        f"<body>{body}</body></html>"
    )


def chart_html(report: AuditReport) -> str:
    """The report as a self-contained HTML page: counts per bucket per stage, flagged
    buckets shaded, and the unexplained differences listed."""
    timed = [b for b in report.buckets if b is not None]
    labels = [_label(b) for b in timed]
    flagged = {i for i, b in enumerate(timed) if b in set(report.flagged())}
    series = [(series_label(k), [report.series[k].get(b, 0) for b in timed]) for k in report.series]
    rows = "".join(
        f"<tr class='bad'><td>{_label(c.bucket)}</td><td>{html.escape(c.what)}</td>"
        f"<td>{c.expected}</td><td>{c.actual}</td><td>{c.missing}</td></tr>"
        for c in report.failures
    )
    verdict = (
        "<p>every bucket complete</p>"
        if report.ok
        else f"<p class='bad'>{len(report.flagged())} bucket(s) unexplained</p>"
        "<table><tr><th>bucket</th><th>check</th><th>expected</th><th>actual</th>"
        f"<th>missing</th></tr>{rows}</table>"
    )
    body = (
        f"<h2>{html.escape(report.title)}</h2>"
        + svg_lines(
            f"rows per {report.bucket_seconds // 60}-minute bucket", labels, series, flagged
        )
        + verdict
        + f"<pre>{html.escape(json.dumps(report.as_json()['unexplained'][:200], indent=1))}</pre>"
    )
    return html_page(report.title, body)
