"""``kappa dlq replay`` (issue 24 item 6): dead letters of a stream, replayed after the
config is fixed, reach the output exactly once, also when the replay is killed (-9) between
producing and recording; what fails again stays, with its new reason.

A stream of rider events runs with an event-time bound set too low (``max``): every event
from 02:00 on (and the flush events) is a dead letter, with a garbage record no decoder will
ever read. The bound is then fixed in the config, the dead letters replayed (the first
replay killed right after the broker acknowledged its records, then run again), and the
stream resumed on its checkpoint: its sessions equal the ground truth over ALL events, no
session twice, every replayed record once in the topic."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from runtime_helpers import (
    EXAMPLES,
    FLUSH_RIDER,
    consume_topic,
    flush_events,
    sessions_by_hand,
    table_rows,
    uid,
)

from kappaplus.config import load_config
from kappaplus.dead_letters.replay import (
    FAULT_ENV,
    REPLAY_ID,
    REPLAY_OF,
    ReplayLedger,
    ledger_path,
)
from kappaplus.examples import sessionization
from kappaplus.examples.generate import produce, rider_events
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job

START = "2024-03-01T00:00:00"
BOUND = "2024-03-01T02:00:00"
COLUMNS = ["rider_id", "session_start", "session_end", "event_count", "event_types"]
GARBAGE = b"{not json"


def _config_text(topic: str, dlq: str, out: str, bootstrap: str, root: Path, bound: bool) -> str:
    text = (EXAMPLES / "sessionization.toml").read_text()
    text = text.replace('topic = "rider-events"', f'topic = "{topic}"')
    text = text.replace('"127.0.0.1:9092"', f'"{bootstrap}"')
    text = text.replace('dlq = { topic = "rider-events-dlq" }', f'dlq = {{ topic = "{dlq}" }}')
    text = text.replace('table = "rider_sessions"', f'table = "{out}"')
    text = f'checkpoint_dir = "{root}"\n' + text
    if bound:
        text += f'\n[inputs.rider_events.event_time_bounds]\nmax = "{BOUND}"\n'
    return text


def _replay(config: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kappaplus", "dlq", "replay", "sessionization"]
        + ["--config", str(config), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_replayed_dead_letters_reach_the_output_once_across_a_kill(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    events = sorted(
        rider_events(riders=8, start=START, hours=4, seed=21, late_fraction=0.0),
        key=lambda e: e["event_time"],
    )
    flush = flush_events(events[-1]["event_time"] + timedelta(days=1), 2)
    topic, dlq = new_topic(prefix="replay"), new_topic(prefix="replay-dlq")
    out = f"replayed_{uid()}"
    produce(kafka_bootstrap, topic, events + flush, extra=[GARBAGE])
    root = scratch / "checkpoints"
    bounded, fixed = scratch / "bounded.toml", scratch / "fixed.toml"
    bounded.write_text(_config_text(topic, dlq, out, kafka_bootstrap, root, bound=True))
    fixed.write_text(_config_text(topic, dlq, out, kafka_bootstrap, root, bound=False))
    run = RunOptions("stream", trigger="available-now")

    first = run_job(spark, sessionization.JOB, load_config(bounded), run)
    assert first.status == "finished"
    fixable = [e for e in events if e["event_time"].isoformat() >= BOUND + "+00:00"] + flush
    assert 0 < len(fixable) < len(events)
    letters = consume_topic(kafka_bootstrap, dlq)
    assert len(letters) == len(fixable) + 1  # the garbage record too

    # the replay, killed (-9) after the broker acknowledged its records, before recording
    env = {**os.environ, FAULT_ENV: "after-produce", "KAPPA_HOME": str(scratch / "home")}
    killed = _replay(fixed, env)
    assert killed.returncode == 137, killed.stdout + killed.stderr
    # the same command again: finds what the killed one produced, produces nothing twice
    env.pop(FAULT_ENV)
    again = _replay(fixed, env)
    assert again.returncode == 0, again.stdout + again.stderr
    summary = json.loads(again.stdout.strip().splitlines()[-1])
    assert summary["recovered_after_crash"] == len(fixable), summary
    assert summary["already_replayed"] == len(fixable) and summary["replayed"] == 0, summary
    assert summary["failed_again"] == 1 and "invalid JSON" in next(
        iter(summary["reasons"].values())
    )
    third = json.loads(_replay(fixed, env).stdout.strip().splitlines()[-1])
    assert third["replayed"] == 0 and third["already_replayed"] == len(fixable), third

    # every fixable record is in the topic once more, exactly once, naming its original
    records = consume_topic(kafka_bootstrap, topic)
    replayed = Counter(
        dict(m.headers() or []).get(REPLAY_OF) for m in records if m.headers() is not None
    )
    replayed.pop(None, None)
    assert len(replayed) == len(fixable) and set(replayed.values()) == {1}, replayed
    assert all(dict(m.headers()).get(REPLAY_ID) for m in records if m.headers())

    # the trail: the garbage record failed again at each of the 3 replays, with its reason;
    # the others were produced once
    ledger = ReplayLedger(ledger_path(root, sessionization.JOB.name, "rider_events"))
    trail = ledger.trail()
    failed = [c for c, steps in trail.items() if all(s["kind"] == "failed" for s in steps)]
    assert len(failed) == 1 and len(trail[failed[0]]) == 3
    assert all("invalid JSON" in step["reason"] for step in trail[failed[0]])
    assert sum(1 for steps in trail.values() if steps[-1]["kind"] == "produced") == len(fixable)

    # the stream resumes on its checkpoint (the fix changed no binding): sessions over ALL
    second = run_job(spark, sessionization.JOB, load_config(fixed), run)
    assert second.status == "finished"
    rows = [r for r in table_rows(spark, out, COLUMNS) if r[0] != FLUSH_RIDER]
    assert len(rows) == len(set(rows)), "no session twice"
    assert set(rows) == {r[:5] for r in sessions_by_hand(events, 30 * 60)}


def test_dead_letters_of_a_table_decode_again_with_the_fixed_decoder(spark) -> None:  # type: ignore[no-untyped-def]
    """Without Kafka: the dead letters of one topic in a DLQ table, read in offset order
    (others' left aside), selected by reason, and decoded again: None where the decoder
    (here: the declared unit of a numeric event time) now reads them, else the new reason."""
    from kappaplus.codecs import DecoderSpec
    from kappaplus.dead_letters.replay import ReplayPlan, decode_again, read_dead_letters, select
    from kappaplus.dead_letters.targets import DeadLetterTarget, ensure_dlq_table
    from kappaplus.examples.generate import RIDER_EVENT_DDL

    table = f"replay_dlq_{uid()}"
    ensure_dlq_table(spark, table)
    numeric = b'{"event_id": "n", "rider_id": "r", "event_time": 1709251200000}'
    spark.sql(
        f"INSERT INTO {table} VALUES "
        f"(NULL, X'{GARBAGE.hex()}', 'rides', 0, 7, NULL, 'invalid JSON', 'j', NULL, "
        "DATE'2024-03-01', 'b1'), "
        f"(NULL, X'{numeric.hex()}', 'rides', 0, 3, NULL, 'declare its unit', 'j', NULL, "
        "DATE'2024-03-01', 'b1'), "
        "(NULL, X'00', 'other', 0, 1, NULL, 'invalid JSON', 'j', NULL, DATE'2024-03-01', 'b1')"
    )
    letters = read_dead_letters(DeadLetterTarget(hive_table=table), "rides", spark)
    assert [(d.topic, d.offset) for d in letters] == [("rides", 3), ("rides", 7)]
    assert [d.offset for d in select(letters, reason="unit")] == [3]
    fixed = DecoderSpec(
        format="json", schema=RIDER_EVENT_DDL, event_time="event_time", event_time_unit="ms"
    )
    again = decode_again(letters, ReplayPlan("rides", "127.0.0.1:1", fixed))
    assert again[0] is None and again[1] is not None and "JSON" in again[1]
    bounded = ReplayPlan("rides", "127.0.0.1:1", fixed, bounds_max=1_000_000)
    assert "bound max" in str(decode_again(letters[:1], bounded)[0])
