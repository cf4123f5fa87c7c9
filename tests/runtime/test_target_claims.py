"""No Hive target holds two runs' rows for one event-time range unless the user asks for it
(issue 24, item 1): two backfill configs reading the same files under two registered names
over overlapping ranges used to write the overlap twice (exit 0); now the second run is
refused naming the table, the other run and its range, unless ``--append`` (deliberate
duplicates) or ``--replace-range``; a resumed run is never refused."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from runtime_helpers import micros, table_rows, uid

from kappaplus.config import config_from_dict
from kappaplus.examples.generate import RIDER_EVENT_DDL, rider_events, write_table
from kappaplus.jobs import InputSpec, Job, OutputSpec, Params
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job
from kappaplus.runtime.state.identity import IdentityError

DAY0 = "2024-03-01T00:00:00"
COLUMNS = ["area", "start", "count"]
HOUR = 3600 * 1_000_000


def counts(inputs: Mapping[str, DataFrame], params: Params) -> dict[str, DataFrame]:
    """Events per area in 30-minute tumbling windows (aligned on the hour: ranges that
    start on the hour cut no window)."""
    per_window = inputs["events"].groupBy(F.window("event_time", "30 minutes"), "area").count()
    return {"counts": per_window.select("area", F.col("window.start").alias("start"), "count")}


JOB = Job(
    name="area-counts",
    inputs=[InputSpec("events", RIDER_EVENT_DDL, "event_time")],
    outputs=[OutputSpec("counts", event_time_column="start")],
    transform=counts,
    watermark_delay="10 minutes",
)


def _at(hour: int) -> str:
    return f"2024-03-01T{hour:02d}:00:00"


def _config(scratch: Path, table: str, out: str) -> Any:
    return config_from_dict(
        {
            "checkpoint_dir": str(scratch / "ckpt"),
            "inputs": {
                "events": {
                    "hive": {
                        "table": table,
                        "event_time_column": "event_time",
                        "maxEventTimePerTrigger": "1 hour",
                    }
                }
            },
            "outputs": {"counts": {"hive": {"table": out}}},
        }
    )


def _truth(events: list[dict[str, Any]], start: int, end: int) -> Counter[tuple[Any, ...]]:
    """(area, window start us, count) of the events in [start h, end h), by hand."""
    base = micros(events[0]["event_time"].replace(hour=0, minute=0, second=0, microsecond=0))
    windows: Counter[tuple[str, int]] = Counter()
    for event in events:
        at = micros(event["event_time"])
        if base + start * HOUR <= at < base + end * HOUR:
            windows[(event["area"], at - (at - base) % (HOUR // 2))] += 1
    return Counter((area, begin, n) for (area, begin), n in windows.items())


def _two_names(spark: Any, events: list[dict[str, Any]]) -> tuple[str, str]:
    """One set of files registered under two table names."""
    first, second = f"ev_a_{uid()}", f"ev_b_{uid()}"
    write_table(spark, first, events, RIDER_EVENT_DDL)
    location = (
        spark.sql(f"DESCRIBE TABLE EXTENDED {first}").where("col_name = 'Location'").collect()[0][1]
    )
    spark.sql(
        f"CREATE TABLE {second} ({RIDER_EVENT_DDL}, dt string, hr string) USING parquet "
        f"PARTITIONED BY (dt, hr) LOCATION '{location}'"
    )
    spark.sql(f"ALTER TABLE {second} RECOVER PARTITIONS")
    assert spark.table(second).count() == len(events)
    return first, second


@pytest.fixture
def setting(spark, scratch: Path):  # type: ignore[no-untyped-def]
    """Events over 12 hours under two names, and a finished backfill of the first name
    over [00:00, 06:00) into the output table."""
    events = rider_events(riders=15, start=DAY0, hours=12, seed=24)
    first, second = _two_names(spark, events)
    out = f"counts_{uid()}"
    done = run_job(
        spark,
        JOB,
        _config(scratch, first, out),
        RunOptions("backfill", _at(0), _at(6), poll_seconds=0.2),
    )
    assert done.status == "finished"
    table = f"{out}_backfill"
    assert Counter(table_rows(spark, table, COLUMNS)) == _truth(events, 0, 6)
    return events, second, out, table, done


@pytest.mark.slow
def test_an_overlapping_backfill_of_another_config_is_refused_unless_append(  # type: ignore[no-untyped-def]
    spark, scratch: Path, setting
) -> None:
    events, second, out, table, first = setting
    config = _config(scratch, second, out)
    overlapping = RunOptions("backfill", _at(3), _at(9), poll_seconds=0.2)
    with pytest.raises(IdentityError) as caught:
        run_job(spark, JOB, config, overlapping)
    message = str(caught.value)
    assert caught.value.exit_code == 2
    assert table in message and first.plans["counts"].query_name in message
    assert "2024-03-01T00:00:00" in message and "--replace-range" in message
    assert "--append" in message and "another table" in message
    assert Counter(table_rows(spark, table, COLUMNS)) == _truth(events, 0, 6), "nothing ran"

    # --append: deliberate, both runs' rows stay (the overlap twice)
    appended = run_job(
        spark,
        JOB,
        config,
        RunOptions("backfill", _at(3), _at(9), poll_seconds=0.2, append=True),
    )
    assert appended.status == "finished"
    rows = Counter(table_rows(spark, table, COLUMNS))
    assert rows == _truth(events, 0, 6) + _truth(events, 3, 9)
    assert any(n > 1 for n in rows.values()), "the overlap is there twice, as asked"


@pytest.mark.slow
def test_a_resumed_run_is_not_refused(  # type: ignore[no-untyped-def]
    spark, scratch: Path, setting
) -> None:
    """An --append run stopped part way (Ctrl-C) and run again WITHOUT the flag resumes:
    the table holds the other run's rows over its range, but the decision was taken before
    its first batch."""
    events, second, out, table, first = setting
    config = _config(scratch, second, out)
    done = threading.Event()
    theirs = Path(first.record.checkpoints["counts"])

    def interrupt() -> None:
        deadline = time.monotonic() + 300
        while not done.is_set() and time.monotonic() < deadline:
            found = (scratch / "ckpt").glob("area-counts/backfill/*/counts/commits/1")
            if any(path.parents[1] != theirs for path in found):
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=interrupt, daemon=True)
    watcher.start()
    try:
        stopped = run_job(
            spark,
            JOB,
            config,
            RunOptions("backfill", _at(3), _at(9), poll_seconds=0.2, append=True),
        )
    finally:
        done.set()
        watcher.join()
    assert stopped.status == "stopped"
    resumed = run_job(spark, JOB, config, RunOptions("backfill", _at(3), _at(9), poll_seconds=0.2))
    assert resumed.status == "finished"
    history = resumed.tracker.stats["counts"].history
    assert history and min(b.batch_id for b in history) >= 2, "resumed, not started over"
    rows = Counter(table_rows(spark, table, COLUMNS))
    assert rows == _truth(events, 0, 6) + _truth(events, 3, 9), "each run's windows once"


def test_spans_decide_the_overlap() -> None:
    """Pure Python: a run's recorded span (its rows' event times) decides; without one,
    its configured range; an adjacent range shares nothing; a stream overlaps everything."""
    from kappaplus.connectors.hive.commits import CommittedRun
    from kappaplus.runtime.state.target_claims import extent_of, overlaps, run_span

    backfill = {"range": {"start": _at(0), "end": _at(6)}}
    last_window = micros_of(_at(5)) + HOUR // 2
    recorded = CommittedRun("q", 12, backfill, (micros_of(_at(0)), last_window))
    assert not overlaps(extent_of(recorded), run_span({"start": _at(6), "end": _at(12)}))
    assert overlaps(extent_of(recorded), run_span({"start": _at(5), "end": _at(12)}))
    old = CommittedRun("q", 12, backfill, None)  # markers from before spans were recorded
    assert extent_of(old) == (micros_of(_at(0)), micros_of(_at(6)))
    assert overlaps(extent_of(recorded), run_span({}))  # a stream: no end, no start
    bootstrap = run_span({"start": _at(2), "cutoff": _at(4)})  # continues on Kafka
    assert bootstrap == (micros_of(_at(2)), None)


def micros_of(text: str) -> int:
    from kappaplus.core.timeutil import parse_timestamp

    return parse_timestamp(text)


@pytest.mark.slow
def test_replace_range_leaves_the_union_once(  # type: ignore[no-untyped-def]
    spark, scratch: Path, setting
) -> None:
    """--replace-range: while the run writes, readers see the old rows only; when it
    finishes, the other run's rows over [03:00, 09:00) are replaced by this run's in one
    metastore call: the table equals the ground truth of [00:00, 09:00), no key twice. A
    later overlapping run is no longer refused for the rows that are gone."""
    events, second, out, table, first = setting
    config = _config(scratch, second, out)
    seen_during: list[Counter[tuple[Any, ...]]] = []
    done = threading.Event()
    theirs = Path(first.record.checkpoints["counts"])

    def watch() -> None:  # what a reader sees while the replacing run commits batches
        deadline = time.monotonic() + 300
        while not done.is_set() and time.monotonic() < deadline:
            found = (scratch / "ckpt").glob("area-counts/backfill/*/counts/commits/2")
            if any(path.parents[1] != theirs for path in found):
                seen_during.append(Counter(table_rows(spark, table, COLUMNS)))
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        replaced = run_job(
            spark,
            JOB,
            config,
            RunOptions("backfill", _at(3), _at(9), poll_seconds=0.2, replace_range=True),
        )
    finally:
        done.set()
        watcher.join()
    assert replaced.status == "finished"
    assert seen_during == [_truth(events, 0, 6)], "the run's batches are held until the swap"
    rows = Counter(table_rows(spark, table, COLUMNS))
    assert rows == _truth(events, 0, 9)
    keys = Counter((area, start) for area, start, _ in rows.elements())
    assert all(n == 1 for n in keys.values()), "no window twice"

    # running the finished command again changes nothing (the replacement is done)
    again = run_job(spark, JOB, config, RunOptions("backfill", _at(3), _at(9), poll_seconds=0.2))
    assert again.status == "finished"
    assert Counter(table_rows(spark, table, COLUMNS)) == _truth(events, 0, 9)

    # the first run's rows over [03:00, 06:00) are gone: a third config over [04:00, 09:00)
    # is refused for this run's rows only (the first run's left end at 03:00)
    third = _config(scratch, first_name(spark, second), out)
    with pytest.raises(IdentityError) as caught:
        run_job(spark, JOB, third, RunOptions("backfill", _at(4), _at(9), poll_seconds=0.2))
    message = str(caught.value)
    assert replaced.plans["counts"].query_name in message
    assert first.plans["counts"].query_name not in message and "more)" not in message


def first_name(spark: Any, table: str) -> str:
    """A third registered name of the files ``table`` reads."""
    location = (
        spark.sql(f"DESCRIBE TABLE EXTENDED {table}").where("col_name = 'Location'").collect()[0][1]
    )
    name = f"ev_c_{uid()}"
    spark.sql(
        f"CREATE TABLE {name} ({RIDER_EVENT_DDL}, dt string, hr string) USING parquet "
        f"PARTITIONED BY (dt, hr) LOCATION '{location}'"
    )
    spark.sql(f"ALTER TABLE {name} RECOVER PARTITIONS")
    return name


@pytest.mark.slow
def test_a_corrected_topic_does_not_rewrite_a_bootstraps_rows(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    """Issue 24, item 1: a bootstrap wrote the production table; the config's topic was
    corrected (a new binding: a new identity and checkpoint) and the same command run again
    used to write the lake phase's windows a second time (exit 0). Now refused, and so is a
    backfill into that table over the event times the bootstrap's rows cover."""
    from kappaplus.examples.generate import arrival_order, produce

    events = rider_events(riders=10, start=DAY0, hours=6, seed=7, late_fraction=0.0)
    lake, table = [e for e in events if e["event_time"] < _ts(5)], f"lake_{uid()}"
    write_table(spark, table, lake, RIDER_EVENT_DDL)
    kafka = [e for e in arrival_order(events) if e["arrival_time"] >= _ts(4)]
    wrong, right = new_topic(prefix="wrong"), new_topic(prefix="right")
    produce(kafka_bootstrap, wrong, kafka)
    produce(kafka_bootstrap, right, kafka)
    out = f"counts_{uid()}"

    def config(topic: str) -> Any:
        return config_from_dict(
            {
                "checkpoint_dir": str(scratch / "ckpt"),
                "inputs": {
                    "events": {
                        "kafka": {"topic": topic, "bootstrap_servers": kafka_bootstrap},
                        "hive": {"table": table, "event_time_column": "event_time"},
                    }
                },
                "outputs": {"counts": {"hive": {"table": out, "backfill_table": out}}},
            }
        )

    boot = RunOptions("bootstrap", start=DAY0, cutoff=_at(5), trigger="available-now")
    first = run_job(spark, JOB, config(wrong), boot)
    assert first.status == "finished"
    written = Counter(table_rows(spark, out, COLUMNS))
    assert written and all(n == 1 for n in written.values())

    with pytest.raises(IdentityError) as caught:
        run_job(spark, JOB, config(right), boot)
    assert out in str(caught.value) and first.plans["counts"].query_name in str(caught.value)
    with pytest.raises(IdentityError) as caught:
        run_job(spark, JOB, config(right), RunOptions("backfill", _at(1), _at(3)))
    assert "bootstrap" in str(caught.value) and "--replace-range" in str(caught.value)
    assert Counter(table_rows(spark, out, COLUMNS)) == written, "nothing written twice"


