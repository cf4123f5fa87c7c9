"""A whole Kappa+ loop on a Spark standalone cluster of two workers that cannot see the
driver's private state, through the public command line, against hand-made ground truths.

The cluster (``spark_cluster.py``): a master and two workers (1 core, 1 GiB each) on
loopback, each worker in a mount namespace of its own where the driver's ``KAPPA_HOME``
(run records, logs, the job's config, the shipped zip) is an empty tmpfs; warehouse and
checkpoints are under a directory both see, as HDFS or an object store would be. A Hive
metastore server (the local stack's) is the one catalog every ``kappa`` process shares; the
embedded broker is the Kafka.

1. rider events (some arriving hours late) and three undecodable records are produced to a
   one-partition topic in arrival order;
2. ``kappa archive`` writes the topic to the lake table (bad records to its dead letters);
3. ``kappa run --mode stream`` (available-now, small micro-batches) sessionizes the topic:
   late events are dropped, kept in the late table and counted by the audit; the bad
   records land in the input's dead-letter table;
4. ``spark-submit kappaplus/submit.py run ... --mode backfill`` runs a job that exists only
   in a ``--py-files`` zip (its Python UDF runs on the executors) over the lake, while the
   test kills one executor JVM with SIGKILL mid-run: Spark replaces it, retries, and the
   output is exact;
5. ``kappa table register`` of Parquet files written here with pyarrow, then ``kappa run
   --mode bootstrap`` over them: the lake up to a cutoff, then Kafka (the archive's table
   has Kafka columns the hybrid source does not take).

Before all that, a run whose session has no warehouse chosen is refused (exit 2). Everything
is compared with truths computed here from the generated events (plain Python over the same
dictionaries, outputs read with pyarrow from the shared warehouse): sessions by hand, the late
events decided from the stream's own offsets log (the Kafka offsets each batch read and the
watermark before it), audit counts as buckets of the events.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import zipfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "runtime"))

from runtime_helpers import (  # noqa: E402
    FLUSH_RIDER,
    flush_events,
    micros,
    sessions_by_hand,
)
from spark_cluster import Cluster, can_isolate, free_port, spark_home, standalone_cluster  # noqa: E402

from kappaplus.examples.generate import (  # noqa: E402
    RIDER_EVENT_DDL,
    arrival_order,
    produce,
    rider_events,
)

RUN_TIMEOUT = 600
# Six drivers (each a Spark session of its own) on a cluster: 9-13 min on a 2-core machine at a
# load average of 10-15, well over the default suite's budget; `make test-all` runs it.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]
T0 = datetime(2024, 3, 1, tzinfo=UTC)
HOURS = 6
CUTOFF = T0 + timedelta(hours=3)
LAKE_UNTIL = CUTOFF + timedelta(hours=1)  # the bootstrap's lake holds more than it owns
GAP = 30 * 60
BATCH = 30  # Kafka records per stream micro-batch: about an hour of arrivals
DB = "cl"
LAKE = f"{DB}.rider_events"
PARQUET_LAKE = f"{DB}.rider_events_parquet"
SESSIONS = f"{DB}.rider_sessions"
GARBAGE = [b"{truncated json", b'{"rider_id": 7, "event_time": 1}', b"\xff\xfe"]
COLUMNS = ["rider_id", "session_start", "session_end", "event_count", "event_types"]

SHIPPED_JOB = '''
"""The reference sessionization with a Python UDF: the executors must import this module,
which only the --py-files zip carries."""
from dataclasses import replace

from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from kappaplus.examples import sessionization


@F.udf(StringType())
def same(value):
    return value


def sessions(inputs, params):
    out = sessionization.sessionize(inputs, params)
    return {name: df.withColumn("rider_id", same("rider_id")) for name, df in out.items()}


JOB = replace(sessionization.JOB, transform=sessions)
'''


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def toml_value(value: Any) -> str:
    return json.dumps(value)


def config_text(
    checkpoints: Path, bootstrap: str, topic: str, suffix: str = "", lake: str = LAKE
) -> str:
    """The sessionization job's config; ``suffix`` names other output tables (bootstrap)."""
    return f"""
job = "kappaplus.examples.sessionization:JOB"
watermark_delay = "2 minutes"
checkpoint_dir = {toml_value(str(checkpoints))}

[params]
session_gap = "30 minutes"

[inputs.rider_events.kafka]
topic = {toml_value(topic)}
bootstrap_servers = {toml_value(bootstrap)}
starting_offsets = "earliest"
maxOffsetsPerTrigger = {BATCH}
dlq = {{ table = "{DB}.rides_dlq{suffix}" }}

[inputs.rider_events.hive]
table = "{lake}"
event_time_column = "event_time"
partition_format = "dt=%Y-%m-%d/hr=%H"

[outputs.sessions.hive]
table = "{SESSIONS}{suffix}"

[outputs.sessions.late]
table = "{SESSIONS}{suffix}_late"

[mode.backfill]
watermark_delay = "2 hours"

[mode.backfill.inputs.rider_events.hive]
maxEventTimePerTrigger = "1 hour"

[mode.bootstrap]
# longer than any event's delay: nothing of the Kafka phase is late
watermark_delay = "5 hours"

[mode.bootstrap.inputs.rider_events.hive]
maxEventTimePerTrigger = "1 hour"
"""


