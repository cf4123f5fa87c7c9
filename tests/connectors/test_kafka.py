"""The kappa_kafka source against the embedded broker: exact counts, no loss, no duplicates."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from kappaplus.connectors.kafka import read_kafka, read_kafka_stream
from kappaplus.connectors.kafka.offsets import OffsetOracle, fair_split
from kappaplus.connectors.kafka.options import KafkaSourceOptions
from kappaplus.connectors.kafka.reader import OffsetRange
from kappaplus.connectors.kafka.source import split_ranges
from kappaplus.core.errors import ConfigError
from kappaplus.core.secrets import redact
from kappaplus.local.broker import create_topic, delete_topic


def produce(
    bootstrap: str,
    topic: str,
    values: Iterable[str],
    *,
    partitions: int = 1,
    linger_ms: int = 100,
    timestamps: Callable[[int], int] | None = None,
) -> list[str]:
    """Produce with a batching producer (up to 1,000 records per batch); return the values."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": linger_ms,
            "batch.num.messages": 1000,
            "enable.idempotence": True,
        }
    )
    sent = []
    for i, value in enumerate(values):
        kwargs = {"timestamp": timestamps(i)} if timestamps else {}
        producer.produce(
            topic,
            value=value.encode(),
            key=f"k{i}".encode(),
            partition=i % partitions,
            headers=[("n", str(i).encode())],
            **kwargs,
        )
        sent.append(value)
    assert producer.flush(30) == 0
    return sent


def run_available_now(spark, name: str, checkpoint: Path, **options):  # type: ignore[no-untyped-def]
    """Run one AvailableNow query into parquet files; register them as view ``name``.

    The parquet sink (exactly-once with the checkpoint) lets a later run resume the same
    checkpoint; the view holds only the rows of *this* run.
    """
    out = checkpoint.parent / f"{checkpoint.name}-out"
    before = (
        set(spark.read.parquet(str(out)).inputFiles())
        if (out / "_spark_metadata").exists()
        else set()
    )
    df = read_kafka_stream(spark, **options)
    query = (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert not query.isActive
    if query.exception():
        raise query.exception()  # type: ignore[misc]
    files = sorted(set(spark.read.parquet(str(out)).inputFiles()) - before)
    schema = spark.read.parquet(str(out)).schema
    spark.read.schema(schema).parquet(*files).createOrReplaceTempView(name) if files else (
        spark.createDataFrame([], schema).createOrReplaceTempView(name)
    )
    return query


def values_of(spark, table: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [r[0] for r in spark.sql(f"SELECT CAST(value AS STRING) FROM {table}").collect()]


# -- pure logic -----------------------------------------------------------------------------


def test_fair_split_is_max_min_fair_and_exact() -> None:
    available = {("a", 0): 100, ("a", 1): 3, ("b", 0): 0, ("b", 1): 50}
    shares = fair_split(available, 60)
    assert sum(shares.values()) == 60
    assert shares[("a", 1)] == 3 and shares[("b", 0)] == 0
    assert abs(shares[("a", 0)] - shares[("b", 1)]) <= 1
    assert fair_split(available, 10_000) == available
    for budget in range(0, 160, 7):
        split = fair_split(available, budget)
        assert sum(split.values()) == min(budget, 153)
        assert all(0 <= split[tp] <= available[tp] for tp in available)


def test_split_ranges_covers_every_offset_once() -> None:
    ranges = [OffsetRange("t", 0, 5, 1005), OffsetRange("t", 1, 0, 7), OffsetRange("t", 2, 3, 3)]
    split = split_ranges(ranges, 8)
    assert len(split) >= 7
    for original in ranges[:2]:
        parts = [r for r in split if r.partition == original.partition]
        covered = [o for r in parts for o in range(r.from_offset, r.until_offset)]
        assert covered == list(range(original.from_offset, original.until_offset))
    assert not [r for r in split if r.partition == 2]


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"subscribe": "t"}, "kafka.bootstrap.servers"),
        ({"kafka.bootstrap.servers": "h:1"}, "subscribe"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "assign": '{"a":[0]}'}, "subscribe"),
        ({"kafka.bootstrap.servers": "h:1", "assign": "[0]"}, "assign"),
        ({"kafka.bootstrap.servers": "h:1", "subscribePattern": "(("}, "subscribePattern"),
        (
            {"kafka.bootstrap.servers": "h:1", "subscribe": "a", "startingOffsets": "soon"},
            "startingOffsets",
        ),
        (
            {
                "kafka.bootstrap.servers": "h:1",
                "subscribe": "a",
                "startingOffsets": '{"b":{"0":1}}',
            },
            "startingOffsets",
        ),
        (
            {"kafka.bootstrap.servers": "h:1", "subscribe": "a", "startingTimestamp": "yesterday"},
            "startingTimestamp",
        ),
        (
            {"kafka.bootstrap.servers": "h:1", "subscribe": "a", "maxOffsetsPerTrigger": "0"},
            "maxOffsetsPerTrigger",
        ),
        (
            {"kafka.bootstrap.servers": "h:1", "subscribe": "a", "minPartitions": "x"},
            "minPartitions",
        ),
        (
            {"kafka.bootstrap.servers": "h:1", "subscribe": "a", "failOnDataLoss": "maybe"},
            "failOnDataLoss",
        ),
        (
            {"kafka.bootstrap.servers": "h:1", "subscribe": "a", "endingOffsets": "earliest"},
            "endingOffsets",
        ),
        (
            {"kafka.bootstrap.servers": "h:1", "subscribe": "a", "kafka.auto.offset.reset": "x"},
            "kafka.auto.offset.reset",
        ),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], option: str) -> None:
    with pytest.raises(ConfigError) as info:
        KafkaSourceOptions.parse(options)
    assert info.value.option == option
    assert option in str(info.value)


