"""Pure logic of the audit: histogram folding and the per-bucket checks."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from typing import Any

from rich.console import Console

from kappaplus.audit.counts import BINS, fold_histogram, metric_name, stage_counts
from kappaplus.audit.report import build_report, chart_html, terminal_tables

T0 = datetime(2024, 3, 1, tzinfo=UTC)


def _row(job: str, mode: str, stage: str, name: str, io: str, bucket: Any, rows: int, **kw: Any):
    base = {
        "job": job,
        "mode": mode,
        "query": kw.get("query", f"{job}-{mode}-q"),
        "batch_id": kw.get("batch_id", 0),
        "stage": stage,
        "name": name,
        "io": io,
        "dataset": kw.get("dataset", name),
        "bucket": bucket,
        "rows": rows,
        "exact": True,
        "recorded_at": kw.get("recorded_at", T0),
    }
    return base


def test_fold_sums_partial_bins_and_knows_when_full() -> None:
    counts, exact = fold_histogram([{"x": 3, "y": 5.0}, {"x": 3, "y": 2.0}, {"x": 4, "y": 1.0}])
    assert counts == {3: 7, 4: 1} and exact
    _, full = fold_histogram([{"x": i, "y": 1.0} for i in range(BINS)])
    assert not full
    (only,) = stage_counts({metric_name("job", "rides"): {"input": [{"x": 1, "y": 2.0}]}})
    assert (only.stage, only.name, only.io, only.rows) == ("job", "rides", "input", {1: 2})
    assert stage_counts({"kappa_decode_rides": {"records": 3}}) == []


def test_lake_loss_is_flagged_per_bucket_with_the_missing_count() -> None:
    b0, b1, b2 = (T0 + timedelta(minutes=10 * i) for i in range(3))
    arch = "archive-rides"
    rows = [
        _row(arch, "stream", "kafka", "records", "read", b0, 10),
        _row(arch, "stream", "kafka", "records", "decoded", b0, 10),
        _row(arch, "stream", "kafka", "records", "read", None, 2),
        _row(arch, "stream", "kafka", "records", "dead", None, 2),
    ]
    for b, n in ((b0, 10), (b1, 7), (b2, 5)):
        if b != b0:
            rows.append(_row(arch, "stream", "kafka", "records", "read", b, n))
            rows.append(_row(arch, "stream", "kafka", "records", "decoded", b, n))
        rows.append(_row(arch, "stream", "job", "records", "input", b, n))
        rows.append(_row(arch, "stream", "output", "archive", "written", b, n, dataset="lake.r"))
    # the backfill read the lake after bucket b1 lost 3 rows
    for b, n in ((b0, 10), (b1, 4), (b2, 5)):
        rows.append(_row("sess", "backfill", "lake", "rides", "delivered", b, n, dataset="lake.r"))
        rows.append(_row("sess", "backfill", "job", "rides", "input", b, n))
    # an older query of the same backfill (before --fresh) must not count
    rows.append(
        _row(
            "sess",
            "backfill",
            "lake",
            "rides",
            "delivered",
            b1,
            3,
            query="old",
            recorded_at=T0 - timedelta(days=1),
            dataset="lake.r",
        )
    )
    report = build_report(rows, title="t", start=T0, end=T0 + timedelta(minutes=30))
    assert [(c.bucket, c.missing) for c in report.failures] == [(b1, 3)]
    assert report.flagged() == [b1]
    assert report.total(("sess", "backfill", "lake", "rides", "delivered")) == 19
    assert "1 bucket(s) unexplained" in chart_html(report)
    # the terminal view fits 80 columns and names the bucket, the check and the missing rows
    console = Console(width=80, record=True, file=io.StringIO())
    for table in terminal_tables(report, show_all=True):
        console.print(table)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "1 of 4 buckets unexplained" in text  # 3 buckets and the records without a time
    # each count names its input or output as written (rich took "[rides]" for a style tag)
    assert "lake.delivered [rides]" in text and "[archive]" in text
    assert any(
        b1.strftime("%Y-%m-%d %H:%M") in line and line.rstrip(" │").endswith("3")
        for line in text.splitlines()
    )
    # dead letters explain read - decoded; a lost dead letter does not
    rows.append(_row(arch, "stream", "kafka", "records", "read", None, 1, batch_id=1))
    assert [c.bucket for c in build_report(rows, title="t").failures] == [None, b1]