@dataclass
class Stack:
    cluster: Cluster
    driver_home: Path  # the driver's private state: hidden from the workers
    shared: Path  # warehouse and checkpoints: seen by driver and executors
    metastore_uri: str
    env: dict[str, str]

    def kappa(
        self, *args: str, timeout: float = RUN_TIMEOUT, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return self.run([str(Path(sys.executable).parent / "kappa"), *args], timeout, env)

    def run(
        self, command: list[str], timeout: float = RUN_TIMEOUT, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``command`` as the driver: in the driver's state directory, in a process
        group of its own that is killed (with the JVMs it started there) on a timeout."""
        process = subprocess.Popen(
            command,
            cwd=self.driver_home,
            env={**self.env, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
            pytest.fail(f"{command[:3]} timed out\n{err[-4000:]}\n{self.cluster.diagnostics()}")
        except BaseException:  # an interrupted test leaves no driver behind
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            raise
        return subprocess.CompletedProcess(command, process.returncode, out, err)

    def check(self, done: subprocess.CompletedProcess[str]) -> str:
        output = done.stdout + done.stderr
        if done.returncode != 0:
            log = self.driver_home / "logs" / "spark-driver.log"
            tail = log.read_text(errors="replace")[-6000:] if log.exists() else ""
            pytest.fail(
                f"exit {done.returncode}: {done.args}\n{output[-6000:]}\n--- driver log\n{tail}\n"
                f"{self.cluster.diagnostics()}"
            )
        return output

    def tables(self, *names: str) -> dict[str, Any]:
        """Each table as its files in the shared warehouse hold it, read with pyarrow (every
        file under the location but the hidden ``_kappa_staging``/``_kappa_commits``, so a
        file no commit should have left would count too); None where there is no table."""
        import pyarrow.dataset as ds

        out: dict[str, Any] = {}
        for name in names:
            db, table = name.split(".")
            location = self.shared / "warehouse" / f"{db}.db" / table
            if not location.is_dir():
                out[name] = None
                continue
            data = ds.dataset(location, format="parquet", partitioning="hive").to_table()
            out[name] = {
                "location": location.as_uri(),
                "rows": [plain(r) for r in data.to_pylist()],
            }
        return out


def plain(row: dict[str, Any]) -> dict[str, Any]:
    """Timestamps as epoch microseconds, bytes as latin-1 text."""
    out = {}
    for key, value in row.items():
        if isinstance(value, datetime):
            value = micros(value if value.tzinfo else value.replace(tzinfo=UTC))
        elif isinstance(value, bytes):
            value = value.decode("latin-1")
        out[key] = value
    return out


def spark_defaults(shared: Path | None) -> str:
    """The driver's spark-defaults.conf; ``shared`` None: no warehouse chosen."""
    from kappaplus.jars import jvm_jar

    settings = {
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.memory": "1g",
        "spark.executor.memory": "512m",
        "spark.executor.cores": "1",
        "spark.cores.max": "2",
        "spark.sql.shuffle.partitions": "2",
        "spark.pyspark.python": sys.executable,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
    }
    if shared is not None:
        settings["spark.sql.warehouse.dir"] = (shared / "warehouse").as_uri()
    jar = jvm_jar()
    if jar is not None:  # the Hive source's JVM read path, on the driver and the executors
        settings["spark.jars"] = str(jar)
    return "".join(f"{k} {v}\n" for k, v in settings.items())


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    why = can_isolate()
    if why is not None:
        pytest.skip(f"the cluster test {why}")
    from kappaplus.local.metastore import MetastoreServer

    root = tmp_path_factory.mktemp("cluster")
    driver_home, shared = root / "driver", root / "shared"
    (driver_home / "spark-conf").mkdir(parents=True)
    (shared / "warehouse").mkdir(parents=True)
    (driver_home / "spark-conf" / "spark-defaults.conf").write_text(spark_defaults(shared))
    port = free_port()
    server = MetastoreServer(driver_home, port)
    uri = server.start()
    try:
        with standalone_cluster(root / "spark", 2, [driver_home]) as cluster:
            env = {
                k: v
                for k, v in os.environ.items()
                if not k.startswith(("KAPPA_", "PYSPARK_", "SPARK_"))
            }
            env.update(
                {
                    "KAPPA_HOME": str(driver_home),
                    "KAPPA_METASTORE_URI": uri,
                    "SPARK_HOME": str(spark_home()),
                    "SPARK_CONF_DIR": str(driver_home / "spark-conf"),
                    "SPARK_LOCAL_IP": "127.0.0.1",
                }
            )
            yield Stack(cluster, driver_home, shared, uri, env)
    finally:
        server.stop()


def offsets_log(checkpoint: Path) -> list[tuple[int, int, int]]:
    """(batch id, next Kafka offset after it, its watermark in microseconds) from a query's
    offsets log, for the one-partition topic."""
    out = []
    batches = [p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()]
    for path in sorted(batches, key=lambda p: int(p.name)):
        lines = path.read_text().splitlines()
        meta, source = json.loads(lines[1]), json.loads(lines[2])
        (partitions,) = source.values() if "0" not in source else (source,)
        out.append((int(path.name), int(partitions["0"]), int(meta["batchWatermarkMs"]) * 1000))
    return out


def late_by_offsets_log(
    log: list[tuple[int, int, int]], at_offset: dict[int, dict[str, Any]]
) -> list[dict[str, Any]]:
    """The events the stream dropped: a batch filters its input by the watermark of the
    batch before it; a session event is late when its own window ``[t, t + gap)`` ended at
    or before that watermark."""
    late, start, watermark = [], 0, 0
    for _, end, batch_watermark in log:
        for offset in range(start, end):
            event = at_offset.get(offset)
            if event is not None and micros(event["event_time"]) + GAP * 1_000_000 <= watermark:
                late.append(event)
        start, watermark = end, batch_watermark
    return late


def write_parquet_lake(root: Path, events: list[dict[str, Any]]) -> None:
    """``events`` as Parquet files partitioned by event date and hour (``dt=/hr=``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [(name, pa.string()) for name in ("event_id", "rider_id", "event_type", "area")]
        + [("event_time", pa.timestamp("us", tz="UTC"))]
    )
    hours: dict[datetime, list[dict[str, Any]]] = {}
    for event in events:
        hours.setdefault(event["event_time"].replace(minute=0, second=0, microsecond=0), []).append(
            {name: event[name] for name in schema.names}
        )
    for hour, rows in hours.items():
        folder = root / f"dt={hour:%Y-%m-%d}" / f"hr={hour:%H}"
        folder.mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(rows, schema), folder / "part-0.parquet")


def buckets(items: list[dict[str, Any]]) -> Counter[int | None]:
    """Events per 10-minute bucket of event time (epoch seconds of its start)."""
    return Counter(int(e["event_time"].timestamp()) // 600 * 600 for e in items)


def audit_counts(
    rows: list[dict[str, Any]], job: str
) -> dict[tuple[str, str, str], Counter[int | None]]:
    """Rows per bucket by (mode, stage, io) of ``job`` from the audit table's rows, keeping
    the latest write of each (query, batch) as its readers do (a replay replaces)."""
    latest: dict[tuple[str, int], int] = {}
    for row in rows:
        key = (row["query"], row["batch_id"])
        latest[key] = max(latest.get(key, 0), row["recorded_at"])
    out: dict[tuple[str, str, str], Counter[int | None]] = {}
    for row in rows:
        if row["job"] != job or row["recorded_at"] != latest[(row["query"], row["batch_id"])]:
            continue
        bucket = None if row["bucket"] is None else row["bucket"] // 1_000_000
        counter = out.setdefault((row["mode"], row["stage"], row["io"]), Counter())
        counter[bucket] += row["rows"]
    return {key: +counter for key, counter in out.items()}


def session_rows(table: dict[str, Any]) -> set[tuple[Any, ...]]:
    rows = [
        (
            r["rider_id"],
            r["session_start"],
            r["session_end"],
            r["event_count"],
            tuple(r["event_types"]),
        )
        for r in table["rows"]
        if r["rider_id"] != FLUSH_RIDER
    ]
    assert len(rows) == len(set(rows)), "no session twice"
    return set(rows)


def truth_sessions(events: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
    return {s[:5] for s in sessions_by_hand(events, GAP)}


def records(home: Path, job: str) -> dict[str, dict[str, Any]]:
    """The run records of ``job`` in the driver's state directory, by mode (the last run)."""
    out = {}
    for path in sorted((home / "runs").glob("*.json"), key=lambda p: p.stat().st_mtime):
        record = json.loads(path.read_text())
        if record["job"] == job:
            out[record["mode"]] = record
    return out


class ExecutorKiller(threading.Thread):
    """Kill one executor JVM of the running backfill (SIGKILL) once its first micro-batch
    committed and the next one is under way."""

    def __init__(self, cluster: Cluster, checkpoints: Path, known_apps: set[str]) -> None:
        super().__init__(daemon=True)
        self.cluster, self.checkpoints, self.known = cluster, checkpoints, known_apps
        self.killed: int | None = None
        self.app: str | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.2):
            apps = [a for a in self.cluster.app_ids() if a not in self.known]
            commits = list(self.checkpoints.glob("*/backfill/*/sessions/commits/0"))
            if not apps or not commits:
                continue
            self.app = apps[-1]
            pids = self.cluster.executors(self.app)
            if pids:
                os.kill(pids[0], 9)
                self.killed = pids[0]
                return


def test_kappa_on_a_two_worker_cluster(stack: Stack, kafka_bootstrap: str, new_topic) -> None:  # type: ignore[no-untyped-def]
    cluster, home, shared = stack.cluster, stack.driver_home, stack.shared
    checkpoints = shared / "checkpoints"
    url = cluster.url
    (home / "secret").write_text("the driver's private state")
    for worker in cluster.workers:
        assert not cluster.sees(worker.process.pid, home / "secret"), "the worker is isolated"
        assert cluster.sees(worker.process.pid, shared / "warehouse")

    # -- 1. events in arrival order (30% of riders send one event 3-4 hours late) ---------
    events = rider_events(
        riders=16,
        start=T0,
        hours=HOURS,
        seed=27,
        late_fraction=0.3,
        late_delay=(3 * 3600, 4 * 3600),
    )
    flush = flush_events(events[-1]["event_time"] + timedelta(days=1), 2 * BATCH)
    topic = new_topic(prefix="cluster-rides")
    delivered = arrival_order(events)
    produce(kafka_bootstrap, topic, [], extra=GARBAGE)
    produce(kafka_bootstrap, topic, delivered + flush)
    (home / "sessions.toml").write_text(config_text(checkpoints, kafka_bootstrap, topic))
    (home / "bootstrap.toml").write_text(
        config_text(checkpoints, kafka_bootstrap, topic, suffix="_boot", lake=PARQUET_LAKE)
    )

    # -- refused: a cluster run whose warehouse nobody chose (Spark's default would be
    # spark-warehouse in the driver's working directory, invisible to the executors)
    bare = home / "spark-conf-bare"
    bare.mkdir()
    (bare / "spark-defaults.conf").write_text(spark_defaults(None))
    began = time.monotonic()
    timings: dict[str, float] = {}
    refused = stack.kappa(
        "run", "sessionization", "--config", str(home / "sessions.toml"), "--mode", "backfill",
        "--start", iso(T0), "--end", iso(T0 + timedelta(hours=1)), "--master", url,
        "--checkpoint", str(shared / "refused"), SPARK_CONF_DIR=str(bare),
    )  # fmt: skip
    assert refused.returncode == 2, refused.stdout + refused.stderr[-3000:]
    assert "spark.sql.warehouse.dir" in refused.stdout, refused.stdout
    timings["refused"] = time.monotonic() - began

    # -- 2. archive the topic into the lake ------------------------------------------------
    began = time.monotonic()
    stack.check(
        stack.kappa(
            "archive", topic, "--table", LAKE, "--event-time", "event_time",
            "--schema", RIDER_EVENT_DDL, "--bootstrap", kafka_bootstrap,
            "--trigger", "available-now", "--master", url,
            "--checkpoint", str(checkpoints), "--no-progress",
        )
    )  # fmt: skip
    timings["archive"] = time.monotonic() - began

    # -- 3. stream from Kafka --------------------------------------------------------------
    began = time.monotonic()
    stack.check(
        stack.kappa(
            "run", "sessionization", "--config", str(home / "sessions.toml"),
            "--mode", "stream", "--trigger", "available-now", "--master", url, "--no-progress",
        )
    )  # fmt: skip
    timings["stream"] = time.monotonic() - began

    # -- 4. backfill under spark-submit, the job only in a --py-files zip; kill an executor
    shipped = home / "clusterjobs.zip"
    with zipfile.ZipFile(shipped, "w") as z:
        z.writestr("clusterjobs/__init__.py", "")
        z.writestr("clusterjobs/rides.py", SHIPPED_JOB)
    killer = ExecutorKiller(cluster, checkpoints, set(cluster.app_ids()))
    killer.start()
    began = time.monotonic()
    submit = Path(__import__("kappaplus.submit").submit.__file__)
    backfill = stack.run(
        [str(spark_home() / "bin" / "spark-submit"), "--master", url, "--py-files", str(shipped)]
        + [str(submit), "run", "clusterjobs.rides:JOB", "--config", str(home / "sessions.toml")]
        + ["--mode", "backfill", "--start", iso(T0), "--end", iso(T0 + timedelta(hours=HOURS))]
        + ["--no-progress"]
    )
    killer.stop.set()
    timings["backfill"] = time.monotonic() - began
    backfill_log = stack.check(backfill)

    # -- 5. bootstrap: the lake up to the cutoff, then Kafka. Its lake is Parquet files
    # written here and registered: the hybrid source takes only lake columns the decoder
    # knows, and the archive's table has the Kafka coordinates besides the event's.
    began = time.monotonic()
    write_parquet_lake(shared / "lake", [e for e in events if e["event_time"] < LAKE_UNTIL])
    stack.check(
        stack.kappa(
            "table", "register", PARQUET_LAKE, "--location", str(shared / "lake"),
            "--partition-format", "dt=%Y-%m-%d/hr=%H",
        )
    )  # fmt: skip
    stack.check(
        stack.kappa(
            "run", "sessionization", "--config", str(home / "bootstrap.toml"),
            "--mode", "bootstrap", "--start", iso(T0), "--cutoff", iso(CUTOFF),
            "--trigger", "available-now", "--master", url, "--no-progress",
        )
    )  # fmt: skip
    timings["bootstrap"] = time.monotonic() - began

    tables = stack.tables(
        LAKE,
        f"{LAKE}_dead_letters",
        SESSIONS,
        f"{SESSIONS}_late",
        f"{DB}.rides_dlq",
        f"{SESSIONS}_backfill",
        f"{SESSIONS}_boot",
        f"{DB}.rides_dlq_boot",
        "kappa_audit.counts",
    )
    print(f"timings {json.dumps({k: round(v) for k, v in timings.items()})}")
    for name, table in tables.items():
        if table is not None:
            assert table["location"].startswith(shared.as_uri()), (name, table["location"])

    # the lake holds every event once; the bad records are its dead letters
    lake = tables[LAKE]["rows"]
    assert Counter(r["event_id"] for r in lake) == Counter(e["event_id"] for e in events + flush)
    letters = tables[f"{LAKE}_dead_letters"]["rows"]
    assert sorted(r["value"] for r in letters) == sorted(g.decode("latin-1") for g in GARBAGE)
    assert all(r["reason"] for r in letters)

    # stream == sessions of the events its watermark let in; the late ones kept, counted
    runs = records(home, "rider-sessions")
    assert set(runs) == {"stream", "backfill", "bootstrap"}, sorted(runs)
    assert all(run["status"] == "finished" for run in runs.values()), runs
    stream_checkpoint = Path(runs["stream"]["checkpoints"]["sessions"])
    assert stream_checkpoint.is_relative_to(checkpoints)
    at_offset = {len(GARBAGE) + i: e for i, e in enumerate(delivered)}
    late = late_by_offsets_log(offsets_log(stream_checkpoint), at_offset)
    assert len(late) >= 2, "the data has late events"
    late_ids = {e["event_id"] for e in late}
    on_time = [e for e in events if e["event_id"] not in late_ids]
    assert session_rows(tables[SESSIONS]) == truth_sessions(on_time)
    kept = tables[f"{SESSIONS}_late"]["rows"]
    assert sorted(r["event_id"] for r in kept) == sorted(late_ids)
    assert runs["stream"]["rows_dropped_late"] == len(late)
    dlq = tables[f"{DB}.rides_dlq"]["rows"]
    assert sorted(r["value"] for r in dlq) == sorted(g.decode("latin-1") for g in GARBAGE)
    assert runs["stream"]["inputs"]["rider_events"]["dead"] == len(GARBAGE)

    # backfill == every session, exactly, although an executor died under it
    truth = truth_sessions(events)
    assert session_rows(tables[f"{SESSIONS}_backfill"]) == truth
    assert runs["backfill"]["status"] == "finished"
    assert killer.killed is not None, "an executor was killed mid-backfill"
    app_dirs = [p for i in range(2) for p in cluster.work_dir(i).glob(f"{killer.app}/*")]
    assert len(app_dirs) >= 3, f"a replacement executor was launched: {app_dirs}"
    assert "Lost executor" in backfill_log or "ExecutorLostFailure" in backfill_log, backfill_log[
        -3000:
    ]

    # bootstrap == every session; its Kafka phase's bad records in its dead-letter table
    assert session_rows(tables[f"{SESSIONS}_boot"]) == truth
    boot_dlq = tables[f"{DB}.rides_dlq_boot"]["rows"]
    assert sorted(r["value"] for r in boot_dlq) == sorted(g.decode("latin-1") for g in GARBAGE)
    # ... staged by the executors under the checkpoint, counted by the driver from there
    boot = runs["bootstrap"]["inputs"]["rider_events"]
    assert Path(boot["dead_letter_path"]).is_relative_to(checkpoints), boot
    assert boot["records"] == len(GARBAGE) + len(events) + len(flush), boot
    assert boot["dead"] == boot["dead_letters_written"] == len(GARBAGE), boot
    assert boot["skipped"] == sum(1 for e in events if e["event_time"] < CUTOFF), boot

    # audit counts: what each stage counted per 10-minute bucket equals the events
    audit = audit_counts(tables["kappa_audit.counts"]["rows"], "rider-sessions")
    print(sorted(audit))
    assert audit[("stream", "late_kept", "kept")] == buckets(late)
    assert audit[("stream", "kafka", "dead")] == Counter({None: len(GARBAGE)})
    # the late rows reach the job (its stateful operator drops them), so the job's input
    # stage counts them too
    assert audit[("stream", "job", "input")] == buckets([*events, *flush])
    assert audit[("backfill", "lake", "delivered")] == buckets(events)
    assert audit[("backfill", "job", "input")] == buckets(events)
    assert audit[("bootstrap", "source", "delivered")] == buckets([*events, *flush])
    archive = audit_counts(tables["kappa_audit.counts"]["rows"], f"archive-{topic}")
    assert archive[("stream", "output", "written")] == buckets([*events, *flush])