def test_secrets_never_appear_in_errors() -> None:
    options = {
        "kafka.bootstrap.servers": "h:1",
        "subscribe": "a",
        "kafka.sasl.password": "hunter2",
        "kafka.enable.auto.commit": "true",
    }
    with pytest.raises(ConfigError) as info:
        KafkaSourceOptions.parse(options)
    assert info.value.option == "kafka.enable.auto.commit"
    assert "hunter2" not in str(info.value)
    ok = KafkaSourceOptions.parse({k: v for k, v in options.items() if "commit" not in k})
    assert ok.client["sasl.password"] == "hunter2"  # passed through to the client ...
    assert "hunter2" not in ok.describe()  # ... but never shown
    assert redact(ok.client)["sasl.password"] == "***"


def test_bad_option_through_spark_names_it(spark, kafka_bootstrap: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="maxOffsetsPerTrigger"):
        read_kafka_stream(spark, bootstrap=kafka_bootstrap, subscribe="x", maxOffsetsPerTrigger=-5)
    # The same check runs when Spark loads the source by name.
    with pytest.raises(Exception, match="maxOffsetsPerTrigger"):
        (
            spark.readStream.format("kappa_kafka")
            .option("kafka.bootstrap.servers", kafka_bootstrap)
            .option("subscribe", "x")
            .option("maxOffsetsPerTrigger", "-5")
            .load()
        )


# -- against the broker ---------------------------------------------------------------------


def test_true_end_offsets_despite_coarse_watermark(kafka_bootstrap: str, new_topic) -> None:  # type: ignore[no-untyped-def]
    topic = new_topic(partitions=2)
    produce(kafka_bootstrap, topic, (str(i) for i in range(2001)), partitions=2)
    oracle = OffsetOracle(
        KafkaSourceOptions.parse({"kafka.bootstrap.servers": kafka_bootstrap, "subscribe": topic})
    )
    try:
        tps = oracle.topic_partitions()
        assert tps == [(topic, 0), (topic, 1)]
        assert oracle.end_offsets(tps) == {(topic, 0): 1001, (topic, 1): 1000}
        # A stale known position (larger than the reported watermark) still probes correctly.
        assert oracle.end_offsets(tps, known={(topic, 0): 500}) == {
            (topic, 0): 1001,
            (topic, 1): 1000,
        }
    finally:
        oracle.close()


