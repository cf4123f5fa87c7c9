"""Clean failures: one or two lines naming the file or key and the way out, checked as
early as possible; credentials never echoed; nothing left behind in the staging area."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from runtime_helpers import example_config, sessions_by_hand, table_rows, uid
from typer.testing import CliRunner

from kappaplus.cli import app
from kappaplus.core.errors import ConfigError, KappaError
from kappaplus.examples import sessionization
from kappaplus.examples.generate import RIDER_EVENT_DDL, rider_events, write_table
from kappaplus.runtime.failures import CheckpointError, check_checkpoint_files, explain
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job
from kappaplus.session import with_task_retries


def _query_checkpoint(root: Path) -> Path:
    query = root / "sessions"
    (query / "offsets").mkdir(parents=True)
    (query / "commits").mkdir()
    (query / "metadata").write_text('{"id":"8f0e"}\n')
    (query / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0}\n{"done":0.5}\n')
    (query / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    return query


def test_a_truncated_offsets_file_is_named_before_spark(tmp_path: Path) -> None:
    query = _query_checkpoint(tmp_path)
    check_checkpoint_files(tmp_path)  # intact: nothing to say
    (query / "offsets" / "1").write_text('v1\n{"batchWatermarkMs":0}\n{"done":0.')
    with pytest.raises(CheckpointError) as caught:
        check_checkpoint_files(tmp_path)
    message = str(caught.value)
    # batch 1 never committed (no commits/1): the way out is to remove its plan, not --fresh
    # (which the targets refuse: they hold batch 0 already)
    assert str(query / "offsets" / "1") in message and "rm " in message
    assert str(query / "offsets" / ".1.crc") in message and "--fresh" not in message
    assert len(message.splitlines()) == 1
    (query / "offsets" / "1").write_text("")
    with pytest.raises(CheckpointError, match="empty or truncated"):
        check_checkpoint_files(tmp_path)
    # a damaged plan of a COMMITTED batch cannot be planned again: restore or start over
    (query / "offsets" / "1").unlink()
    (query / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0}\n{"done":0.')
    with pytest.raises(CheckpointError) as committed:
        check_checkpoint_files(tmp_path)
    assert "--fresh" in str(committed.value) and "rm " not in str(committed.value)


def test_following_the_advice_for_an_uncommitted_plan_recovers_exactly(  # type: ignore[no-untyped-def]
    spark, scratch: Path
) -> None:
    """Issue 24 item 7: after kill -9 a truncated, uncommitted ``offsets/N`` was reported
    with the advice ``--fresh``, which the targets then refused; removing the file (and its
    ``.crc``) recovers exactly, and the message now says so."""
    start, end = "2024-03-01T00:00:00", "2024-03-01T06:00:00"
    columns = ["rider_id", "session_start", "session_end", "event_count", "event_types"]
    events = rider_events(riders=8, start=start, hours=6, seed=11)
    table, out = f"ev_{uid()}", f"ses_{uid()}"
    write_table(spark, table, events, RIDER_EVENT_DDL)
    config = example_config(
        "sessionization",
        {
            "inputs": {"rider_events": {"hive": {"table": table}}},
            "outputs": {"sessions": {"hive": {"table": out}}},
            "mode": {
                "backfill": {
                    "watermark_delay": "1 hour",
                    "inputs": {"rider_events": {"hive": {"maxEventTimePerTrigger": "3 hours"}}},
                }
            },
        },
        scratch,
    )
    options = RunOptions("backfill", start, end, poll_seconds=0.2)
    first = run_job(spark, sessionization.JOB, config, options)
    assert first.status == "finished"
    query = Path(first.record.checkpoints["sessions"])
    batches = sorted(int(p.name) for p in (query / "offsets").iterdir() if p.name.isdigit())
    # a kill -9 while Spark wrote the plan of the next batch
    plan = query / "offsets" / str(batches[-1] + 1)
    shutil.copy(query / "offsets" / str(batches[-1]), plan)
    plan.write_text(plan.read_text()[:-7])
    with pytest.raises(CheckpointError) as caught:
        run_job(spark, sessionization.JOB, config, options)
    advice = str(caught.value)
    assert f"rm {plan} " in advice and "--fresh" not in advice
    plan.unlink()  # the advice, followed
    (plan.parent / f".{plan.name}.crc").unlink(missing_ok=True)
    again = run_job(spark, sessionization.JOB, config, options)
    assert again.status == "finished"
    rows = table_rows(spark, f"{out}_backfill", columns)
    assert len(rows) == len(set(rows)), "no row written twice"
    assert set(rows) == {r[:5] for r in sessions_by_hand(events, 30 * 60)}


def test_spark_failures_are_one_line_with_the_way_out() -> None:
    java = (
        "org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 ...\n"
        "Caused by: org.apache.spark.SparkException: Python worker failed to connect back.\n"
        + "\tat org.apache.spark.api.python.PythonWorkerFactory.x(Foo.scala:1)\n"
        * 40
    )
    line = explain(java)
    assert "\n" not in line and "connect back" in line and "same command again" in line
    assert with_task_retries("local[2]") == "local[2,4]"
    assert with_task_retries("local[*]") == "local[*,4]"
    assert with_task_retries("local[2,3]") == "local[2,3]"


def test_a_password_in_bootstrap_servers_is_never_echoed(tmp_path: Path) -> None:
    config = tmp_path / "job.toml"
    config.write_text(
        'job = "kappaplus.examples.sessionization:JOB"\n'
        "[inputs.rider_events.kafka]\n"
        'topic = "t"\n'
        'bootstrap_servers = "SASL_SSL://bob:hunter2@broker:9092"\n'
        "[outputs.sessions.hive]\n"
        'table = "o"\n'
    )
    result = CliRunner().invoke(app, ["run", "sessionization", "-c", str(config), "-m", "stream"])
    assert result.exit_code == 2, result.output
    assert "bootstrap_servers" in result.output and "hunter2" not in result.output


def test_an_unreachable_broker_is_one_line_naming_the_key_before_spark(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "job.toml"
    config.write_text(
        'job = "kappaplus.examples.sessionization:JOB"\n'
        "[inputs.rider_events.kafka]\n"
        'topic = "t"\n'
        f'bootstrap_servers = "127.0.0.1:{port}"\n'
        "[outputs.sessions.hive]\n"
        'table = "o"\n'
    )
    result = CliRunner().invoke(
        app, ["run", "sessionization", "-c", str(config), "-m", "stream"], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "inputs.rider_events.kafka.bootstrap_servers" in lines[0]
    assert f"cannot reach Kafka at 127.0.0.1:{port}" in lines[0]
    assert "Broker transport failure" in lines[0]
    assert "Traceback" not in result.output and "SparkSession" not in result.output


def test_partition_expr_is_parsed_before_the_first_batch(spark) -> None:  # type: ignore[no-untyped-def]
    from kappaplus.config import HiveOutput
    from kappaplus.jobs import OutputSpec
    from kappaplus.runtime.binding.outputs import OutputPlan, check_sql

    spec = OutputSpec("sessions")
    hive = HiveOutput(table="t", partition_expr="to_date(session_start")
    plan = OutputPlan("sessions", spec, None, hive, Path("/nonexistent"), "q")
    with pytest.raises(ConfigError) as caught:
        check_sql(spark, {"sessions": plan})
    assert "outputs.sessions.hive.partition_expr" in str(caught.value)
    assert len(str(caught.value).splitlines()) == 1
    good = HiveOutput(table="t", partition_expr="to_date(session_start)")
    check_sql(spark, {"sessions": OutputPlan("sessions", spec, None, good, Path("/x"), "q")})


def test_no_empty_staging_directory_is_left_behind(spark) -> None:  # type: ignore[no-untyped-def]
    from kappaplus.connectors.hive.commits import table_location
    from kappaplus.connectors.hive.sink import HiveTableSink
    from kappaplus.connectors.hive.sink_options import HiveSinkOptions

    table = f"staging_{uid()}"
    sink = HiveTableSink(HiveSinkOptions(table=table, query_name="q1", partition_column="dt"))
    batch = spark.createDataFrame([(1, "2024-01-01"), (2, "2024-01-02")], "id INT, dt STRING")
    assert sink.write_batch(batch, 0)
    location = Path(table_location(spark, table).removeprefix("file:"))
    assert not (location / "_kappa_staging" / "q1").exists()
    assert spark.table(table).count() == 2


def test_a_topic_that_does_not_exist_is_refused_before_any_query(
    spark: SparkSession, kafka_bootstrap: str, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 47 item 2: a stream on a topic that does not exist exited 0 after 10 s with 0
    rows and no warning, having created its empty output table. Refused (exit 2) naming the
    topic, the broker and `kappa topic create`, before Spark starts (``kappa run``) and
    before any query or table (``run_job``); the Kafka phase of a bootstrap alike."""
    from kappaplus.core.errors import TopicNotFound
    from kappaplus.local.broker import list_topics

    topic, out = f"no-such-topic-{uid()}", f"sessions_{uid()}"
    patch = {
        "inputs": {
            "rider_events": {"kafka": {"topic": topic, "bootstrap_servers": kafka_bootstrap}}
        },
        "outputs": {"sessions": {"hive": {"table": out}}},
    }
    cfg = example_config("sessionization", patch, scratch)
    for mode in ("stream", "bootstrap"):
        with pytest.raises(TopicNotFound) as refused:
            run_job(spark, sessionization.JOB, cfg, RunOptions(mode, trigger="available-now"))
        text = str(refused.value)
        assert refused.value.exit_code == 2 and len(text.splitlines()) == 1, text
        assert f"inputs.rider_events.kafka.topic: topic {topic!r} does not exist" in text, text
        assert kafka_bootstrap in text and f"kappa topic create {topic}" in text, text
        assert not spark.catalog.tableExists(out), mode
    assert topic not in list_topics(kafka_bootstrap)  # asking did not create it

    # kappa run: the same line, exit 2, before a session starts
    import kappaplus.session

    def no_spark(*args: object, **kwargs: object) -> None:
        raise AssertionError("Spark started")

    monkeypatch.setattr(kappaplus.session, "create_session", no_spark)
    config = scratch / "missing-topic.toml"
    config.write_text(
        'job = "kappaplus.examples.sessionization:JOB"\n'
        f'checkpoint_dir = "{scratch / "cli-checkpoints"}"\n'
        "[inputs.rider_events.kafka]\n"
        f'topic = "{topic}"\n'
        f'bootstrap_servers = "{kafka_bootstrap}"\n'
        "[outputs.sessions.hive]\n"
        f'table = "{out}"\n'
    )
    result = CliRunner().invoke(
        app, ["run", "sessionization", "-c", str(config), "-m", "stream"], env={"COLUMNS": "300"}
    )
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert f"topic {topic!r} does not exist at {kafka_bootstrap}" in lines[0], result.output
    assert "kappa topic create" in lines[0] and "Traceback" not in result.output


