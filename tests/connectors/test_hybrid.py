"""The hybrid source bootstraps a 30-day sliding-window count from the lake and Kafka.

The lake table holds days 1-28 (``dt=`` event-time partitions); Kafka holds only the last
two days, plus events just before the cutoff that are also in the lake (the overlap the
de-duplication rule must drop) and older ones before ``cutoff - lateness``. The streaming
result equals a ground truth computed in plain Python from the generated events, and the
same query, restarted from its checkpoint, keeps counting new Kafka events.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import Producer
from hive_tables import BASE, DAY, iso
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kappaplus.codecs import DecoderSpec
from kappaplus.connectors.hybrid.source import hybrid_counts, read_hybrid_stream
from kappaplus.core.errors import ConfigError

HOUR = 3600
# 30-day windows: far longer than Kafka's retention (2 days), so their state must come from
# the lake, and every window that closes after the cutoff holds lake AND Kafka events
WINDOW, SLIDE = 30 * DAY, DAY
CUTOFF = BASE + 28 * DAY
KINDS = ("open", "search", "request", "pay")
PER_DAY = 100
DELAY = 300  # Kafka record timestamps trail event time by up to 5 minutes

LAKE_SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("key", IntegerType()),
        StructField("kind", StringType()),
        StructField("ts", TimestampType()),
    ]
)
# Kafka's events differ from the lake's: no dt partition, key is a long, an extra field.
DECODER = DecoderSpec(
    format="json",
    schema=StructType(
        [
            StructField("id", LongType()),
            StructField("key", LongType()),
            StructField("kind", StringType()),
            StructField("channel", StringType()),
            StructField("ts", TimestampType()),
        ]
    ),
    event_time="ts",
)


def generate(first_day: int, days: int, rng: random.Random) -> list[dict]:
    """``PER_DAY`` events per day from ``BASE + first_day`` days, ids unique by day."""
    out = []
    for day in range(first_day, first_day + days):
        for i in range(PER_DAY):
            ident = day * PER_DAY + i
            out.append(
                {
                    "id": ident,
                    "key": ident % 7,
                    "kind": KINDS[rng.randrange(len(KINDS))],
                    "ts": BASE + day * DAY + rng.randrange(DAY),
                }
            )
    return out


def produce(bootstrap: str, topic: str, events: list[dict], rng: random.Random, bad: int = 0):  # noqa: ANN201
    """JSON events, keyed by id, CreateTime = event time + up to DELAY, in timestamp order;
    ``bad`` undecodable records stamped just after the last event."""
    records = []
    for e in events:
        value = {
            "id": e["id"],
            "key": e["key"],
            "kind": e["kind"],
            "channel": "app",
            "ts": datetime.fromtimestamp(e["ts"], tz=UTC).isoformat(),
        }
        records.append(((e["ts"] + rng.randrange(DELAY)) * 1000, json.dumps(value).encode()))
    last = max(t for t, _ in records)
    for i in range(bad):
        records.append((last + i + 1, b'{"id": "not a number", "ts": ' if i % 2 else b"\xff\xfe"))
    records.sort(key=lambda r: r[0])
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for n, (stamp, value) in enumerate(records):
        producer.produce(topic, value=value, key=str(n).encode(), partition=n % 2, timestamp=stamp)
    assert producer.flush(30) == 0


def windows_of(t: int) -> list[int]:
    """Starts of the sliding windows containing ``t`` (as Spark assigns them)."""
    last = t - t % SLIDE
    return [last - k * SLIDE for k in range(WINDOW // SLIDE)]


def ground_truth(events: list[dict]) -> dict[tuple[int, str], tuple[int, int]]:
    """(window start, kind) -> (count, sum of ids), over events unique by id."""
    unique = {e["id"]: e for e in events}
    truth: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0])
    for e in unique.values():
        for start in windows_of(e["ts"]):
            cell = truth[(start, e["kind"])]
            cell[0] += 1
            cell[1] += e["id"]
    return {k: (v[0], v[1]) for k, v in truth.items()}


def run(stream: DataFrame, checkpoint: Path) -> tuple[dict, list[dict]]:
    """Run the windowed count with Trigger.AvailableNow; return the emitted windows
    ``(start, kind) -> (n, ids)`` and the progress of every micro-batch."""
    counts = stream.groupBy(F.window("ts", f"{WINDOW} seconds", f"{SLIDE} seconds"), "kind").agg(
        F.count("*").alias("n"), F.sum("id").alias("ids")
    )
    emitted: list[tuple] = []

    def collect(batch: DataFrame, batch_id: int) -> None:
        emitted.extend(
            (r.s, r.kind, r.n, r.ids)
            for r in batch.select(
                F.col("window.start").cast("long").alias("s"), "kind", "n", "ids"
            ).collect()
        )

    query = (
        counts.writeStream.outputMode("append")
        .foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert not query.isActive, "the AvailableNow run did not finish"
    if query.exception():
        raise query.exception()  # type: ignore[misc]
    windows = {(s, kind): (n, ids) for s, kind, n, ids in emitted}
    assert len(windows) == len(emitted), "a window was emitted twice"
    return windows, list(query.recentProgress)


def final_watermark(progress: list[dict]) -> int:
    stamp = progress[-1]["eventTime"]["watermark"]
    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())


def check_closed(emitted: dict, truth: dict, watermark: int, earlier: dict | None = None) -> None:
    """Every emitted window equals the truth; every window that closed was emitted."""
    for key, value in emitted.items():
        assert key[0] + WINDOW <= watermark, f"window {iso(key[0])} emitted before it closed"
        assert value == truth.get(key), (iso(key[0]), key[1], value, truth.get(key))
    seen = set(emitted) | set(earlier or {})
    missing = [(iso(s), k) for (s, k) in truth if s + WINDOW < watermark and (s, k) not in seen]
    assert not missing, f"closed windows not emitted: {missing[:5]}"


@pytest.fixture(scope="module")
def lake_events(spark: SparkSession) -> list[dict]:
    """Days 1-28 in a table partitioned by event date (``dt=``)."""
    events = generate(0, 28, random.Random(7))
    rows = [(e["id"], e["key"], e["kind"], datetime.fromtimestamp(e["ts"], tz=UTC)) for e in events]
    df = spark.createDataFrame(rows, LAKE_SCHEMA).withColumn(
        "dt", F.date_format("ts", "yyyy-MM-dd")
    )
    spark.sql("DROP TABLE IF EXISTS hybrid_lake_events")
    df.repartition(1, "dt").write.partitionBy("dt").format("parquet").saveAsTable(
        "hybrid_lake_events"
    )
    return events


def test_bootstrap_from_lake_then_kafka_equals_ground_truth(
    spark: SparkSession,
    lake_events: list[dict],
    kafka_bootstrap: str,
    new_topic,  # noqa: ANN001
    scratch: Path,
) -> None:
    rng = random.Random(11)
    topic = new_topic(partitions=2, prefix="hybrid")
    # Kafka retains less than the lake: two new days, and history only from day 27 on.
    older = [e for e in lake_events if CUTOFF - 30 * HOUR <= e["ts"] < CUTOFF - 24 * HOUR]
    overlap = [e for e in lake_events if CUTOFF - 3 * HOUR <= e["ts"] < CUTOFF]
    new = generate(28, 2, rng)
    assert len(overlap) > 5 and len(older) > 5
    produce(kafka_bootstrap, topic, older + overlap + new, rng, bad=2)

    def stream() -> DataFrame:
        return read_hybrid_stream(
            spark,
            table="hybrid_lake_events",
            event_time_column="ts",
            cutoff=iso(CUTOFF),
            start=iso(BASE),
            bootstrap=kafka_bootstrap,
            subscribe=topic,
            decoder=DECODER,
            lateness="6 hours",
            max_event_time_per_trigger="5 days",
            watermark_delay="1 hour",
            dead_letter_path=str(scratch / "dead"),
            job_name="hybrid-test",
            manifestDir=str(scratch / "manifests"),
        )

    # -- run 1: lake days 1-28, then Kafka days 29-30 ------------------------------------
    emitted, progress = run(stream(), scratch / "ck")
    phases = [json.loads(p["sources"][0]["endOffset"])["phase"] for p in progress]
    assert phases[0] == "lake" and phases[-1] == "kafka"
    assert phases == sorted(phases, key=lambda p: p != "lake"), "lake first, then Kafka"
    assert phases.count("lake") <= 8, "5-day slices: few micro-batches"

    truth = ground_truth(lake_events + new)
    watermark = final_watermark(progress)
    assert watermark >= CUTOFF + DAY, "the watermark moved past the cutoff on Kafka data"
    check_closed(emitted, truth, watermark)
    across = [k for k in emitted if k[0] < CUTOFF < k[0] + WINDOW]
    assert across, "windows holding both lake and Kafka events were checked"

    counts = hybrid_counts(str(scratch / "dead"), "hybrid-test")
    # The overlap (read from cutoff - lateness on) is skipped; the older day-27 records lie
    # before cutoff - lateness and are not read at all (else they would be counted here).
    assert counts.skipped == len(overlap), "Kafka events before the cutoff are skipped"
    assert counts.delivered == len(new)
    assert counts.dead == 2
    assert counts.records == counts.delivered + counts.skipped + counts.dead
    dead = spark.read.parquet(str(scratch / "dead")).collect()
    assert len(dead) == 2 and all(r.reason and r.job == "hybrid-test" for r in dead)

    # -- run 2: the same checkpoint continues on new Kafka data (days 31-32) --------------
    later = generate(30, 2, rng)
    produce(kafka_bootstrap, topic, later, rng)
    emitted2, progress2 = run(stream(), scratch / "ck")
    assert all(json.loads(p["sources"][0]["endOffset"])["phase"] == "kafka" for p in progress2)
    assert not set(emitted2) & set(emitted), "no window is emitted twice across runs"
    truth = ground_truth(lake_events + new + later)
    watermark2 = final_watermark(progress2)
    assert watermark2 >= CUTOFF + 3 * DAY + 12 * HOUR
    check_closed(emitted2, truth, watermark2, earlier=emitted)
    assert [k for k in emitted2 if k[0] >= CUTOFF + 2 * DAY - WINDOW + SLIDE], "new windows"
    assert hybrid_counts(str(scratch / "dead"), "hybrid-test").delivered == len(new) + len(later)


def test_bad_options_name_the_option(spark: SparkSession, lake_events: list[dict]) -> None:
    common = {
        "table": "hybrid_lake_events",
        "event_time_column": "ts",
        "bootstrap": "127.0.0.1:1",
        "subscribe": "t",
        "decoder": DECODER,
    }
    with pytest.raises(ConfigError, match="startingOffsets"):
        read_hybrid_stream(spark, cutoff=iso(CUTOFF), startingOffsets="earliest", **common)
    with pytest.raises(ConfigError, match="startingTimestamp"):
        read_hybrid_stream(spark, cutoff=iso(BASE), start=iso(BASE + DAY), **common)
    no_key = DecoderSpec(
        format="json", schema="id BIGINT, kind STRING, ts TIMESTAMP", event_time="ts"
    )
    with pytest.raises(ConfigError, match="'key'"):
        read_hybrid_stream(spark, cutoff=iso(CUTOFF), **{**common, "decoder": no_key})


def test_dedup_rule_and_schema_unification_per_record() -> None:
    """Without Spark: one decoded batch split into delivered, skipped and dead records."""
    import pyarrow as pa

    from kappaplus.codecs import decode_batches
    from kappaplus.connectors.hybrid.options import HybridSourceOptions, decoder_to_json
    from kappaplus.connectors.hybrid.reader import decoded_arrow_schema, split_decoded
    from kappaplus.connectors.kafka.reader import arrow_schema

    lake_schema = StructType([*LAKE_SCHEMA.fields, StructField("dt", StringType())])
    options = HybridSourceOptions.parse(
        {
            "lake.table": "events",
            "lake.location": "/nowhere",
            "lake.format": "parquet",
            "lake.schema": lake_schema.json(),
            "lake.partitionColumns": "dt",
            "lake.partitionTimeFormat": "dt=%Y-%m-%d",
            "lake.eventTimeColumn": "ts",
            "lake.manifestDir": "/nowhere/manifests",
            "kafka.bootstrap.servers": "127.0.0.1:1",
            "subscribe": "events",
            "cutoff": iso(CUTOFF),
            "lateness": "6 hours",
            "decoder": decoder_to_json(DECODER),
            "deadLetterPath": "/nowhere/dead",
        }
    )
    assert options.derived == {"dt": "%Y-%m-%d"}
    assert options.kafka_start_ms == (CUTOFF - 6 * HOUR) * 1000

    def value(ident: int, ts: int, key: int = 1) -> bytes:
        stamp = datetime.fromtimestamp(ts, tz=UTC).isoformat()
        return json.dumps({"id": ident, "key": key, "kind": "pay", "ts": stamp}).encode()

    values = [
        value(1, CUTOFF - 1),  # the lake's: skipped
        value(2, CUTOFF),  # Kafka's from the cutoff on
        value(3, CUTOFF + DAY + 5),
        value(4, CUTOFF + 60, key=2**40),  # decodes, but does not fit the lake's INT key
        b"{broken",
    ]
    n = len(values)
    records = pa.RecordBatch.from_arrays(
        [
            pa.array([b"k"] * n),
            pa.array(values),
            pa.array(["events"] * n),
            pa.array([0] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([CUTOFF * 1_000_000] * n, pa.timestamp("us", tz="UTC")),
            pa.array([0] * n, pa.int32()),
        ],
        schema=arrow_schema(False),
    )
    (decoded,) = decode_batches(DECODER, decoded_arrow_schema(options), [records])
    from kappaplus.connectors.lake.delivery import output_arrow_schema

    rows, dead, counts = split_decoded(options, decoded, output_arrow_schema(options.lake))
    assert counts.as_dict() == {"records": 5, "delivered": 2, "skipped": 1, "dead": 2}
    assert rows.schema == output_arrow_schema(options.lake)
    assert rows.column("id").to_pylist() == [2, 3]
    assert rows.column("dt").to_pylist() == [iso(CUTOFF)[:10], iso(CUTOFF + DAY)[:10]]
    assert dead is not None
    assert sorted(dead.column("offset").to_pylist()) == [3, 4]
    reasons = " | ".join(dead.column("reason").to_pylist())
    assert "'key'" in reasons and "invalid JSON" in reasons

    # the input's event-time bounds: a record past them is a dead letter with its reason
    # (as in a stream), never a row left out; maxFuture counts from the batch's planning
    # time (kept in its offset: a replay decides the same)
    bounded = HybridSourceOptions.parse(
        {**options.to_options(), "eventTimeMax": iso(CUTOFF + DAY), "maxFuture": "1 hour"}
    )
    planned = (CUTOFF + 30) * 1_000_000  # record 2 (at the cutoff) is 30 s before it
    rows, dead, counts = split_decoded(
        bounded, decoded, output_arrow_schema(bounded.lake), planned_micros=planned
    )
    assert rows.column("id").to_pylist() == [2]
    assert counts.as_dict() == {"records": 5, "delivered": 1, "skipped": 1, "dead": 3}
    assert dead is not None

    def reasons_by_offset(dead: pa.Table) -> dict[int, str]:
        offsets, reasons = dead.column("offset").to_pylist(), dead.column("reason").to_pylist()
        return dict(zip(offsets, reasons, strict=True))

    why = reasons_by_offset(dead)
    assert sorted(why) == [2, 3, 4]
    assert "is not before the bound max" in why[2] and iso(CUTOFF + DAY + 5)[:19] in why[2]
    unbounded_max = HybridSourceOptions.parse({**bounded.to_options(), "eventTimeMax": ""})
    _, dead, _ = split_decoded(
        unbounded_max, decoded, output_arrow_schema(bounded.lake), planned_micros=planned
    )
    assert dead is not None
    assert "max_future" in reasons_by_offset(dead)[2]
