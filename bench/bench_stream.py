"""The stream's own speed: the sustained rate of ``kappa run --mode stream`` and its end-to-end
latency, beside a plain consume + decode loop over the same records.

    .venv/bin/python bench/bench_stream.py [--rates 2000,4000,8000] [--duration 300]
        [--trigger "5 seconds"] [--loop-records 1000000] [--backlog-records 600000]
        [--no-docs] [--keep]

On an embedded broker, with topics of 4 partitions and the demo's rider events (JSON,
:data:`kappaplus.examples.generate.RIDER_EVENT_DDL`, ``event_time`` = the moment the
producer sends the record):

- the loop (the limit): ``--loop-records`` records produced unpaced, then one
  ``confluent_kafka`` consumer assigned all partitions from offset 0 reads and ``json.loads``
  every value: records per second over the whole loop, in its own process;
- per rate R of ``--rates`` (a fresh topic each): ``kappa run`` of the stateless reference job
  (:data:`kappaplus.examples.enrichment.JOB`, project defaults, its Hive output only) with a
  processing-time trigger of ``--trigger``, while a producer process sends R records/s
  (paced every 10 ms) for ``--duration`` seconds. The consumed position is the committed
  micro-batch's end offsets (the checkpoint's ``offsets``/``commits``), sampled every second.
  R is *sustained* when at the producer's end the job is less than two trigger intervals of
  records behind (a job that is slower than R falls further behind every trigger) and the
  producer reached R;
- the latency at ``--latency-rate`` (default half the highest sustained rate), the same way:
  for every output row, the commit time its micro-batch's Hive commit marker records
  (``_kappa_commits/<query>/<batch>``: after the rows are published) minus the row's
  ``event_time``; p50 and p99 over the rows, and over the rows sent after the first minute
  (the first micro-batch of a fresh driver commits 14-25 s after the producer starts).

"Behind" counts from what the broker holds (its true end offsets), which the table reports
beside what was sent when they differ.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from doc_blocks import replace_block

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
DOC = ROOT / "docs" / "benchmarks.md"
START, END = "<!-- bench_stream:start -->", "<!-- bench_stream:end -->"
PARTITIONS = 4
TYPES = ("app_open", "search", "view_price", "request_trip", "cancel_trip")
AREAS = ("downtown", "airport", "mission", "soma", "marina", "sunset")


def record(i: int, now: float) -> bytes:
    stamp = datetime.fromtimestamp(now, tz=UTC).isoformat()
    return (
        f'{{"event_id": "e{i}", "rider_id": "rider-{i % 10007:05d}", '
        f'"event_type": "{TYPES[i % 5]}", "area": "{AREAS[i % 6]}", "event_time": "{stamp}"}}'
    ).encode()


def producer_of(bootstrap: str):  # type: ignore[no-untyped-def]
    from confluent_kafka import Producer

    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 1_000_000,
            "log_level": 0,
        }
    )


WARM_UP_S = 60
"""Latency is also reported for the records sent after this many seconds of the producer."""
CONFIG_EXTRA = [""]
"""TOML appended to every job configuration (``--config-extra``)."""

FAILED = [0]
"""Records the broker did not take (a delivery report with an error), in this process."""


def delivered(err, _message) -> None:  # type: ignore[no-untyped-def]
    if err is not None:
        FAILED[0] += 1


def send(producer, topic: str, i: int, now: float) -> None:  # type: ignore[no-untyped-def]
    while True:
        try:
            producer.produce(
                topic, value=record(i, now), partition=i % PARTITIONS, on_delivery=delivered
            )
            return
        except BufferError:
            producer.poll(0.01)


# -- child processes ----------------------------------------------------------------------


def child_produce(args: argparse.Namespace) -> None:
    """``--count`` records unpaced, or ``--rate`` records/s for ``--duration`` seconds."""
    producer = producer_of(args.bootstrap)
    began = time.time()
    sent = 0
    if args.rate:
        end = began + args.duration
        while (now := time.time()) < end:
            due = int((now - began) * args.rate)
            while sent < due:
                send(producer, args.topic, sent, now)
                sent += 1
            producer.poll(0)
            time.sleep(0.01)
    else:
        for sent in range(args.count):
            send(producer, args.topic, sent, time.time())
            if sent % 10_000 == 0:
                producer.poll(0)
        sent = args.count
    if producer.flush(120) != 0:
        raise SystemExit("the producer could not deliver every record")
    seconds = time.time() - began
    # "sent": what the broker took (delivery reports without an error), what a job can read
    answer = {"sent": sent - FAILED[0], "produced": sent, "failed": FAILED[0], "seconds": seconds}
    Path(args.out).write_text(json.dumps(answer))


def child_loop(args: argparse.Namespace) -> None:
    """The limit: consume every record of the topic from offset 0 and decode it."""
    from confluent_kafka import Consumer, TopicPartition

    began = time.perf_counter()
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": "bench-stream-loop",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    consumer.assign([TopicPartition(args.topic, p, 0) for p in range(PARTITIONS)])
    seen = 0
    while seen < args.count:
        for message in consumer.consume(10_000, timeout=1.0):
            if message.error() is None:
                json.loads(message.value())
                seen += 1
    consumer.close()
    seconds = time.perf_counter() - began
    Path(args.out).write_text(json.dumps({"records": seen, "seconds": seconds}))


def run_child(role: str, **options: object) -> subprocess.Popen:
    cmd = [sys.executable, __file__, "--child", role]
    for key, value in options.items():
        cmd += [f"--{key.replace('_', '-')}", str(value)]
    return subprocess.Popen(cmd, stdout=sys.stderr, stderr=sys.stderr)


def answer(proc: subprocess.Popen, out: Path) -> dict:
    if proc.wait() != 0:
        raise SystemExit(f"bench child {proc.args} failed with status {proc.returncode}")
    return json.loads(out.read_text())


# -- the stream job -----------------------------------------------------------------------


def topic_end(bootstrap: str, topic: str) -> int:
    """The records ``topic`` holds: its partitions' true end offsets, summed (the embedded
    broker's reported high watermark is only a lower bound: docs/broker.md)."""
    from kappaplus.connectors.kafka.whole_topic import true_ends

    return sum(end for _, end in true_ends(bootstrap, {}, topic).values())