def test_a_streams_end_offsets_stop_at_records_stamped_after_the_question(  # type: ignore[no-untyped-def]
    kafka_bootstrap: str, new_topic
) -> None:
    """A stream's next batch ends where the partition ended when it asked: the probe past
    the reported watermark stops at the first record stamped after the call (without that it
    chased a busy partition for its whole time bound); a run's fixed target still reads to
    the end of what is there."""
    topic = new_topic(partitions=1)
    now_ms = int(time.time() * 1000)
    produce(
        kafka_bootstrap, topic, (str(i) for i in range(1500)), timestamps=lambda i: now_ms - 60_000
    )
    produce(
        kafka_bootstrap,
        topic,
        (str(i) for i in range(1500, 3000)),
        timestamps=lambda i: now_ms + 3_600_000,  # "arrived after the question"
    )
    oracle = OffsetOracle(
        KafkaSourceOptions.parse({"kafka.bootstrap.servers": kafka_bootstrap, "subscribe": topic})
    )
    try:
        tps = oracle.topic_partitions()
        reported = oracle.watermarks(tps)[(topic, 0)][1]
        # tansu reports a lower bound (the last record batch's base offset + 1), so the cut
        # below is the probe's; against Apache Kafka the watermark is exact and both are 3000
        assert reported <= 3000
        # what exists below the reported watermark is in; past it, nothing stamped after the call
        assert oracle.end_offsets(tps, as_of_call=True) == {(topic, 0): max(reported, 1500)}
        assert oracle.end_offsets(tps, known={(topic, 0): 1200}, as_of_call=True) == {
            (topic, 0): max(reported, 1500)
        }
        assert oracle.end_offsets(tps) == {(topic, 0): 3000}
    finally:
        oracle.close()


def test_a_topic_that_does_not_exist_is_named_with_exit_2(kafka_bootstrap: str) -> None:
    """`kappa dlq replay` / `trail` of a misspelt topic: a name the caller got wrong."""
    from kappaplus.connectors.kafka.whole_topic import true_ends
    from kappaplus.core.errors import TopicNotFound

    missing = f"no-such-topic-{time.time_ns()}"
    with pytest.raises(TopicNotFound) as caught:
        true_ends(kafka_bootstrap, {}, missing)
    assert caught.value.exit_code == 2
    assert repr(missing) in str(caught.value) and "kappa topic create" in str(caught.value)


