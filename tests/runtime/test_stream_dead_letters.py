"""A stream run's dead letters ride on its output queries: no query of their own.

Two Kafka inputs with known bad records (undecodable values, a wrong type, an event time
outside the sanity bounds): ``a`` keeps its dead letters in a Hive table, ``b`` in a Kafka
topic. Two outputs in this order: ``requests`` reads only ``b``, ``everything`` reads both.
So ``b``'s dead letters are published by ``requests`` and ``a``'s by ``everything`` (the
first output that reads each), and ``everything`` passes over ``b``'s dead letters without
publishing them. The dead-letter table and topic hold exactly the bad records, once each,
with their reasons; one query ran per output; the outputs equal the good records; and a
replayed batch replaces its dead letters in the table instead of adding them again.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQueryListener
from runtime_helpers import consume_topic, uid

from kappaplus.config import config_from_dict
from kappaplus.dead_letters.targets import dlq_key, parse_dlq_message
from kappaplus.examples.generate import RIDER_EVENT_DDL, rider_events, to_json, without_arrival
from kappaplus.jobs import InputSpec, Job, OutputSpec, Params
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job

PARTITIONS = 2
BATCH = 12
BAD = [
    (b"not json", "invalid JSON"),
    (b'{"event_id": "typo", "event_time": "yesterday"}', "field 'event_time'"),
    (b"[1, 2]", "expected a JSON object"),
    (b'{"event_id": "far", "rider_id": "r", "event_time": "9999-12-31T00:00:00Z"}', "max_future"),
]
"""Bad record values and a piece of the reason each must carry."""


def split(inputs: Mapping[str, DataFrame], params: Params) -> dict[str, DataFrame]:
    columns = ["event_id", "rider_id", "event_type", "event_time"]
    return {
        "requests": inputs["b"].where(F.col("event_type") == "request_trip").select(*columns),
        "everything": inputs["a"].select(*columns).unionByName(inputs["b"].select(*columns)),
    }


JOB = Job(
    name="dead-letter-split",
    description="Two outputs over two inputs, to see who publishes which dead letters.",
    inputs=[
        InputSpec("a", RIDER_EVENT_DDL, "event_time"),
        InputSpec("b", RIDER_EVENT_DDL, "event_time"),
    ],
    outputs=[
        OutputSpec("requests", event_time_column="event_time"),
        OutputSpec("everything", event_time_column="event_time"),
    ],
    transform=split,
    watermark_delay="1 minute",
)


def produce_values(bootstrap: str, topic: str, values: list[bytes]) -> dict[tuple[int, int], int]:
    """Produce ``values`` round-robin over the partitions, in order; return
    ``{(partition, offset): index}`` from the delivery reports."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 0})
    placed: dict[tuple[int, int], int] = {}

    def report(index: int) -> Any:
        def on_delivery(err: Any, msg: Any) -> None:
            assert err is None, err
            placed[(msg.partition(), msg.offset())] = index

        return on_delivery

    for i, value in enumerate(values):
        producer.produce(topic, value=value, partition=i % PARTITIONS, on_delivery=report(i))
        producer.poll(0)
    assert producer.flush(30) == 0
    assert len(placed) == len(values)
    return placed