def committed_position(checkpoints: Path) -> int:
    """Records the query has committed: the summed end offsets of its last committed batch."""
    best, total = -1, 0
    for commit in checkpoints.glob("*/*/*/*/commits/[0-9]*"):
        batch = int(commit.name)
        if batch > best:
            offsets = commit.parent.parent / "offsets" / commit.name
            lines = offsets.read_text().strip().splitlines()
            ends = json.loads(lines[-1]) if lines else {}
            best = batch
            total = sum(sum(parts.values()) for parts in ends.values())
    return total


def start_job(
    work: Path,
    env: dict[str, str],
    bootstrap: str,
    topic: str,
    trigger: str,
    max_offsets: int | None = None,
) -> tuple[subprocess.Popen, Path, str]:
    table = f"bench_stream_{topic.replace('-', '_')}"
    config = work / f"{topic}.toml"
    config.write_text(
        'job = "kappaplus.examples.enrichment:JOB"\n\n'
        "[inputs.rider_events.kafka]\n"
        f'topic = "{topic}"\n'
        f'bootstrap_servers = "{bootstrap}"\n'
        'starting_offsets = "earliest"\n'
        + (f"maxOffsetsPerTrigger = {max_offsets}\n" if max_offsets else "")
        + "\n[outputs.enriched.hive]\n"
        f'table = "{table}"\n' + (f"\n{CONFIG_EXTRA[0]}\n" if CONFIG_EXTRA[0] else "")
    )
    checkpoints = work / "checkpoints" / topic
    cmd = [
        str(Path(sys.executable).parent / "kappa"),
        "run",
        "kappaplus.examples.enrichment:JOB",
        "--mode",
        "stream",
        "-c",
        str(config),
        "--trigger",
        trigger,
        "--checkpoint",
        str(checkpoints),
        "--no-progress",
    ]
    return subprocess.Popen(cmd, env=env, stdout=sys.stderr, stderr=sys.stderr), checkpoints, table


def commit_times(checkpoints: Path) -> list[tuple[int, float, int]]:
    """(batch id, commit file time, records read up to it) of every committed batch."""
    out = []
    for commit in checkpoints.glob("*/*/*/*/commits/[0-9]*"):
        offsets = commit.parent.parent / "offsets" / commit.name
        lines = offsets.read_text().strip().splitlines()
        ends = json.loads(lines[-1]) if lines else {}
        total = sum(sum(parts.values()) for parts in ends.values())
        out.append((int(commit.name), commit.stat().st_mtime, total))
    return sorted(out)