def test_a_python_sources_failure_is_told_by_its_exception(  # type: ignore[no-untyped-def]
    spark, tmp_path: Path
) -> None:
    """Spark passes a Python data source's traceback on in the query's failure; the one line
    names the exception (it ended at "Traceback (most recent call last):")."""
    from pyspark.errors import StreamingQueryException
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    from kappaplus.runtime.waiting import raise_if_failed

    class FailingReader(DataSourceStreamReader):
        def initialOffset(self) -> dict:  # type: ignore[type-arg]
            return {"n": 0}

        def latestOffset(self) -> dict:  # type: ignore[type-arg]
            raise ValueError("no end offset for topic t-0")

        def partitions(self, start: dict, end: dict) -> list:  # type: ignore[type-arg]
            return [InputPartition(0)]

        def read(self, partition):  # type: ignore[no-untyped-def]
            return iter(())

    class Failing(DataSource):
        @classmethod
        def name(cls) -> str:
            return "kappa_test_failing_latest"

        def schema(self) -> str:
            return "n int"

        def streamReader(self, schema):  # type: ignore[no-untyped-def]
            return FailingReader()

    spark.dataSource.register(Failing)
    query = (
        spark.readStream.format("kappa_test_failing_latest")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    with pytest.raises(StreamingQueryException):
        query.awaitTermination(120)
    with pytest.raises(KappaError) as info:
        raise_if_failed("failing", query, None)
    line = str(info.value)
    assert "\n" not in line
    assert "ValueError: no end offset for topic t-0" in line
    assert "latestOffset" in line
