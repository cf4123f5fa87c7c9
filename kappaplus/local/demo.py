"""``kappa demo``: the whole Kappa+ loop on the embedded stack, in a few minutes.

1. start the embedded stack: the Kafka-protocol broker and the Hive metastore server
   (so other processes -- ``kappa run``, ``kappa status`` -- see the same tables);
2. generate several days of rider app events with realistic disorder (every event up to
   a minute late) and late arrivals (some riders' ``rate_driver`` event hours late), plus
   two undecodable records, and produce them to Kafka in arrival order: as JSON, or as
   ``rides.v1.RiderEvent`` Protobuf messages (``kappa demo --format protobuf``), which every
   step below then reads with ``format = "protobuf"``;
3. archive the topic into the lake (``kappa archive``, Kafka coordinates kept, bad records
   in a dead letter table): a Hive table partitioned by event date/hour (``lake="hive"``,
   the default), an Iceberg table in the embedded catalog (``lake="iceberg"``) or a Delta
   table under the state directory (``lake="delta"``; the format is one strategy,
   :mod:`kappaplus.local.demo_lakes`);
4. run the rider sessionization job in ``stream`` mode from Kafka (small micro-batches,
   2-minute watermark: the late events are dropped, and counted);
5. backfill the same job and range from the lake (``backfill`` mode: 12-hour event-time
   slices, 2-hour watermark), into ``<table>_backfill``;
6. reconcile stream and backfill side by side: sessions identical / different / only
   in one, late events the backfill recovered vs the late rows the stream reported, the
   sessions still open in the stream, and where every output lives.

The same :data:`kappaplus.examples.sessionization.JOB` object runs in both modes; only
the bindings differ. Services keep running after the demo; ``kappa down`` stops them.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from kappaplus.core.modes import Mode
from kappaplus.core.settings import state_dir
from kappaplus.local.demo_lakes import DemoLake, demo_lake

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from kappaplus.runtime.runner import RunResult

log = logging.getLogger(__name__)
console = Console()

DATABASE = "demo"
EVENTS_TABLE = f"{DATABASE}.rider_events"
SESSIONS_TABLE = f"{DATABASE}.rider_sessions"
LATE_TABLE = f"{DATABASE}.rider_sessions_late"
TOPIC = "demo-rider-events"
DLQ_TOPIC = "demo-rider-events-dlq"
START = datetime(2024, 6, 1, tzinfo=UTC)
GAP_MINUTES = 30
LATE_DELAY = (6 * 3600.0, 12 * 3600.0)  # a phone offline for hours, then syncing


@dataclass
class DemoReport:
    """What the demo measured; ``ok`` when stream and backfill reconcile exactly."""

    lake: str = "hive"
    events: int = 0
    late_events: int = 0
    archived: int = 0
    dead_letters: int = 0
    stream_sessions: int = 0
    backfill_sessions: int = 0
    identical: int = 0
    different: int = 0
    only_backfill: int = 0
    only_stream: int = 0
    open_in_stream: int = 0
    stream_dropped_late: int = 0
    recovered: int = 0
    backfill_events: int = 0
    lake_events: int = 0
    """The lake's rows in the demo's range, counted by the lake format's own reader."""
    audit_dropped_late: int | None = None
    late_rows_kept: int | None = None
    reconcile_chart: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    ok: bool = False


@contextmanager
def _phase(report: DemoReport, name: str) -> Iterator[None]:
    console.rule(f"[bold]{name}")
    began = time.monotonic()
    yield
    report.timings[name] = time.monotonic() - began


def _start_broker(home: Path) -> str:
    from kappaplus.local.broker import EmbeddedBroker, create_topic, delete_topic, list_topics

    bootstrap = EmbeddedBroker(home).start()
    existing = list_topics(bootstrap)
    for topic in (TOPIC, DLQ_TOPIC):
        if topic in existing:
            delete_topic(bootstrap, topic)
        # one partition: the stream reads the events in the one arrival order they were
        # produced in, which the reconciliation's account of late events relies on (a topic
        # the broker auto-creates has 4, and Kafka orders records within a partition only)
        create_topic(bootstrap, topic, partitions=1)
    return bootstrap