def run_backlog(
    args: argparse.Namespace, work: Path, env: dict[str, str], bootstrap: str, count: int
) -> dict:
    """The job's own rate: ``count`` records produced first, then the job started on them in
    micro-batches of ``count / 6`` records (``maxOffsetsPerTrigger``, back to back: a catch-up);
    records/s from its first micro-batch's commit to the commit of the last record (the first
    batch, a fresh JVM's, is reported on its own). Spark's event log is kept in ``work``."""
    from kappaplus.local.broker import create_topic

    topic = f"backlog-{time.monotonic_ns() % 10**6}"
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    out = work / f"produce-{topic}.json"
    answer(run_child("produce", bootstrap=bootstrap, topic=topic, count=count, out=out), out)
    events = work / "events" / topic
    events.mkdir(parents=True)
    logged = dict(env)
    logged["KAPPA_DRIVER_JAVA_OPTIONS"] = (
        f"{env.get('KAPPA_DRIVER_JAVA_OPTIONS', '')} -Dspark.eventLog.enabled=true "
        f"-Dspark.eventLog.dir={events.as_uri()} -Dspark.eventLog.compress=false"
    ).strip()
    began = time.time()
    job, checkpoints, table = start_job(
        work, logged, bootstrap, topic, args.trigger, max_offsets=count // 6
    )
    deadline = began + 900
    while committed_position(checkpoints) < count and time.time() < deadline:
        if job.poll() is not None:
            break
        time.sleep(0.5)
    failed = job.poll()
    job.send_signal(signal.SIGTERM)
    try:
        job.wait(120)
    except subprocess.TimeoutExpired:
        job.kill()
    commits = commit_times(checkpoints)
    first = next((c for c in commits if c[2] > 0), None)
    last = next((c for c in commits if c[2] >= count), None)
    rate = None
    if first is not None and last is not None and last[1] > first[1]:
        rate = (last[2] - first[2]) / (last[1] - first[1])
    return {
        "records": count,
        "job_failed": failed,
        "batches": [(b, round(t - began, 1), n) for b, t, n in commits],
        "first_commit_s": None if first is None else first[1] - began,
        "first_records": None if first is None else first[2],
        "rate": rate,
        "events": str(events),
    }


def run_rate(
    args: argparse.Namespace, work: Path, env: dict[str, str], bootstrap: str, rate: int
) -> dict:
    """One rate: the job started, then the producer at ``rate`` records/s; lag samples."""
    from kappaplus.local.broker import create_topic

    topic = f"rate-{rate}-{time.monotonic_ns() % 10**6}"
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    job, checkpoints, table = start_job(work, env, bootstrap, topic, args.trigger)
    # the query is up when its first (empty-topic) offsets are planned or it waits for data
    deadline = time.time() + 300
    while not any(checkpoints.glob("*/*/*/*/metadata")) and time.time() < deadline:
        time.sleep(0.5)
    time.sleep(2)
    out = work / f"produce-{topic}.json"
    producer = run_child(
        "produce", bootstrap=bootstrap, topic=topic, rate=rate, duration=args.duration, out=out
    )
    began = time.time()
    samples = []
    while producer.poll() is None:
        time.sleep(1)
        samples.append((time.time() - began, committed_position(checkpoints)))
    produced = answer(producer, out)
    # what the broker holds (its end offsets): the job can read no more than that, whatever
    # the producer was told; the difference, if any, is reported
    held = topic_end(bootstrap, topic)
    lag_at_end = held - committed_position(checkpoints)
    caught_up = None
    wait_until = time.time() + 120
    while time.time() < wait_until and job.poll() is None:
        if committed_position(checkpoints) >= held:
            caught_up = time.time() - began - produced["seconds"]
            break
        time.sleep(0.5)
    failed = job.poll()  # the job ended by itself: it failed
    job.send_signal(signal.SIGTERM)
    try:
        job.wait(120)
    except subprocess.TimeoutExpired:
        job.kill()
    trigger_s = float(args.trigger.split()[0])
    return {
        "rate": rate,
        "job_failed": failed,
        "sent": produced["sent"],
        "held": held,
        "producer_rate": produced["sent"] / produced["seconds"],
        "lag_at_end": lag_at_end,
        "caught_up_s": caught_up,
        "sustained": failed is None
        and lag_at_end < 2 * trigger_s * rate
        and produced["sent"] / produced["seconds"] >= 0.95 * rate,
        "samples": samples,
        "began": began,
        "table": table,
        "checkpoints": str(checkpoints),
    }


