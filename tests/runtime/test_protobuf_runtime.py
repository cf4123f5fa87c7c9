"""The sessionization job over Protobuf rider events (``kappaplus/examples/rides.proto``):
a stream run equals the hand-made sessions window by window, its output also written to a
Protobuf topic; and a bootstrap from a lake archived from the Protobuf topic, then the
topic, equals them too."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from runtime_helpers import (
    FLUSH_RIDER,
    SESSION_COLUMNS,
    consume_topic,
    example_config,
    flush_events,
    micros,
    sessions_by_hand,
    table_rows,
    uid,
)

from kappaplus.archive import ArchiveOptions, archive_job
from kappaplus.codecs import DecoderSpec, decode_values
from kappaplus.core.errors import KappaError
from kappaplus.examples import sessionization
from kappaplus.examples.generate import arrival_order, produce, rider_events
from kappaplus.examples.rides_protobuf import MESSAGE, RIDES_PROTO, kafka_keys, to_protobuf
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job

START = "2024-03-01T00:00:00"
T0 = datetime.fromisoformat(START + "+00:00")
CUTOFF = T0 + timedelta(hours=4)
COLUMNS = SESSION_COLUMNS
GAP = 30 * 60
SESSIONS_PROTO = Path(__file__).parents[1] / "protobuf" / "sessions.proto"
GARBAGE = [b"\xff\xff\xff\xff", b"\x0a\x10truncated"]


def events_and_flush() -> tuple[list, list]:
    # jitter but no event later than the watermark: every event counts in every mode
    events = rider_events(riders=25, start=START, hours=8, seed=21, late_fraction=0.0)
    return events, flush_events(events[-1]["event_time"] + timedelta(days=1), 3)


def run_resuming(spark, config, options: RunOptions):  # type: ignore[no-untyped-def]
    """Run the job; when a Python worker missed its connect-back (a loaded machine), run it
    again as the error advises: it resumes from its checkpoint, exactly once."""
    for attempt in range(3):
        try:
            return run_job(spark, sessionization.JOB, config, options)
        except KappaError as exc:
            if "failed to connect back" not in str(exc) or attempt == 2:
                raise
    raise AssertionError("unreachable")


@pytest.mark.slow
def test_stream_of_protobuf_rides_equals_the_truth_per_window(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    events, flush = events_and_flush()
    topic, dlq, out_topic = new_topic(prefix="pb-rides"), new_topic(prefix="pb-dlq"), new_topic()
    produce(kafka_bootstrap, topic, [], extra=GARBAGE)
    produce(kafka_bootstrap, topic, arrival_order(events) + flush, encode=to_protobuf)
    out = f"pb_sessions_{uid()}"
    config = example_config(
        "sessionization",
        {
            "inputs": {
                "rider_events": {
                    "kafka": {
                        "topic": topic,
                        "bootstrap_servers": kafka_bootstrap,
                        "maxOffsetsPerTrigger": 400,
                        "dlq": {"topic": dlq},
                        **kafka_keys(),
                    }
                }
            },
            "outputs": {
                "sessions": {
                    "hive": {"table": out},
                    "kafka": {
                        "topic": out_topic,
                        "bootstrap_servers": kafka_bootstrap,
                        "format": "protobuf",
                        "schema_file": str(SESSIONS_PROTO),
                        "message": "rides.v1.Session",
                    },
                }
            },
        },
        scratch,
    )
    result = run_resuming(spark, config, RunOptions("stream", trigger="available-now"))
    assert result.status == "finished"
    truth = sessions_by_hand(events, GAP)
    rows = [r for r in table_rows(spark, out, COLUMNS) if r[0] != FLUSH_RIDER]
    assert len(rows) == len(set(rows)), "no duplicate sessions"
    assert set(rows) == truth
    assert result.rows_dropped_late == 0
    counts = result.record.inputs["rider_events"]
    assert counts["dead"] == len(GARBAGE)
    letters = [json.loads(m.value()) for m in consume_topic(kafka_bootstrap, dlq)]
    assert sorted(base64.b64decode(d["value"]) for d in letters) == sorted(GARBAGE)
    assert all(d["reason"].startswith("Protobuf decode failed") for d in letters), letters

    # the same sessions, as rides.v1.Session messages on the output topic
    spec = DecoderSpec(
        format="protobuf",
        proto_schema=SESSIONS_PROTO,
        message="rides.v1.Session",
        event_time="session_start",
    )
    decoded = decode_values(spec, [m.value() for m in consume_topic(kafka_bootstrap, out_topic)])
    assert all(isinstance(d, dict) for d in decoded), decoded[:3]
    published = {
        (d["rider_id"], d["session_start"], d["session_end"], d["event_count"],
         tuple(d["event_types"]), d["trip_requested"])
        for d in decoded
        if isinstance(d, dict) and d["rider_id"] != FLUSH_RIDER
    }  # fmt: skip
    assert published == truth


@pytest.mark.slow
def test_bootstrap_from_a_lake_archived_from_the_protobuf_topic(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    events, flush = events_and_flush()
    topic = new_topic(prefix="pb-boot")
    produce(kafka_bootstrap, topic, [], extra=GARBAGE)
    produce(kafka_bootstrap, topic, arrival_order(events) + flush, encode=to_protobuf)

    # archive the topic: the decoded columns in a Hive table, the garbage in its dead letters
    lake = f"pb_lake_{uid()}"
    archiver, archive_config = archive_job(
        ArchiveOptions(
            topic=topic,
            bootstrap_servers=kafka_bootstrap,
            table=lake,
            event_time_column="event_time",
            format="protobuf",
            schema_file=RIDES_PROTO,
            message=MESSAGE,
            checkpoint_dir=scratch / "archive",
        )
    )
    archived = run_job(
        spark, archiver, archive_config, RunOptions("stream", trigger="available-now")
    )
    assert archived.status == "finished"
    stored = spark.table(lake)
    assert {"event_id", "rider_id", "event_type", "area", "event_time", "app_version"} <= set(
        stored.columns
    )
    assert stored.count() == len(events) + len(flush)
    assert spark.table(f"{lake}_dead_letters").count() == len(GARBAGE)
    assert {
        (r.event_id, micros(r.event_time.replace(tzinfo=T0.tzinfo)))
        for r in stored.select("event_id", "event_time").collect()
    } == {(e["event_id"], micros(e["event_time"])) for e in events + flush}

    out = f"pb_boot_sessions_{uid()}"
    config = example_config(
        "sessionization",
        {
            "inputs": {
                "rider_events": {
                    "kafka": {
                        "topic": topic,
                        "bootstrap_servers": kafka_bootstrap,
                        "dlq": {"topic": None, "table": f"pb_boot_dlq_{uid()}"},
                        **kafka_keys(),
                    },
                    "hive": {"table": lake, "partition_format": "dt=%Y-%m-%d/hr=%H"},
                }
            },
            "outputs": {"sessions": {"hive": {"table": out}}},
        },
        scratch,
    )
    result = run_job(
        spark,
        sessionization.JOB,
        config,
        RunOptions("bootstrap", start=START, cutoff=CUTOFF.isoformat(), trigger="available-now"),
    )
    assert result.status == "finished"
    rows = [r for r in table_rows(spark, out, COLUMNS) if r[0] != FLUSH_RIDER]
    assert len(rows) == len(set(rows)), "no duplicate sessions"
    assert set(rows) == sessions_by_hand(events, GAP)
    counts = result.record.inputs["rider_events"]
    assert counts["dead"] == len(GARBAGE)
    assert counts["skipped"] == sum(1 for e in events if e["event_time"] < CUTOFF)