def _start_stack(home: Path) -> tuple[str, str, SparkSession]:
    """Broker, metastore server and Spark session; the metastore JVM starts while Spark
    does (the session connects to the catalog lazily)."""
    import threading

    from kappaplus.local.metastore import DEFAULT_PORT, MetastoreServer
    from kappaplus.local.processes import free_port, port_open
    from kappaplus.session import create_session

    with console.status("starting the broker"):
        bootstrap = _start_broker(home)
    server = MetastoreServer(home)
    uri = server.uri()
    failure: list[BaseException] = []
    thread = None
    if uri is None:
        port = DEFAULT_PORT if not port_open(DEFAULT_PORT) else free_port()
        server = MetastoreServer(home, port)
        uri = f"thrift://127.0.0.1:{port}"

        def start() -> None:
            try:
                server.start()
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                failure.append(exc)

        # pyspark imported here first: the metastore's start imports it in its thread while
        # this one builds the session, and two threads importing it at once can find it half
        # initialised ("cannot import name 'SQLContext' from partially initialized module")
        import pyspark.sql  # noqa: F401

        thread = threading.Thread(target=start, name="metastore-start", daemon=True)
        thread.start()
    with console.status("starting Spark (local mode) and the Hive metastore server"):
        spark = create_session("kappa-demo", home=home, metastore_uri=uri)
        if thread is not None:
            thread.join()
    if failure:
        spark.stop()
        raise failure[0]
    console.print(f"broker [cyan]{bootstrap}[/], metastore [cyan]{uri}[/], state under {home}")
    return bootstrap, uri, spark


RECORD_FORMATS = ("json", "protobuf")
"""How the demo's rider events are written to Kafka: JSON, or ``rides.v1.RiderEvent``
messages (:mod:`kappaplus.examples.rides_protobuf`)."""
GARBAGE = {
    "json": [b"{truncated json", b'{"rider_id": 7, "event_time": 1}'],
    "protobuf": [b"\xff\xff\xff\xff", b"\x0a\x10truncated"],
}


def _record_keys(record_format: str) -> dict[str, Any]:
    """The Kafka binding keys of the demo's records (none for JSON)."""
    if record_format != "protobuf":
        return {}
    from kappaplus.examples.rides_protobuf import kafka_keys

    return kafka_keys()


def _produce(bootstrap: str, events: list[dict[str, Any]], record_format: str = "json") -> None:
    from rich.progress import Progress

    from kappaplus.examples.generate import arrival_order, produce
    from kappaplus.examples.rides_protobuf import to_protobuf

    encode = to_protobuf if record_format == "protobuf" else None

    ordered = arrival_order(events)
    chunk = 2_000
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task(f"producing to {TOPIC}", total=len(ordered))
        for i in range(0, len(ordered), chunk):
            produce(bootstrap, TOPIC, ordered[i : i + chunk], encode=encode)
            bar.advance(task, min(chunk, len(ordered) - i))
    produce(bootstrap, TOPIC, [], extra=GARBAGE[record_format])


def config_toml(raw: dict[str, Any], prefix: str = "") -> str:
    """``raw`` as TOML, one dotted key per line (keys quoted; values of JSON's syntax,
    which TOML shares for strings, numbers and arrays of them)."""
    import json

    lines = []
    for key, value in raw.items():
        name = f"{prefix}{json.dumps(key)}"
        if isinstance(value, dict):
            lines.append(config_toml(value, f"{name}."))
        else:
            lines.append(f"{name} = {json.dumps(value)}")
    return "\n".join(line for line in lines if line)


def _config(
    lake: DemoLake,
    bootstrap: str,
    checkpoints: Path,
    slice_hours: int,
    per_trigger: int,
    record_format: str = "json",
) -> Any:
    """The demo job's configuration; also written to ``<checkpoints>/../sessionization.toml``
    so ``kappa reconcile``/``kappa run`` can use it afterwards."""
    from kappaplus.config import config_from_dict

    raw = _config_dict(lake, bootstrap, checkpoints, slice_hours, per_trigger, record_format)
    checkpoints.parent.mkdir(parents=True, exist_ok=True)
    (checkpoints.parent / "sessionization.toml").write_text(config_toml(raw) + "\n")
    return config_from_dict(raw)


