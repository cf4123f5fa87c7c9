"""What the separate dead-letter query cost: a stream run with a ``dlq``, before and after.

    .venv/bin/python bench/bench_dlq_query.py --old REV [--records 60000] [--rounds 3]

Before, a stream run started one more query per Kafka input with a ``dlq``, which read and
decoded the topic again only to write the dead letters; now the output query stages and
writes them in the micro-batch that reads them. This starts an embedded broker, produces
``--records`` JSON rider events (1% undecodable) into a 2-partition topic, then times
``run_job`` of the reference enrichment job (one output, a Hive table; dead letters to a
Hive table, or with ``--target topic`` to a Kafka topic) in ``stream`` mode,
``available-now``, alternately with the code of git revision ``--old`` (exported to a
temporary directory) and of this working tree. Each run is a child process with its own
Spark session (``local[2]``), checkpoints and tables; only ``run_job`` is timed, in wall
time and in CPU time of the child's process tree (JVM and Python workers: steadier than wall
time on a shared machine). ``--baseline`` adds the new code without a ``dlq``. Prints each
run, the medians and the ratios new / old.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tree_cpu(root: int) -> float:
    """CPU seconds (user + system) of process ``root`` and its live descendants, including
    their waited-for children (Spark's JVM, its Python workers)."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        times[int(entry.name)] = sum(int(v) for v in fields[11:15]) / tick
    tree, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        children = [c for c, parent in parents.items() if parent == pid and c not in tree]
        tree.update(children)
        frontier.extend(children)
    return sum(times.get(pid, 0.0) for pid in tree)


def child(args: argparse.Namespace) -> None:
    """One timed stream run with the ``kappaplus`` found first on ``sys.path``."""
    import kappaplus
    from kappaplus.config import config_from_dict
    from kappaplus.examples import enrichment
    from kappaplus.runtime.options import RunOptions
    from kappaplus.runtime.runner import run_job
    from kappaplus.session import create_session, stop_session

    home = Path(args.home)
    spark = create_session(
        "bench-dlq", master="local[2]", home=home, conf={"spark.ui.enabled": "false"}
    )
    suffix = uuid.uuid4().hex[:8]
    dlq = {"topic": args.dlq_topic} if args.dlq_topic else {"table": f"bench_dlq_{suffix}"}
    config = config_from_dict(
        {
            "checkpoint_dir": str(home / "checkpoints"),
            "inputs": {
                "rider_events": {
                    "kafka": {
                        "topic": args.topic,
                        "bootstrap_servers": args.bootstrap,
                        "starting_offsets": "earliest",
                        "maxOffsetsPerTrigger": args.batch,
                        **({"dlq": dlq} if args.dlq else {}),
                    }
                }
            },
            "outputs": {"enriched": {"hive": {"table": f"bench_enriched_{suffix}"}}},
        }
    )
    cpu = tree_cpu(os.getpid())
    started = time.monotonic()
    result = run_job(spark, enrichment.JOB, config, RunOptions("stream", trigger="available-now"))
    seconds = time.monotonic() - started
    cpu = tree_cpu(os.getpid()) - cpu
    spent = {}
    for name, query in result.queries.items():
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
        spent[name] = {
            key: round(sum(p["durationMs"].get(key, 0) for p in progress) / 1000, 1)
            for key in ("triggerExecution", "addBatch")
        }
        spent[name]["batches"] = len(progress)
    if not args.dlq:
        dead = -1
    elif args.dlq_topic:  # as the run counted them (the topic holds every run's)
        dead = int(result.record.inputs["rider_events"]["dead_letters_written"])
    else:
        dead = spark.table(f"bench_dlq_{suffix}").count()
    good = spark.table(f"bench_enriched_{suffix}").count()
    stop_session(spark)
    print(
        "RESULT "
        + json.dumps(
            {
                "seconds": seconds,
                "cpu": cpu,
                "status": result.status,
                "queries": spent,
                "dead": dead,
                "good": good,
                "code": str(Path(kappaplus.__file__).parent.parent),
            }
        )
    )


def produce(bootstrap: str, topic: str, records: int) -> int:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "log_level": 0})
    bad = 0
    for i in range(records):
        if i % 100 == 7:
            value = b'{"event_id": "broken'
            bad += 1
        else:
            value = json.dumps(
                {
                    "event_id": f"e{i}",
                    "rider_id": f"r{i % 500}",
                    "event_type": "open_app" if i % 3 else "request_trip",
                    "area": "downtown",
                    "event_time": f"2024-03-01T{(i // 3600) % 24:02d}:{(i // 60) % 60:02d}:"
                    f"{i % 60:02d}Z",
                }
            ).encode()
        producer.produce(topic, value=value, partition=i % 2)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    return bad


