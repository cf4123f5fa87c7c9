"""Required fields (issue 47 item 9): a record that lacks a column the job declares ``NOT
NULL`` (in its ``InputSpec`` DDL), or a field its binding lists in ``required``, is a dead
letter with the reason; a nullable column a record lacks stays null. JSON records whose
binding has its own ``fields`` (all nullable) and Avro records whose schema allows null
both went through with a NULL city, counted under it.

Real records on the embedded broker, one stream run per format; the output holds exactly
the records that carry what is required, the dead-letter table exactly the others with
their reasons, and the counts per city equal the truth computed from what was produced."""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import fastavro
from confluent_kafka import Producer
from pyspark.sql import DataFrame, SparkSession
from runtime_helpers import uid

from kappaplus.config import config_from_dict
from kappaplus.jobs import InputSpec, Job, OutputSpec, Params
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job

START = datetime(2024, 3, 1, tzinfo=UTC)
CITIES = ["sf", "nyc", "la"]


def passthrough(inputs: Mapping[str, DataFrame], params: Params) -> dict[str, DataFrame]:
    return {"rides": inputs["rides"].select("ride_id", "city", "tip", "ride_time")}


JOB = Job(
    name="required-rides",
    inputs=[
        InputSpec(
            "rides",
            "ride_id string, city string not null, tip double, ride_time timestamp",
            "ride_time",
        )
    ],
    outputs=[OutputSpec("rides", event_time_column="ride_time")],
    transform=passthrough,
    watermark_delay="1 minute",
)

AVRO_SCHEMA = {
    "type": "record",
    "name": "Ride",
    "fields": [
        {"name": "ride_id", "type": "string"},
        {"name": "city", "type": ["null", "string"], "default": None},
        {"name": "tip", "type": ["null", "double"], "default": None},
        {"name": "zone", "type": ["null", "string"], "default": None},
        {"name": "ride_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}


def records() -> list[dict[str, Any]]:
    """60 rides: every 7th without a city (absent or null), every 5th without a tip, every
    11th without a zone."""
    out = []
    for i in range(60):
        record: dict[str, Any] = {
            "ride_id": f"r{i}",
            "city": CITIES[i % 3],
            "tip": float(i % 4),
            "zone": f"z{i % 2}",
            "ride_time": START + timedelta(minutes=i),
        }
        if i % 7 == 0:
            record["city"] = None if i % 14 == 0 else "-"
        if i % 5 == 0:
            record["tip"] = None
        if i % 11 == 0:
            record["zone"] = None
        out.append(record)
    return out


def as_json(record: dict[str, Any]) -> bytes:
    """A JSON object without the fields that are None or '-' (absent, not null), except a
    null city, kept as null."""
    shown = {
        k: (v.isoformat() if isinstance(v, datetime) else v)
        for k, v in record.items()
        if v != "-" and (v is not None or k == "city")
    }
    return json.dumps(shown).encode()


def as_avro(record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    value = {**record, "city": None if record["city"] == "-" else record["city"]}
    fastavro.schemaless_writer(out, fastavro.parse_schema(AVRO_SCHEMA), value)
    return out.getvalue()


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0})
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(30) == 0


def stream(
    spark: SparkSession, kafka: dict[str, Any], scratch: Path
) -> tuple[list[tuple[str, str, float | None]], dict[str, str]]:
    """Run the job once over the topic; its output rows and its dead letters' reasons by
    ride id."""
    out, dlq = f"required_rides_{uid()}", f"required_dlq_{uid()}"
    config = config_from_dict(
        {
            "checkpoint_dir": str(scratch / "checkpoints"),
            "inputs": {
                "rides": {"kafka": {**kafka, "starting_offsets": "earliest", "dlq": {"table": dlq}}}
            },
            "outputs": {"rides": {"hive": {"table": out}}},
        }
    )
    result = run_job(spark, JOB, config, RunOptions("stream", trigger="available-now"))
    assert result.status == "finished"
    rows = [(r[0], r[1], r[2]) for r in spark.table(out).select("ride_id", "city", "tip").collect()]
    reasons = {}
    for letter in spark.table(dlq).select("value", "reason").collect():
        value = bytes(letter["value"])
        ride = (
            json.loads(value)["ride_id"]
            if kafka.get("format", "json") == "json"
            else fastavro.schemaless_reader(io.BytesIO(value), fastavro.parse_schema(AVRO_SCHEMA))[
                "ride_id"
            ]
        )
        reasons[ride] = letter["reason"]
    return rows, reasons


def check(
    rows: list[tuple[str, str, float | None]],
    reasons: dict[str, str],
    produced: list[dict[str, Any]],
    dead: dict[str, str],
) -> None:
    """The output is exactly the records not in ``dead`` (ride id -> reason piece), a
    missing tip kept as null; the dead letters exactly those, with their reasons."""
    kept = [r for r in produced if r["ride_id"] not in dead]
    assert len(rows) == len(set(rows)) == len(kept), (len(rows), len(kept))
    assert sorted(rows, key=str) == sorted(
        [(r["ride_id"], r["city"], r["tip"]) for r in kept], key=str
    )
    assert Counter(r[1] for r in rows) == Counter(r["city"] for r in kept)
    assert sum(1 for r in rows if r[2] is None) == sum(1 for r in kept if r["tip"] is None) > 0
    assert None not in {r[1] for r in rows}
    assert set(reasons) == set(dead), sorted(set(reasons) ^ set(dead))
    for ride, piece in dead.items():
        assert piece in reasons[ride], (ride, reasons[ride])


def test_json_records_lacking_a_not_null_column_or_a_required_field_are_dead_letters(
    spark: SparkSession, kafka_bootstrap: str, new_topic: Any, scratch: Path
) -> None:
    produced = records()
    topic = new_topic(prefix="required-json")
    produce(kafka_bootstrap, topic, [as_json(r) for r in produced])
    kafka = {
        "topic": topic,
        "bootstrap_servers": kafka_bootstrap,
        # the records' own schema, every field nullable; the job's city is NOT NULL
        "fields": "ride_id string, city string, tip double, zone string, ride_time timestamp",
        "required": ["zone"],
    }
    rows, reasons = stream(spark, kafka, scratch)
    dead = {}
    for r in produced:
        problems = []
        if r["city"] is None:
            problems.append("required field 'city' is null")
        elif r["city"] == "-":
            problems.append("missing required field 'city'")
        if r["zone"] is None:
            problems.append("missing required field 'zone'")
        if problems:
            dead[r["ride_id"]] = "; ".join(problems)
    assert 0 < len(dead) < len(produced)
    check(rows, reasons, produced, dead)


def test_avro_records_with_a_not_null_column_null_are_dead_letters(
    spark: SparkSession, kafka_bootstrap: str, new_topic: Any, scratch: Path
) -> None:
    produced = records()
    topic = new_topic(prefix="required-avro")
    produce(kafka_bootstrap, topic, [as_avro(r) for r in produced])
    schema_file = scratch / "ride.avsc"
    schema_file.write_text(json.dumps(AVRO_SCHEMA))
    kafka = {
        "topic": topic,
        "bootstrap_servers": kafka_bootstrap,
        "format": "avro",
        "schema_file": str(schema_file),
    }
    rows, reasons = stream(spark, kafka, scratch)
    dead = {
        r["ride_id"]: "required field 'city' is null" for r in produced if r["city"] in (None, "-")
    }
    assert 0 < len(dead) < len(produced)
    check(rows, reasons, produced, dead)