def _config_dict(
    lake: DemoLake,
    bootstrap: str,
    checkpoints: Path,
    slice_hours: int,
    per_trigger: int,
    record_format: str = "json",
) -> dict[str, Any]:
    history, backfill_override = lake.input_binding(EVENTS_TABLE, "event_time", slice_hours)
    backfill: dict[str, Any] = {"watermark_delay": "2 hours"}
    if backfill_override is not None:
        backfill["inputs"] = {"rider_events": backfill_override}
    return dict(
        {
            "job": "kappaplus.examples.sessionization:JOB",
            "watermark_delay": "2 minutes",
            "checkpoint_dir": str(checkpoints),
            "params": {"session_gap": f"{GAP_MINUTES} minutes"},
            "inputs": {
                "rider_events": {
                    "kafka": {
                        "topic": TOPIC,
                        "bootstrap_servers": bootstrap,
                        "starting_offsets": "earliest",
                        "maxOffsetsPerTrigger": per_trigger,
                        "dlq": {"topic": DLQ_TOPIC},
                        **_record_keys(record_format),
                    },
                    **history,
                }
            },
            "outputs": {
                "sessions": {
                    "hive": {"table": SESSIONS_TABLE},
                    "late": {"table": LATE_TABLE},
                    "reconcile": {
                        "key": ["rider_id", "session_start"],
                        "window_end": "session_end",
                        "measure": "event_count",
                    },
                }
            },
            "mode": {"backfill": backfill},
        }
    )


def reconcile(
    spark: SparkSession,
    stream: RunResult,
    backfill: RunResult,
    report: DemoReport,
    config: Any,
) -> None:
    """Compare the stream's and the backfill's sessions with ``kappa reconcile``
    (:mod:`kappaplus.audit.reconcile`); fill ``report`` and write the chart."""
    from kappaplus.audit.reconcile import chart_html, terminal_tables
    from kappaplus.audit.reconcile import reconcile as compare
    from kappaplus.runtime.reconcile_target import target_of

    target = target_of(stream.job, config, "sessions")
    result = compare(spark, target)
    report.stream_sessions, report.backfill_sessions = result.production_rows, result.backfill_rows
    report.backfill_events = result.backfill_measure
    report.open_in_stream = result.open_in_production
    report.identical, report.different = result.identical, result.different
    report.only_backfill, report.only_stream = result.only_backfill, result.only_production
    report.recovered = result.recovered
    report.stream_dropped_late = stream.dropped_late("sessions")
    report.audit_dropped_late = result.late_rows
    if spark.catalog.tableExists(LATE_TABLE):
        report.late_rows_kept = spark.table(LATE_TABLE).count()
    for table in terminal_tables(result):
        console.print(table)
    chart = state_dir() / "demo" / "reconcile.html"
    chart.write_text(chart_html(result))
    report.reconcile_chart = str(chart)
    console.print(
        f"rows dropped as late by the stream: {report.stream_dropped_late} (its progress), "
        f"{result.late_rows} (its audit counts), {report.late_rows_kept} kept in {LATE_TABLE}; "
        f"backfill dropped {backfill.rows_dropped_late}; chart: {chart}"
    )


def _iso(micros: int) -> str:
    return datetime.fromtimestamp(micros / 1e6, UTC).strftime("%Y-%m-%d %H:%M")


def run_demo(
    riders: int = 150,
    days: int = 3,
    slice_hours: int = 12,
    batch_hours: float = 3.0,
    *,
    down: bool = False,
    lake: str = "hive",
    s3: bool = False,
    record_format: str = "json",
) -> DemoReport:
    """Run the demo (see the module docstring) with its archive in table format ``lake``
    (``hive`` or ``iceberg``: :data:`kappaplus.local.demo_lakes.LAKES`; ConfigError for
    another) and return what it measured. ``s3``: the Iceberg lake in the embedded object
    store (:class:`~kappaplus.local.s3.ObjectStore`, started or reused), its catalog the
    store's SQL catalog."""
    from kappaplus.session import stop_session

    if record_format not in RECORD_FORMATS:
        from kappaplus.core.errors import ConfigError

        raise ConfigError("--format", record_format, f"expected one of {', '.join(RECORD_FORMATS)}")
    home = state_dir()
    history = _demo_history(lake, home, s3)
    report = DemoReport(lake=history.name)
    began = time.monotonic()
    work = home / "demo"
    shutil.rmtree(work, ignore_errors=True)
    console.rule(
        f"[bold]kappaplus demo: one job, stream from Kafka and backfill from {history.title}"
    )
    with _phase(report, "1. embedded stack"):
        bootstrap, spark = _fresh_stack(home, history)
    try:
        with _phase(report, "2. generate and produce"):
            events = _generate_and_produce(report, bootstrap, riders, days, record_format)
        with _phase(report, f"3. archive Kafka to the lake ({history.title})"):
            _archive(report, spark, history, bootstrap, work, record_format)
        per_trigger = max(100, int(len(events) / (days * 24) * batch_hours))
        config = _config(
            history, bootstrap, work / "checkpoints", slice_hours, per_trigger, record_format
        )
        with _phase(report, "4. stream mode (Kafka)"):
            stream = _stream(spark, config, per_trigger, batch_hours)
        end = START + timedelta(days=days)
        with _phase(report, f"5. backfill mode ({history.title})"):
            backfill = _backfill(spark, config, history, end, slice_hours)
        with _phase(report, "6. reconcile"):
            _reconcile_and_check(report, spark, history, config, stream, backfill, end)
        _where(home, history)
    finally:
        stop_session(spark)
    _print_outcome(report, time.monotonic() - began, down)
    return report


