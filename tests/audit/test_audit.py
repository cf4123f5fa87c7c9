"""The completeness audit end to end: archive a topic, lose a lake partition, backfill,
and the audit flags exactly the buckets of that partition with exactly the rows lost; a
replayed micro-batch leaves the audit's counts unchanged."""

from __future__ import annotations

import json
import shutil
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from kappaplus.archive import ArchiveOptions, archive_job
from kappaplus.audit.report import load_report
from kappaplus.audit.table import read_counts
from kappaplus.config import config_from_dict
from kappaplus.core.errors import ConfigError
from kappaplus.examples import sessionization
from kappaplus.examples.generate import RIDER_EVENT_DDL, arrival_order, produce, rider_events
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job

START = datetime(2024, 3, 1, tzinfo=UTC)
HOURS = 4
GARBAGE = [b"{broken", b'{"event_id": "g", "rider_id": "r", "event_time": "yesterday"}']


def _bucket(moment: datetime) -> datetime:
    epoch = int(moment.timestamp())
    return datetime.fromtimestamp(epoch - epoch % 600, UTC)


def _archive(spark: Any, topic: str, bootstrap: str, table: str, scratch: Path) -> Any:
    job, config = archive_job(
        ArchiveOptions(
            topic=topic,
            bootstrap_servers=bootstrap,
            table=table,
            event_time_column="event_time",
            schema=RIDER_EVENT_DDL,
            max_offsets_per_trigger=150,
            checkpoint_dir=scratch / "checkpoints",
        )
    )
    result = run_job(spark, job, config, RunOptions("stream", trigger="available-now"))
    assert result.status == "finished"
    return result


def _location(spark: Any, table: str) -> Path:
    rows = spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect()
    (location,) = [r.data_type for r in rows if r.col_name == "Location"]
    return Path(location.removeprefix("file:"))


def _backfill(spark: Any, table: str, scratch: Path) -> Any:
    config = config_from_dict(
        {
            "job": "kappaplus.examples.sessionization:JOB",
            "watermark_delay": "2 hours",
            "checkpoint_dir": str(scratch / "checkpoints"),
            "params": {"session_gap": "30 minutes"},
            "inputs": {
                "rider_events": {
                    "hive": {
                        "table": table,
                        "event_time_column": "event_time",
                        "partition_format": "dt=%Y-%m-%d/hr=%H",
                        "maxEventTimePerTrigger": "1 hour",
                    }
                }
            },
            "outputs": {"sessions": {"hive": {"table": f"{table}_sessions"}}},
        }
    )
    end = START + timedelta(hours=HOURS)
    result = run_job(
        spark,
        sessionization.JOB,
        config,
        RunOptions("backfill", start=START.isoformat(), end=end.isoformat()),
    )
    assert result.status == "finished"
    return result