def test_available_now_reads_exactly_everything_then_the_tail(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    topic = new_topic(partitions=3)
    first = produce(kafka_bootstrap, topic, (f"a{i}" for i in range(5000)), partitions=3)
    options = {
        "bootstrap": kafka_bootstrap,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "includeHeaders": True,
    }
    run_available_now(spark, "kafka_avn_1", scratch / "ckpt", **options)
    rows = spark.sql(
        "SELECT CAST(value AS STRING) v, partition, offset, topic, timestampType, "
        "CAST(headers[0].value AS STRING) h FROM kafka_avn_1"
    ).collect()
    assert sorted(r.v for r in rows) == sorted(first)
    assert len({(r.partition, r.offset) for r in rows}) == 5000
    assert {r.topic for r in rows} == {topic} and {r.timestampType for r in rows} == {0}
    assert all(r.v == f"a{r.h}" for r in rows)
    # The tail of one more big batch, read by the same query after a restart: exactly the new rows.
    second = produce(kafka_bootstrap, topic, (f"b{i}" for i in range(1000)), partitions=1)
    run_available_now(spark, "kafka_avn_2", scratch / "ckpt", **options)
    assert sorted(values_of(spark, "kafka_avn_2")) == sorted(second)


def test_max_offsets_per_trigger_is_respected(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    topic = new_topic(partitions=2)
    sent = produce(kafka_bootstrap, topic, (str(i) for i in range(1000)), partitions=2)
    query = run_available_now(
        spark,
        "kafka_maxoffsets",
        scratch / "ckpt",
        bootstrap=kafka_bootstrap,
        subscribe=topic,
        startingOffsets="earliest",
        maxOffsetsPerTrigger=300,
        # the even split; batches cut at one record time: tests/runtime/test_partition_alignment
        alignPartitions="false",
    )
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    assert [p["numInputRows"] for p in progress] == [300, 300, 300, 100]
    assert sorted(values_of(spark, "kafka_maxoffsets")) == sorted(sent)
    # Shared fairly: both partitions advance by 150 per batch.
    ends = [json.loads(p["sources"][0]["endOffset"])[topic] for p in progress]
    assert ends[0] == {"0": 150, "1": 150} and ends[-1] == {"0": 500, "1": 500}
    # reportLatestOffset: the true end, not the broker's coarse watermark.
    assert json.loads(progress[0]["sources"][0]["latestOffset"]) == {topic: {"0": 500, "1": 500}}


def test_stop_and_restart_mid_stream_loses_and_duplicates_nothing(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    topic = new_topic(partitions=2)
    total = 6000
    sent: list[str] = []

    def producer() -> None:
        for chunk in range(6):
            sent.extend(
                produce(
                    kafka_bootstrap,
                    topic,
                    (f"v{chunk}-{i}" for i in range(total // 6)),
                    partitions=2,
                    linger_ms=50,
                )
            )
            time.sleep(0.5)

    out, checkpoint = scratch / "out", scratch / "ckpt"

    def start():  # type: ignore[no-untyped-def]
        df = read_kafka_stream(
            spark,
            bootstrap=kafka_bootstrap,
            subscribe=topic,
            startingOffsets="earliest",
            maxOffsetsPerTrigger=1500,
        )
        return (
            df.selectExpr("CAST(value AS STRING) v", "partition", "offset")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="1 second")
            .start()
        )

    thread = threading.Thread(target=producer)
    thread.start()
    query = start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(p["numInputRows"] for p in query.recentProgress):
        time.sleep(0.2)
    query.stop()  # mid-stream: the producer is still writing
    assert thread.is_alive() or len(sent) == total
    assert query.exception() is None
    first_run = sum(p["numInputRows"] for p in query.recentProgress)
    assert 0 < first_run < total
    query = start()
    thread.join()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and query.exception() is None:
        if first_run + sum(p["numInputRows"] for p in query.recentProgress) >= total:
            break
        time.sleep(0.5)
    for _ in range(10):  # the last batch's files are committed right after its progress
        if spark.read.parquet(str(out)).count() >= total:
            break
        time.sleep(1)
    query.stop()
    assert query.exception() is None
    rows = spark.read.parquet(str(out)).collect()
    assert len(rows) == total
    assert sorted(r.v for r in rows) == sorted(sent)
    assert len({(r.partition, r.offset) for r in rows}) == total


def test_starting_timestamp_ending_offsets_and_min_partitions(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic
) -> None:
    topic = new_topic(partitions=2)
    base = 1_700_000_000_000
    produce(
        kafka_bootstrap,
        topic,
        (str(i) for i in range(1000)),
        partitions=2,
        timestamps=lambda i: base + i,
    )
    df = read_kafka(spark, bootstrap=kafka_bootstrap, subscribe=topic, startingTimestamp=base + 600)
    got = sorted(int(r[0]) for r in df.selectExpr("CAST(value AS STRING)").collect())
    assert got == list(range(600, 1000))
    # Past the last record: nothing.
    later = read_kafka(
        spark, bootstrap=kafka_bootstrap, subscribe=topic, startingTimestamp=base + 5000
    )
    assert later.count() == 0
    # endingOffsets bounds the read; minPartitions splits it into more Spark tasks.
    bounded = read_kafka(
        spark,
        bootstrap=kafka_bootstrap,
        subscribe=topic,
        minPartitions=6,
        endingOffsets={topic: {"0": 100, "1": -1}},
    )
    assert bounded.rdd.getNumPartitions() >= 6
    rows = bounded.select("partition", "offset").collect()
    assert len(rows) == 100 + 500
    assert max(r.offset for r in rows if r.partition == 0) == 99
    # assign + per-partition startingOffsets.
    assigned = read_kafka(
        spark,
        bootstrap=kafka_bootstrap,
        assign={topic: [1]},
        startingOffsets={topic: {"1": 490}},
    )
    got = sorted(
        (r.partition, r.offset, int(r.v))
        for r in assigned.selectExpr("partition", "offset", "CAST(value AS STRING) v").collect()
    )
    assert got == [(1, o, 2 * o + 1) for o in range(490, 500)]


def test_subscribe_pattern_discovers_new_topics_from_earliest(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    first = new_topic(prefix="pat-a")
    prefix = first.rsplit("-", 1)[0]
    a = produce(kafka_bootstrap, first, (f"a{i}" for i in range(300)))
    options = {
        "bootstrap": kafka_bootstrap,
        "subscribePattern": prefix.replace("pat-a", "pat-.") + "-.*",
        "startingOffsets": "earliest",
    }
    run_available_now(spark, "kafka_pat_1", scratch / "ckpt", **options)
    assert sorted(values_of(spark, "kafka_pat_1")) == sorted(a)
    second = first.replace("pat-a", "pat-b")
    create_topic(kafka_bootstrap, second, 2)
    b = produce(kafka_bootstrap, second, (f"b{i}" for i in range(400)), partitions=2)
    run_available_now(spark, "kafka_pat_2", scratch / "ckpt", **options)
    assert sorted(values_of(spark, "kafka_pat_2")) == sorted(b)


def test_fail_on_data_loss_on_a_recreated_topic(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    topic = new_topic()
    produce(kafka_bootstrap, topic, (f"old{i}" for i in range(500)))
    options = {"bootstrap": kafka_bootstrap, "subscribe": topic, "startingOffsets": "earliest"}
    run_available_now(spark, "kafka_loss_1", scratch / "ckpt", **options)
    assert len(values_of(spark, "kafka_loss_1")) == 500
    delete_topic(kafka_bootstrap, topic)
    create_topic(kafka_bootstrap, topic, 1)
    new = produce(kafka_bootstrap, topic, (f"new{i}" for i in range(120)))
    with pytest.raises(Exception) as info:
        run_available_now(spark, "kafka_loss_2", scratch / "ckpt", **options)
    message = str(info.value)
    assert f"{topic}-0" in message and "500" in message and "120" in message
    assert "failOnDataLoss" in message
    # failOnDataLoss=false: a warning, and the query continues with what exists.
    run_available_now(spark, "kafka_loss_3", scratch / "ckpt", **options, failOnDataLoss=False)
    assert sorted(values_of(spark, "kafka_loss_3")) == sorted(new)


def test_read_never_hangs_on_missing_offsets(kafka_bootstrap: str, new_topic) -> None:  # type: ignore[no-untyped-def]
    """A task asked for offsets that do not exist stops within the bounded wait."""
    from kappaplus.connectors.kafka.reader import DataLoss, read_range

    topic = new_topic()
    produce(kafka_bootstrap, topic, (str(i) for i in range(300)))

    def options(fail: bool) -> KafkaSourceOptions:
        return KafkaSourceOptions.parse(
            {
                "kafka.bootstrap.servers": kafka_bootstrap,
                "subscribe": topic,
                "kafkaConsumer.pollTimeoutMs": "1500",
                "failOnDataLoss": str(fail).lower(),
            }
        )

    exact = [b for b in read_range(options(True), OffsetRange(topic, 0, 10, 300))]
    assert [o for b in exact for o in b.column("offset").to_pylist()] == list(range(10, 300))
    for rng in (OffsetRange(topic, 0, 250, 400), OffsetRange(topic, 0, 500, 600)):
        started = time.monotonic()
        with pytest.raises(DataLoss) as info:
            list(read_range(options(True), rng))
        assert time.monotonic() - started < 20
        assert f"{topic}-0" in str(info.value) and str(rng.until_offset) in str(info.value)
        rows = [o for b in read_range(options(False), rng) for o in b.column("offset").to_pylist()]
        assert rows == list(range(rng.from_offset, 300))


def test_a_read_pass_runs_where_the_source_reads(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    def upper_values(batches):  # type: ignore[no-untyped-def]
        """Each record's value upper-cased, with its partition and offset (a function of
        the test: pickled by value for the source's worker)."""
        for batch in batches:
            values = pc.utf8_upper(pc.cast(batch.column("value"), pa.string()))
            yield pa.RecordBatch.from_arrays(
                [values, batch.column("partition"), batch.column("offset")],
                names=["upper", "partition", "offset"],
            )

    topic = new_topic(partitions=2)
    sent = produce(kafka_bootstrap, topic, (f"v{i}" for i in range(3000)), partitions=2)
    schema = StructType(
        [
            StructField("upper", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
        ]
    )
    df = read_kafka_stream(
        spark,
        read_pass=upper_values,
        schema=schema,
        bootstrap=kafka_bootstrap,
        subscribe=topic,
        startingOffsets="earliest",
        maxOffsetsPerTrigger=1000,
        alignPartitions="false",  # the even split: three batches of 1,000
    )
    assert df.schema == schema
    query = (
        df.writeStream.format("memory")
        .queryName("kafka_read_pass")
        .option("checkpointLocation", str(scratch / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None
    rows = spark.sql("SELECT * FROM kafka_read_pass").collect()
    assert sorted(r.upper for r in rows) == sorted(v.upper() for v in sent)
    assert len({(r.partition, r.offset) for r in rows}) == len(sent) == 3000
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [1000] * 3
    with pytest.raises(TypeError, match="read_pass needs the schema"):
        read_kafka_stream(spark, read_pass=upper_values, bootstrap=kafka_bootstrap, subscribe=topic)