def _demo_history(lake: str, home: Path, s3: bool) -> DemoLake:
    """The demo's lake format (refused before any start), in the embedded object store when
    ``s3`` (started or reused)."""
    history = demo_lake(lake, home, catalog={} if s3 else None)
    if s3:
        from kappaplus.local.s3 import ObjectStore

        store = ObjectStore(home)
        history = demo_lake(lake, home, catalog=store.iceberg_catalog(store.start()))
    return history


def _fresh_stack(home: Path, history: DemoLake) -> tuple[str, Any]:
    """Step 1: the embedded stack up, the demo's tables dropped; the broker and session."""
    bootstrap, _uri, spark = _start_stack(home)
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
    for table in (
        EVENTS_TABLE,
        f"{EVENTS_TABLE}_dead_letters",
        SESSIONS_TABLE,
        f"{SESSIONS_TABLE}_backfill",
        LATE_TABLE,
    ):
        spark.sql(f"DROP TABLE IF EXISTS {table}")
    history.drop(spark, EVENTS_TABLE)
    return bootstrap, spark


def _generate_and_produce(
    report: DemoReport, bootstrap: str, riders: int, days: int, record_format: str
) -> list[dict[str, Any]]:
    """Step 2: rider events, some of them hours late, produced in arrival order."""
    from kappaplus.examples.generate import rider_events

    events = rider_events(
        riders=riders,
        start=START,
        hours=days * 24,
        seed=7,
        late_fraction=0.3,
        late_delay=LATE_DELAY,
    )
    report.events = len(events)
    report.late_events = sum(
        1 for e in events if e["arrival_time"] - e["event_time"] > timedelta(minutes=10)
    )
    _produce(bootstrap, events, record_format)
    console.print(
        f"{len(events):,} rider events over {days} days ({riders} riders) produced "
        f"as {'rides.v1.RiderEvent' if record_format == 'protobuf' else 'JSON'} to "
        f"[cyan]{TOPIC}[/] in arrival order: each up to 60 s late, "
        f"{report.late_events} of them 6-12 hours late; plus 2 undecodable records"
    )
    return events


def _archive(
    report: DemoReport,
    spark: Any,
    history: DemoLake,
    bootstrap: str,
    work: Path,
    record_format: str,
) -> None:
    """Step 3: the topic archived into the lake, bad records to dead letters."""
    from kappaplus.archive import ArchiveOptions, archive_job
    from kappaplus.examples.generate import RIDER_EVENT_DDL
    from kappaplus.runtime.options import RunOptions
    from kappaplus.runtime.runner import run_job

    archiver, archive_config = archive_job(
        ArchiveOptions(
            **{
                "topic": TOPIC,
                "bootstrap_servers": bootstrap,
                "table": EVENTS_TABLE,
                "event_time_column": "event_time",
                "checkpoint_dir": work / "checkpoints",
                **(_record_keys(record_format) or {"schema": RIDER_EVENT_DDL}),
                **history.archive_options(EVENTS_TABLE),
            }
        )
    )
    run_job(
        spark,
        archiver,
        archive_config,
        RunOptions(Mode.STREAM, trigger="available-now", progress=True),
        console=console,
    )
    report.archived = history.rows(spark, EVENTS_TABLE, "event_time")
    report.dead_letters = spark.table(f"{EVENTS_TABLE}_dead_letters").count()
    console.print(
        f"[cyan]{EVENTS_TABLE}[/] ({history.title}): {report.archived:,} events; "
        f"[cyan]{EVENTS_TABLE}_dead_letters[/] (Hive): {report.dead_letters} records "
        "with reasons"
    )