def _ts(hour: int) -> Any:
    from datetime import UTC, datetime

    return datetime(2024, 3, 1, hour, tzinfo=UTC)


@pytest.mark.slow
def test_a_crash_before_the_swap_leaves_the_old_rows_and_the_rerun_finishes_it(  # type: ignore[no-untyped-def]
    spark, scratch: Path, setting, monkeypatch
) -> None:
    """The replacement crashes right before its one metastore call (every new directory
    written, the held files moved): readers see the old rows, exactly once; the same
    command run again (without the flag: the intent is kept beside the checkpoint) rolls
    the journal forward and the table equals the ground truth over [00:00, 09:00)."""
    import kappaplus.runtime.state.range_replace as range_replace

    events, second, out, table, _ = setting
    config = _config(scratch, second, out)

    def crash(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("killed before the swap")

    monkeypatch.setattr(range_replace, "alter_locations", crash)
    options = RunOptions("backfill", _at(3), _at(9), poll_seconds=0.2, replace_range=True)
    with pytest.raises(RuntimeError, match="killed before the swap"):
        run_job(spark, JOB, config, options)
    spark.catalog.refreshTable(table)
    assert Counter(table_rows(spark, table, COLUMNS)) == _truth(events, 0, 6), "old rows only"

    monkeypatch.undo()
    again = run_job(spark, JOB, config, RunOptions("backfill", _at(3), _at(9), poll_seconds=0.2))
    assert again.status == "finished"
    rows = Counter(table_rows(spark, table, COLUMNS))
    assert rows == _truth(events, 0, 9)


def test_the_flags_are_checked_before_spark() -> None:
    """--append and --replace-range exclude each other; --replace-range needs a bounded
    backfill: exit 2 in one line, before a session starts."""
    from typer.testing import CliRunner

    from kappaplus.cli import app

    runner = CliRunner()
    helped = runner.invoke(app, ["run", "--help"], terminal_width=200)
    assert "--append" in helped.output and "--replace-range" in helped.output
    both = runner.invoke(
        app,
        ["run", "sessionization", "--mode", "backfill", "--append", "--replace-range"],
    )
    assert both.exit_code == 2 and "pass one of the two" in both.output
    stream = runner.invoke(app, ["run", "sessionization", "--mode", "stream", "--replace-range"])
    assert stream.exit_code == 2 and "--mode backfill" in stream.output
    assert "Traceback" not in both.output + stream.output


@pytest.mark.slow
def test_replacing_a_replacement(  # type: ignore[no-untyped-def]
    spark, scratch: Path, setting
) -> None:
    """A run that replaced [03:00, 09:00) has its rows partly inside the first run's
    partitions (moved there by the swap); a third run replacing [04:00, 09:00) must find
    them there: the table equals the ground truth over [00:00, 09:00), no window twice."""
    events, second, out, table, first = setting
    options = RunOptions("backfill", _at(3), _at(9), poll_seconds=0.2, replace_range=True)
    replaced = run_job(spark, JOB, _config(scratch, second, out), options)
    assert replaced.status == "finished"
    third = _config(scratch, first_name(spark, second), out)
    later = RunOptions("backfill", _at(4), _at(9), poll_seconds=0.2, replace_range=True)
    again = run_job(spark, JOB, third, later)
    assert again.status == "finished"
    rows = Counter(table_rows(spark, table, COLUMNS))
    assert rows == _truth(events, 0, 9)


# -- Kafka targets ------------------------------------------------------------------------


def _topic_config(scratch: Path, table: str, topic: str, bootstrap: str) -> Any:
    """The job of ``_config`` writing its counts to a Kafka topic (a backfill writes
    ``topic`` itself: its ``backfill_topic``)."""
    return config_from_dict(
        {
            "checkpoint_dir": str(scratch / "ckpt"),
            "inputs": {
                "events": {
                    "hive": {
                        "table": table,
                        "event_time_column": "event_time",
                        "maxEventTimePerTrigger": "1 hour",
                    }
                }
            },
            "outputs": {
                "counts": {
                    "kafka": {
                        "topic": f"{topic}-prod",
                        "backfill_topic": topic,
                        "bootstrap_servers": bootstrap,
                    }
                }
            },
        }
    )


def _topic_rows(bootstrap: str, topic: str) -> list[tuple[str | None, tuple[Any, ...]]]:
    """(query header, (area, window start us, count)) of every record of ``topic``."""
    import json
    from datetime import datetime

    from runtime_helpers import consume_topic

    found = []
    for message in consume_topic(bootstrap, topic, idle=2.0):
        row = json.loads(message.value())
        start = micros(datetime.fromisoformat(row["start"].replace("Z", "+00:00")))
        headers = dict(message.headers() or [])
        query = headers.get("kappa.query")
        found.append(
            (None if query is None else query.decode(), (row["area"], start, row["count"]))
        )
    return found


@pytest.fixture
def topic_setting(spark, scratch: Path, kafka_bootstrap: str, new_topic):  # type: ignore[no-untyped-def]
    """Events over 12 hours under two names, and a finished backfill of the first name
    over [00:00, 06:00) into a Kafka topic."""
    events = rider_events(riders=15, start=DAY0, hours=12, seed=24)
    first, second = _two_names(spark, events)
    topic = new_topic(prefix="counts")
    done = run_job(
        spark,
        JOB,
        _topic_config(scratch, first, topic, kafka_bootstrap),
        RunOptions("backfill", _at(0), _at(6), poll_seconds=0.2),
    )
    assert done.status == "finished"
    written = _topic_rows(kafka_bootstrap, topic)
    assert Counter(row for _, row in written) == _truth(events, 0, 6)
    return events, second, topic, done


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_an_overlapping_backfill_into_a_topic_is_refused_unless_append(  # type: ignore[no-untyped-def]
    spark, scratch: Path, kafka_bootstrap: str, topic_setting
) -> None:
    """Issue 24, item 1, with a Kafka target: the same job bound to a second registered
    name of the same files, backfilled over [03:00, 09:00) into the topic a first backfill
    wrote over [00:00, 06:00), used to produce the overlap a second time (exit 0). Now it
    is refused (exit 2) naming the topic, the other query and its span, with the topic
    unchanged; --append doubles the overlap deliberately, each record naming its query."""
    events, second, topic, first = topic_setting
    config = _topic_config(scratch, second, topic, kafka_bootstrap)
    before = _topic_rows(kafka_bootstrap, topic)
    with pytest.raises(IdentityError) as caught:
        run_job(spark, JOB, config, RunOptions("backfill", _at(3), _at(9), poll_seconds=0.2))
    message = str(caught.value)
    assert caught.value.exit_code == 2
    assert f"topic {topic}" in message and first.plans["counts"].query_name in message
    assert "2024-03-01T00:00:00" in message and "2024-03-01T05:30:00" in message
    assert "--append" in message and "another topic" in message
    assert "Resume that run" in message
    assert _topic_rows(kafka_bootstrap, topic) == before, "nothing produced"
    assert {query for query, _ in before} == {first.plans["counts"].query_name}

    # --replace-range cannot take records out of a topic: refused too, saying so
    with pytest.raises(IdentityError, match="cannot remove records from a Kafka topic"):
        run_job(
            spark,
            JOB,
            config,
            RunOptions("backfill", _at(3), _at(9), poll_seconds=0.2, replace_range=True),
        )

    appended = run_job(
        spark,
        JOB,
        config,
        RunOptions("backfill", _at(3), _at(9), poll_seconds=0.2, append=True),
    )
    assert appended.status == "finished"
    rows = _topic_rows(kafka_bootstrap, topic)
    assert Counter(row for _, row in rows) == _truth(events, 0, 6) + _truth(events, 3, 9)
    by_query = Counter(query for query, _ in rows)
    assert by_query == {
        first.plans["counts"].query_name: sum(_truth(events, 0, 6).values()),
        appended.plans["counts"].query_name: sum(_truth(events, 3, 9).values()),
    }

    # an adjacent range shares no event time with either run: not refused
    later = run_job(
        spark,
        JOB,
        _topic_config(scratch, first_name(spark, second), topic, kafka_bootstrap),
        RunOptions("backfill", _at(9), _at(12), poll_seconds=0.2),
    )
    assert later.status == "finished"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_resumed_run_into_a_topic_is_not_refused(  # type: ignore[no-untyped-def]
    spark, scratch: Path, kafka_bootstrap: str, topic_setting
) -> None:
    """An --append run into the topic, stopped part way (Ctrl-C), run again WITHOUT the
    flag, resumes: its own claim says it was checked before its first batch."""
    events, second, topic, first = topic_setting
    config = _topic_config(scratch, second, topic, kafka_bootstrap)
    done = threading.Event()
    theirs = Path(first.record.checkpoints["counts"])

    def interrupt() -> None:
        deadline = time.monotonic() + 300
        while not done.is_set() and time.monotonic() < deadline:
            found = (scratch / "ckpt").glob("area-counts/backfill/*/counts/commits/1")
            if any(path.parents[1] != theirs for path in found):
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=interrupt, daemon=True)
    watcher.start()
    try:
        stopped = run_job(
            spark,
            JOB,
            config,
            RunOptions("backfill", _at(3), _at(9), poll_seconds=0.2, append=True),
        )
    finally:
        done.set()
        watcher.join()
    assert stopped.status == "stopped"
    resumed = run_job(spark, JOB, config, RunOptions("backfill", _at(3), _at(9), poll_seconds=0.2))
    assert resumed.status == "finished"
    assert resumed.plans["counts"].query_name == stopped.plans["counts"].query_name
    history = resumed.tracker.stats["counts"].history
    assert history and min(b.batch_id for b in history) >= 2, "resumed, not started over"
    # at least once: a batch replayed after the stop may be produced again, with the same
    # key; each run's distinct records are its windows, once
    mine = {
        row
        for query, row in _topic_rows(kafka_bootstrap, topic)
        if query == resumed.plans["counts"].query_name
    }
    assert Counter(mine) == _truth(events, 3, 9)