class Started(StreamingQueryListener):
    """The names of the streaming queries started while it listens."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's name
        self.names.append(str(event.name))

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        pass

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        pass


def remove_last_commit(checkpoint: Path) -> int:
    """Forget that the query's last batch was committed (a crash just before Spark's
    commit), so the next run replays it."""
    commits = checkpoint / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    return last


def test_dead_letters_are_written_by_the_output_queries_once_each(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    topics = {name: new_topic(partitions=PARTITIONS, prefix=f"dl-{name}") for name in "ab"}
    dlq_topic, dlq_table = new_topic(prefix="dl-b-dlq"), f"dl_a_dlq_{uid()}"
    tables = {"requests": f"dl_requests_{uid()}", "everything": f"dl_everything_{uid()}"}
    good: dict[str, list[dict[str, Any]]] = {}
    placed: dict[str, dict[tuple[int, int], int]] = {}
    values: dict[str, list[bytes]] = {}
    for seed, name in enumerate("ab"):
        events = without_arrival(
            # a is the longer topic: the last batch of `everything` always reads a's last records
            rider_events(riders=6, start="2024-03-01T00:00:00", hours=5 - seed * 2, seed=seed + 3)
        )
        for e in events:
            e["event_id"] = f"{name}-{e['event_id']}"
        good[name] = events
        # bad records early and at the very end: the last batch of each query has some
        values[name] = (
            [v for v, _ in BAD[:2]] + [to_json(e) for e in events] + [v for v, _ in BAD[2:]]
        )
        placed[name] = produce_values(kafka_bootstrap, topics[name], values[name])
    kafka = {"bootstrap_servers": kafka_bootstrap, "starting_offsets": "earliest"}
    config = config_from_dict(
        {
            "checkpoint_dir": str(scratch / "checkpoints"),
            "inputs": {
                "a": {
                    "kafka": {
                        **kafka,
                        "topic": topics["a"],
                        "maxOffsetsPerTrigger": BATCH,
                        # batches of BATCH records however the record timestamps fall (under
                        # load, aligned cuts can make b's batches more than a's)
                        "alignPartitions": False,
                        "dlq": {"table": dlq_table},
                    }
                },
                "b": {
                    "kafka": {
                        **kafka,
                        "topic": topics["b"],
                        "maxOffsetsPerTrigger": BATCH,
                        "alignPartitions": False,
                        "dlq": {"topic": dlq_topic},
                    }
                },
            },
            "outputs": {name: {"hive": {"table": table}} for name, table in tables.items()},
        }
    )
    started = Started()
    spark.streams.addListener(started)
    try:
        stream = run_job(spark, JOB, config, RunOptions("stream", trigger="available-now"))
    finally:
        spark.streams.removeListener(started)
    assert stream.status == "finished"

    # one streaming query per output, and no other
    query_names = {plan.query_name for plan in stream.plans.values()}
    assert sorted(started.names) == sorted(query_names), started.names
    assert set(stream.queries) == set(stream.record.checkpoints) == set(tables)

    # the outputs hold exactly the good records, once each
    def rows(table: str) -> list[tuple[str, int]]:
        df = spark.table(table).select("event_id", F.unix_micros("event_time"))
        return [(r[0], r[1]) for r in df.collect()]

    def truth(events: list[dict[str, Any]]) -> list[tuple[str, int]]:
        return [(e["event_id"], int(e["event_time"].timestamp() * 1_000_000)) for e in events]

    requests = [e for e in good["b"] if e["event_type"] == "request_trip"]
    assert sorted(rows(tables["requests"])) == sorted(truth(requests))
    assert sorted(rows(tables["everything"])) == sorted(truth(good["a"] + good["b"]))

    # input a: its dead-letter table holds exactly its bad records, once each, with reasons
    def bad_of(name: str) -> dict[tuple[int, int], tuple[bytes, str]]:
        """(partition, offset) -> (value, reason piece) of the input's bad records."""
        last = len(values[name]) - 1
        which = {0: 0, 1: 1, last - 1: 2, last: 3}  # index in the topic -> index in BAD
        return {pos: BAD[which[i]] for pos, i in placed[name].items() if i in which}

    def dead_table() -> list[Any]:
        spark.catalog.refreshTable(dlq_table)  # the run replaced partitions since last read
        return spark.table(dlq_table).collect()

    expected_a = bad_of("a")
    letters = dead_table()
    assert len(letters) == len(expected_a) == len(BAD)
    by_position = {(r.partition, r.offset): r for r in letters}
    assert set(by_position) == set(expected_a)
    for position, (value, reason) in expected_a.items():
        row = by_position[position]
        assert bytes(row.value) == value and row.topic == topics["a"]
        assert row.reason and reason in row.reason, row.reason
        assert row.job == JOB.name

    # input b: its dead-letter topic holds exactly its bad records, once each, keyed by
    # topic/partition/offset (published by `requests` only, not again by `everything`)
    expected_b = bad_of("b")
    messages = consume_topic(kafka_bootstrap, dlq_topic)
    keys = Counter(m.key() for m in messages)
    assert keys == Counter({dlq_key(topics["b"], p, o): 1 for p, o in expected_b})
    for msg in messages:
        parsed = parse_dlq_message(msg.value())
        value, reason = expected_b[(parsed["partition"], parsed["offset"])]
        assert parsed["value"] == value and reason in parsed["reason"]

    # the run record counts them, from the query that wrote them
    for name, output in (("a", "everything"), ("b", "requests")):
        counts = stream.record.inputs[name]
        assert counts["records"] == len(values[name]), counts
        assert counts["dead"] + counts["out_of_bounds"] == len(BAD), counts  # 1 out of bounds
        assert counts["dead_letters_written"] == len(BAD), counts
        assert counts["good"] - counts["out_of_bounds"] == len(good[name]), counts
        assert counts["reconciled"] is True and counts["dead_letter_output"] == output, counts

    # a replayed batch (a crash before Spark's commit) republishes its dead letters into
    # the table: replaced, not added; its good rows are not written twice either
    replayed = remove_last_commit(Path(stream.record.checkpoints["everything"]))
    again = run_job(spark, JOB, config, RunOptions("stream", trigger="available-now"))
    assert again.status == "finished"
    assert [b.batch_id for b in again.tracker.stats["everything"].history] == [replayed]
    counts = again.record.inputs["a"]
    assert counts["dead_letters_written"] > 0 and counts["reconciled"] is True, counts
    assert sorted((r.partition, r.offset) for r in dead_table()) == sorted(expected_a)
    partitions = {r.dlq_batch for r in dead_table()}
    assert any(p.endswith(f"-{replayed}") for p in partitions), partitions
    assert sorted(rows(tables["everything"])) == sorted(truth(good["a"] + good["b"]))
    assert Counter(m.key() for m in consume_topic(kafka_bootstrap, dlq_topic)) == keys
    print(json.dumps({"replayed": replayed, "inputs": again.record.inputs}, default=str))