def latencies(home: Path, table: str) -> list[tuple[float, float]]:
    """Per output row: its event time and its batch's commit time (the Hive commit marker)
    minus its event time."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    location = home / "warehouse" / table
    committed: dict[str, float] = {}
    for marker in (location / "_kappa_commits").glob("*/[0-9]*"):  # not the .crc files
        body = json.loads(marker.read_text())
        committed[str(body["kappa_batch"])] = body["committed_at"]
    out: list[tuple[float, float]] = []
    for part in location.glob("dt=*/kappa_batch=*"):
        at = committed.get(part.name.split("=", 1)[1])
        if at is None:
            continue
        for f in part.glob("*.parquet"):
            times = pq.read_table(f, columns=["event_time"])["event_time"]
            micros = pc.cast(pc.cast(times, pa.timestamp("us", tz="UTC")), pa.int64()).to_pylist()
            out += [(m / 1e6, at - m / 1e6) for m in micros]
    return out


def p99_by_minute(rows: list[tuple[float, float]], began: float) -> list[tuple[int, int, float]]:
    """``(from s, to s, p99)`` of the latencies of ``rows`` (event time, latency) per minute
    of event time after the first (since ``began``, the producer's start): whether the
    latency stays level or grows as the run goes on (the embedded broker's topic grows).

    >>> rows = [(100.0 + s, 1.0) for s in range(200)] + [(230.0, 9.0)]
    >>> p99_by_minute(rows, 100.0)
    [(60, 120, 1.0), (120, 180, 9.0), (180, 240, 1.0)]
    """
    by_minute: dict[int, list[float]] = {}
    for at, lag in rows:
        if at - began >= WARM_UP_S:  # the rows the "after the first minute" figures take
            by_minute.setdefault(int((at - began) // 60), []).append(lag)
    return [(60 * m, 60 * (m + 1), quantile(v, 0.99)) for m, v in sorted(by_minute.items())]


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def render(
    loop: dict,
    steps: list[dict],
    latency: dict | None,
    args: argparse.Namespace,
    backlog: dict | None = None,
) -> str:
    loop_rate = loop["records"] / loop["seconds"]
    best = max((s["rate"] for s in steps if s["sustained"]), default=0)
    lines = [
        f"Measured {datetime.now(tz=UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs shared "
        f"with other work; embedded broker, {PARTITIONS} partitions, trigger `{args.trigger}`, "
        f"{args.duration:.0f} s per rate. Load averages (1/5/15 min): {args.load_before} "
        f"before, {os.getloadavg()[0]:.1f}/{os.getloadavg()[1]:.1f}/{os.getloadavg()[2]:.1f} "
        "after.",
        "",
        f"Loop (consume + `json.loads`, one process): {loop['records']:,} records in "
        f"{loop['seconds']:.1f} s = **{loop_rate:,.0f} records/s**.",
        "",
    ]
    if backlog is not None and backlog["rate"]:
        lines += [
            f"Backlog (the job's own rate): {backlog['records']:,} records produced first, then "
            "the job started on them, one sixth per micro-batch: first micro-batch committed "
            f"{backlog['first_commit_s']:.1f} s "
            f"after the command ({backlog['first_records']:,} records), then "
            f"**{backlog['rate']:,.0f} records/s = {backlog['rate'] / loop_rate:.2f}x the "
            f"loop's** to the last record; batches (id, s after the command, records read): "
            f"{backlog['batches']}.",
            "",
        ]
    lines += [
        "| rate records/s | producer reached /s | behind at the producer's end | caught up "
        "after s | sustained |",
        "|---:|---:|---:|---:|---|",
    ]
    for s in steps:
        caught = f"{s['caught_up_s']:.1f}" if s["caught_up_s"] is not None else "not in 120 s"
        if s["job_failed"] is not None:
            caught = "-"
        if s.get("held") is not None and s["held"] != s["sent"]:
            caught += f" (the broker holds {s['held']:,} of {s['sent']:,} sent)"
        lines.append(
            f"| {s['rate']:,} | {s['producer_rate']:,.0f} | {s['lag_at_end']:,} | {caught} "
            f"| {'yes' if s['sustained'] else 'no'}"
            + (f" (the job failed: exit {s['job_failed']})" if s["job_failed"] is not None else "")
            + " |"
        )
    lines += [
        "",
        f"Highest sustained rate: **{best:,} records/s = {best / loop_rate:.2f}x the loop's**.",
    ]
    if latency:
        lines.append(
            f"Latency at {latency['rate']:,} records/s ({latency['rows']:,} rows): p50 "
            f"**{latency['p50']:.2f} s**, p99 **{latency['p99']:.2f} s**, max "
            f"{latency['max']:.2f} s (event time -> the batch's Hive commit)."
        )
        if latency.get("steady_p50") is not None:
            lines.append(
                f"After the first {WARM_UP_S} s (the first micro-batch of a fresh driver; "
                f"{latency['steady_rows']:,} rows): p50 **{latency['steady_p50']:.2f} s**, "
                f"p99 **{latency['steady_p99']:.2f} s**."
            )
        minutes = latency.get("p99_by_minute") or []
        if minutes:
            lines.append(
                "p99 by minute of event time (s after the producer's start: p99): "
                + ", ".join(f"{lo}-{hi}: {p99:.2f} s" for lo, hi, p99 in minutes)
                + "."
            )
    return "\n".join(lines)


def write_doc(text: str) -> None:
    replace_block(DOC, START, END, text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="2000,4000,8000")
    parser.add_argument("--duration", type=float, default=300.0)
    parser.add_argument("--trigger", default="5 seconds")
    parser.add_argument("--loop-records", type=int, default=1_000_000)
    parser.add_argument("--latency-rate", type=int, help="default: half the highest sustained")
    parser.add_argument(
        "--config-extra",
        default="",
        help="TOML appended to the job's configuration, e.g. a setting to measure",
    )
    parser.add_argument(
        "--backlog-records",
        type=int,
        default=0,
        help="first measure the job's own rate on this many records produced beforehand",
    )
    parser.add_argument("--no-docs", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    for hidden in ("child", "out", "bootstrap", "topic"):
        parser.add_argument(f"--{hidden}", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    CONFIG_EXTRA[0] = args.config_extra.replace("\\n", "\n")
    if args.child:
        {"produce": child_produce, "loop": child_loop}[args.child](args)
        return
    sys.path.insert(0, str(ROOT))
    from kappaplus.local.broker import EmbeddedBroker, create_topic
    from kappaplus.local.processes import free_port

    args.load_before = "/".join(f"{x:.1f}" for x in os.getloadavg())
    work = Path(tempfile.mkdtemp(prefix="bench-stream-"))
    env = {**os.environ, "KAPPA_HOME": str(work / "home")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    broker = EmbeddedBroker(work / "broker", port=free_port())
    bootstrap = broker.start()
    steps: list[dict] = []
    failures = 0  # of the latency run's job
    try:
        create_topic(bootstrap, "loop", partitions=PARTITIONS)
        out = work / "loop-produce.json"
        answer(
            run_child(
                "produce", bootstrap=bootstrap, topic="loop", count=args.loop_records, out=out
            ),
            out,
        )
        out = work / "loop.json"
        loop = answer(
            run_child("loop", bootstrap=bootstrap, topic="loop", count=args.loop_records, out=out),
            out,
        )
        print(f"loop: {loop}", file=sys.stderr)
        backlog = None
        if args.backlog_records:
            backlog = run_backlog(args, work, env, bootstrap, args.backlog_records)
            print(f"backlog: {backlog}", file=sys.stderr)
        for rate in [int(r) for r in args.rates.split(",") if r]:
            step = run_rate(args, work, env, bootstrap, rate)
            print(step, file=sys.stderr)
            steps.append(step)
        best = max((s["rate"] for s in steps if s["sustained"]), default=0)
        latency = None
        rate = args.latency_rate or best // 2
        if rate:
            step = run_rate(args, work, env, bootstrap, rate)
            failures += step.get("job_failed") is not None
            rows = latencies(work / "home", step["table"])
            values = [lag for _, lag in rows]
            # the first minute holds the fresh driver's first micro-batch (it commits some
            # 14-25 s after the producer starts): the steady state is measured after it
            steady = [lag for at, lag in rows if at >= step["began"] + WARM_UP_S]
            if values:
                latency = {
                    "rate": rate,
                    "rows": len(values),
                    "p50": quantile(values, 0.5),
                    "p99": quantile(values, 0.99),
                    "max": max(values),
                    "mean": statistics.fmean(values),
                    "steady_rows": len(steady),
                    "steady_p50": quantile(steady, 0.5) if steady else None,
                    "steady_p99": quantile(steady, 0.99) if steady else None,
                    "p99_by_minute": p99_by_minute(rows, step["began"]),
                }
    finally:
        broker.stop()
        failed = failures or any(s.get("job_failed") is not None for s in steps)
        if failed and not args.keep and (work / "home" / "logs").is_dir():
            # a failed job's logs outlive the run: its error, in full, is in kappa.log
            kept = Path(tempfile.mkdtemp(prefix="bench-stream-failed-"))
            shutil.copytree(work / "home" / "logs", kept / "logs", dirs_exist_ok=True)
            print(f"a job failed: its logs are kept in {kept}", file=sys.stderr)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    text = render(loop, steps, latency, args, backlog)
    print(text)
    if not args.no_docs:
        write_doc(text)


if __name__ == "__main__":
    main()