def export(rev: str, into: Path) -> Path:
    """The ``kappaplus`` package of ``rev`` (with this tree's built jar) under ``into``."""
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "kappaplus"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    jars = ROOT / "kappaplus" / "jars"
    for jar in jars.glob("*.jar"):
        shutil.copy(jar, into / "kappaplus" / "jars" / jar.name)
    return into


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", help="git revision with the separate dead-letter query")
    parser.add_argument("--records", type=int, default=60_000)
    parser.add_argument("--batch", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--baseline", action="store_true", help="also time the new code without a dlq"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--target", choices=("table", "topic"), default="table")
    parser.add_argument("--dlq", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--dlq-topic", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--home", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if not args.old:
        parser.error("--old REV is required")

    sys.path.insert(0, str(ROOT))
    from kappaplus.local.broker import EmbeddedBroker, create_topic, free_port

    work = Path(tempfile.mkdtemp(prefix="bench-dlq-"))
    broker = EmbeddedBroker(work / "broker", port=free_port())
    bootstrap = broker.start()
    try:
        topic = f"bench-dlq-{uuid.uuid4().hex[:6]}"
        create_topic(bootstrap, topic, 2)
        bad = produce(bootstrap, topic, args.records)
        target = []
        if args.target == "topic":
            create_topic(bootstrap, f"{topic}-dlq", 1)
            target = ["--dlq-topic", f"{topic}-dlq"]
        trees = {"old": export(args.old, work / "old"), "new": ROOT}
        if args.baseline:
            trees["no dlq"] = ROOT
        times: dict[str, list[float]] = {name: [] for name in trees}
        cpus: dict[str, list[float]] = {name: [] for name in trees}
        load = os.getloadavg()[0]
        for round_ in range(args.rounds):
            for name, tree in trees.items():
                env = {**os.environ, "PYTHONPATH": str(tree), "KAPPA_HOME": str(work / "h")}
                home = work / f"{name.replace(' ', '-')}-{round_}"
                out = subprocess.run(
                    [sys.executable, __file__, "--child", "--bootstrap", bootstrap,
                     "--topic", topic, "--home", str(home), "--batch", str(args.batch),
                     "--dlq", str(int(name != "no dlq")), *target],
                    env=env, cwd=work, capture_output=True, text=True, check=False,
                )  # fmt: skip
                line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
                if line is None:
                    raise SystemExit(f"{name} failed:\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
                result = json.loads(line.removeprefix("RESULT "))
                assert result["code"] == str(tree), result
                assert result["dead"] in (bad, -1) and result["good"] == args.records - bad
                times[name].append(result["seconds"])
                cpus[name].append(result["cpu"])
                print(
                    f"round {round_ + 1} {name}: {result['seconds']:.1f} s, cpu "
                    f"{result['cpu']:.1f} s, queries "
                    f"{result['queries']}, dead {result['dead']}, good {result['good']}",
                    flush=True,
                )
        medians = {name: statistics.median(values) for name, values in times.items()}
        cpu = {name: statistics.median(values) for name, values in cpus.items()}
        print(
            f"{args.records:,} records ({bad} undecodable), 2 partitions, maxOffsetsPerTrigger "
            f"{args.batch:,}, dead letters to a {args.target}, local[2], load average "
            f"{load:.1f} before / {os.getloadavg()[0]:.1f} after; medians of {args.rounds} "
            "alternating rounds:"
        )
        for name, seconds in medians.items():
            runs = ", ".join(f"{s:.1f}" for s in times[name])
            used = ", ".join(f"{s:.1f}" for s in cpus[name])
            print(f"  {name}: {seconds:.1f} s ({runs}); cpu {cpu[name]:.1f} s ({used})")
        print(
            f"  new / old: wall {medians['new'] / medians['old']:.2f}x, "
            f"cpu {cpu['new'] / cpu['old']:.2f}x"
        )
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