def union(inputs: Mapping[str, DataFrame], params: Params) -> dict[str, DataFrame]:
    columns = ["event_id", "rider_id", "event_type", "event_time"]
    return {"everything": inputs["a"].select(*columns).unionByName(inputs["b"].select(*columns))}


UNION_JOB = Job(
    name="dead-letter-defaults",
    description="One input without a dlq (the default topic), one that discards explicitly.",
    inputs=[
        InputSpec("a", RIDER_EVENT_DDL, "event_time"),
        InputSpec("b", RIDER_EVENT_DDL, "event_time"),
    ],
    outputs=[OutputSpec("everything", event_time_column="event_time")],
    transform=union,
    watermark_delay="1 minute",
)


def test_without_a_dlq_dead_letters_go_to_the_topic_dot_dlq(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path, caplog
) -> None:
    """Defaults protect: an input without ``dlq`` keeps its bad records in ``<topic>.dlq``;
    only ``dlq = { discard = true }`` drops them, and the run's log says how many."""
    import logging

    topics = {name: new_topic(partitions=PARTITIONS, prefix=f"dd-{name}") for name in "ab"}
    table = f"dd_everything_{uid()}"
    good: list[dict[str, Any]] = []
    placed: dict[str, dict[tuple[int, int], int]] = {}
    values: dict[str, list[bytes]] = {}
    for seed, name in enumerate("ab"):
        events = without_arrival(
            rider_events(riders=4, start="2024-03-01T00:00:00", hours=2, seed=seed + 11)
        )
        for e in events:
            e["event_id"] = f"{name}-{e['event_id']}"
        good.extend(events)
        values[name] = [v for v, _ in BAD[:2]] + [to_json(e) for e in events]
        placed[name] = produce_values(kafka_bootstrap, topics[name], values[name])
    kafka = {"bootstrap_servers": kafka_bootstrap, "starting_offsets": "earliest"}
    config = config_from_dict(
        {
            "checkpoint_dir": str(scratch / "checkpoints"),
            "inputs": {
                "a": {"kafka": {**kafka, "topic": topics["a"]}},
                "b": {"kafka": {**kafka, "topic": topics["b"], "dlq": {"discard": True}}},
            },
            "outputs": {"everything": {"hive": {"table": table}}},
        }
    )
    with caplog.at_level(logging.WARNING, logger="kappaplus"):
        stream = run_job(spark, UNION_JOB, config, RunOptions("stream", trigger="available-now"))
    assert stream.status == "finished"
    got = spark.table(table).select("event_id").collect()
    assert sorted(r[0] for r in got) == sorted(e["event_id"] for e in good)

    # a: no dlq configured, its two bad records are in a.dlq, keyed by position, with reasons
    messages = consume_topic(kafka_bootstrap, f"{topics['a']}.dlq")
    bad_a = {pos: BAD[i] for pos, i in placed["a"].items() if i < 2}
    assert Counter(m.key() for m in messages) == Counter(
        {dlq_key(topics["a"], p, o): 1 for p, o in bad_a}
    )
    for msg in messages:
        parsed = parse_dlq_message(msg.value())
        value, reason = bad_a[(parsed["partition"], parsed["offset"])]
        assert parsed["value"] == value and reason in parsed["reason"]
    assert stream.record.inputs["a"]["dead_letters_written"] == 2, stream.record.inputs

    # b: discarded as configured, counted, and the log says so with the count
    assert stream.record.inputs["b"]["dead"] == 2, stream.record.inputs
    said = [r.getMessage() for r in caplog.records if "discarded" in r.getMessage()]
    assert any("input b: 2 record(s)" in s for s in said), said