def test_deleted_lake_partition_is_flagged_with_the_exact_missing_rows(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    events = rider_events(riders=10, start=START, hours=HOURS, seed=5, late_fraction=0.2)
    events = [e for e in events if START <= e["event_time"] < START + timedelta(hours=HOURS)]
    topic = new_topic(prefix="audit")
    table = f"lake_{uuid.uuid4().hex[:8]}"
    produce(kafka_bootstrap, topic, arrival_order(events), extra=GARBAGE)
    archived = _archive(spark, topic, kafka_bootstrap, table, scratch)

    # Kafka -> lake is complete: the audit of the topic flags nothing
    end = START + timedelta(hours=HOURS)
    clean = load_report(spark, topic=topic, start=START, end=end)
    assert clean.ok, clean.failures
    job = archived.job.name
    assert clean.total((job, "stream", "kafka", "records", "read")) == len(events) + 2
    assert clean.total((job, "stream", "kafka", "records", "dead")) == 2
    assert clean.total((job, "stream", "output", "archive", "written")) == len(events)
    per_bucket = Counter(_bucket(e["event_time"]) for e in events)
    written = clean.series[(job, "stream", "output", "archive", "written")]
    assert {b: n for b, n in written.items() if b is not None} == dict(per_bucket)

    # lose one hour of the lake after archiving
    lost_hour = START + timedelta(hours=2)
    partition = _location(spark, table) / f"dt={lost_hour:%Y-%m-%d}" / f"hr={lost_hour.hour}"
    if not partition.is_dir():
        partition = partition.with_name(f"hr={lost_hour:%H}")
    assert partition.is_dir(), sorted(p.name for p in partition.parent.iterdir())
    shutil.rmtree(partition)
    lost = Counter(
        _bucket(e["event_time"])
        for e in events
        if lost_hour <= e["event_time"] < lost_hour + timedelta(hours=1)
    )
    assert sum(lost.values()) > 0

    backfilled = _backfill(spark, table, scratch)
    progress = [json.loads(p.json) for q in backfilled.queries.values() for p in q.recentProgress]
    report = load_report(spark, table=table, start=START, end=end)
    assert not report.ok
    # the JVM reader counted the lake stage's rows as it delivered them (its source
    # metrics), and nothing observed a histogram over every row for that stage
    read = [p for p in progress if p["numInputRows"] > 0]
    assert read and all(
        "kappa_audit.lake.rider_events" in p["sources"][0].get("metrics", {}) for p in read
    ), [p["sources"][0].get("metrics") for p in read]
    assert not any("kappa_audit.lake.rider_events" in p["observedMetrics"] for p in progress)
    # [START, end) lies within the input's bounds: the job's input is counted once, as the
    # lake's delivered rows (one histogram per row), and equals the events left in the lake
    bf = backfilled.job.name
    delivered = report.series[(bf, "backfill", "lake", "rider_events", "delivered")]
    received = report.series[(bf, "backfill", "job", "rider_events", "input")]
    assert received == delivered
    assert sum(received.values()) == len(events) - sum(lost.values())
    missing = {c.bucket: c.missing for c in report.failures if c.what.startswith("lake ")}
    assert missing == dict(lost), "exactly the lost hour's buckets, by exactly the rows lost"
    assert set(report.flagged()) == set(lost)

    # a misspelt name is refused, naming what the audit table holds: never "all complete"
    with pytest.raises(ConfigError) as misspelt:
        load_report(spark, table=table[:-1], start=START, end=end)
    assert misspelt.value.option == "--table" and table in misspelt.value.problem
    with pytest.raises(ConfigError) as no_topic:
        load_report(spark, topic=topic + "x")
    assert no_topic.value.option == "--topic" and topic in no_topic.value.problem


def test_replayed_micro_batch_leaves_audit_counts_unchanged(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    events = rider_events(riders=6, start=START, hours=2, seed=9, late_fraction=0.0)
    topic = new_topic(prefix="replay")
    table = f"lake_{uuid.uuid4().hex[:8]}"
    produce(kafka_bootstrap, topic, arrival_order(events))
    first = _archive(spark, topic, kafka_bootstrap, table, scratch)
    key = (first.job.name, "stream", "output", "archive", "written")
    before = load_report(spark, topic=topic).total(key)
    assert before == len(events)

    # crash after the batch ran, before Spark committed it: the last commit is lost
    checkpoint = Path(first.plans["archive"].checkpoint)
    commits = sorted(
        (p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()),
        key=lambda p: int(p.name),
    )
    last = int(commits[-1].name)
    commits[-1].unlink()
    (commits[-1].parent / f".{last}.crc").unlink(missing_ok=True)
    second = _archive(spark, topic, kafka_bootstrap, table, scratch)
    rerun = [(b.batch_id, b.input_rows) for b in second.tracker.stats["archive"].history]
    assert rerun and rerun[0][0] == last and rerun[0][1] > 0, rerun

    query = first.plans["archive"].query_name
    spark.catalog.refreshTable("kappa_audit.counts")
    raw = spark.table("kappa_audit.counts").where(f"query = '{query}' AND batch_id = {last}")
    assert raw.select("recorded_at").distinct().count() == 2, "the batch was replayed"
    after = load_report(spark, topic=topic)
    assert after.total(key) == before == len(events)
    assert after.ok
    latest = read_counts(spark, jobs=[first.job.name]).where(f"batch_id = {last}")
    assert latest.select("recorded_at").distinct().count() == 1