def _stream(spark: Any, config: Any, per_trigger: int, batch_hours: float) -> Any:
    """Step 4: the job in stream mode, from Kafka."""
    from kappaplus.examples import sessionization
    from kappaplus.runtime.options import RunOptions
    from kappaplus.runtime.runner import run_job

    console.print(
        f"sessionization from Kafka, {per_trigger} records (~{batch_hours:g} h of "
        "arrivals) per micro-batch, watermark 2 minutes"
    )
    return run_job(
        spark,
        sessionization.JOB,
        config,
        RunOptions(Mode.STREAM, trigger="available-now", progress=True),
        console=console,
    )


def _backfill(spark: Any, config: Any, history: DemoLake, end: datetime, slice_hours: int) -> Any:
    """Step 5: the same job in backfill mode, from the lake."""
    from kappaplus.examples import sessionization
    from kappaplus.runtime.options import RunOptions
    from kappaplus.runtime.runner import run_job

    console.print(
        f"the same job from {EVENTS_TABLE} over [{START:%Y-%m-%d}, {end:%Y-%m-%d}), "
        f"{slice_hours}-hour event-time slices, watermark 2 hours"
    )
    return run_job(
        spark,
        sessionization.JOB,
        config,
        RunOptions(Mode.BACKFILL, start=START.isoformat(), end=end.isoformat(), progress=True),
        console=console,
    )


def _reconcile_and_check(
    report: DemoReport,
    spark: Any,
    history: DemoLake,
    config: Any,
    stream: Any,
    backfill: Any,
    end: datetime,
) -> None:
    """Step 6: the two runs compared; every event once, every late row accounted for."""
    reconcile(spark, stream, backfill, report, config)
    lake_events = history.rows(spark, EVENTS_TABLE, "event_time", START, end)
    report.lake_events = lake_events
    accounted = (
        report.recovered
        == report.stream_dropped_late
        == report.audit_dropped_late
        == report.late_rows_kept
    )
    complete = report.backfill_events == lake_events
    report.ok = (
        accounted
        and complete
        and stream.job.transform is backfill.job.transform
        and report.dead_letters == 2
    )
    console.print(
        f"backfill counts {report.backfill_events:,} events in sessions; the lake holds "
        f"{lake_events:,} in the range -> "
        + ("[green]every event once[/]" if complete else "[red]MISMATCH[/]")
    )
    console.print(
        f"late events recovered by the backfill ({report.recovered}) == late rows the "
        f"stream reported ({report.stream_dropped_late}) -> "
        + ("[green]accounted for exactly[/]" if accounted else "[red]NOT accounted[/]")
    )


def _print_outcome(report: DemoReport, total: float, down: bool) -> None:
    """The timings and the verdict."""
    report.timings["total"] = total
    timing = "; ".join(
        f"{name.split('. ', 1)[-1]} {secs:.0f}s" for name, secs in report.timings.items()
    )
    console.print(f"timings: {timing}")
    console.print(
        (
            "[green]demo passed[/]"
            if report.ok
            else "[red]demo found a difference it cannot explain[/]"
        )
        + f" in {total:.0f} s. "
        + (
            "Stopping the services."
            if down
            else "Services keep running: [bold]kappa down[/] stops them."
        )
    )


def _where(home: Path, lake: DemoLake) -> None:
    where = Table(title="where things live", show_header=False)
    where.add_row(
        "raw events (Kafka)", f"topic {TOPIC}; dead letters of the stream run: {DLQ_TOPIC}"
    )
    where.add_row(f"the lake ({lake.title})", lake.where(EVENTS_TABLE))
    where.add_row("archive dead letters (Hive)", f"{EVENTS_TABLE}_dead_letters")
    where.add_row("stream output", f"{SESSIONS_TABLE}; the events it dropped as late: {LATE_TABLE}")
    where.add_row("backfill output", f"{SESSIONS_TABLE}_backfill")
    where.add_row("Hive warehouse (outputs)", str(home / "warehouse"))
    where.add_row("checkpoints", str(home / "demo" / "checkpoints"))
    where.add_row(
        "reconcile / audit again",
        f"kappa reconcile sessionization --config {home / 'demo' / 'sessionization.toml'}; "
        f"kappa audit --table {lake.audit_name(EVENTS_TABLE)}",
    )
    where.add_row("run records", f"{home / 'runs'} (kappa status)")
    console.print(where)
