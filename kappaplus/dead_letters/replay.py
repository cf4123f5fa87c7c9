"""``kappa dlq replay``: dead letters of a Kafka input back through the job, each once.

After the decoder, the bounds or the job are fixed, the dead letters of an input (its
``dlq`` table or topic) are decoded again with the input's CURRENT decoder and event-time
bounds:

- a dead letter that now decodes is produced again to the input's topic, with its original
  key and value, in its original partition when the topic still has it, in the order of its
  original offsets, with the headers ``kappa-replay-of`` (``topic/partition/offset`` of the
  original record), ``kappa-replay-id`` and ``kappa-dead-letter-reason``; the running
  stream (or its next run, on the same checkpoint) reads it as any record, and the archive
  keeps it, so a backfill sees it too;
- a dead letter that fails again stays where it is; the attempt and its new reason are
  recorded (the trail of reasons of each record is in the ledger, ``kappa dlq replay
  --list`` shows it).

Each dead letter is produced at most once, also across crashes. The ledger (JSON lines,
``<checkpoint root>/<job>/dead-letter-replays/<input>.jsonl``) records, before anything is
produced, an *intent*: the replay id, the records it will produce and the topic's end
offsets at that moment; then the produced positions, then *done*. A replay that finds an
intent without *done* (a crash while producing) first reads the topic from the recorded end
offsets and takes every record carrying that replay id as produced; only the others are
produced again. A lock keeps two replays of one input apart.

>>> ledger = ReplayLedger(Path("/tmp/x.jsonl"))                       # doctest: +SKIP
>>> replay_dead_letters(letters, plan, ledger)                        # doctest: +SKIP
ReplayResult(replayed=12, failed_again=1, already=0, ...)
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from kappaplus.connectors.kafka.whole_topic import read_ranges, true_ends
from kappaplus.core.errors import ConfigError, KafkaError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from kappaplus.codecs import DecoderSpec
    from kappaplus.dead_letters.targets import DeadLetterTarget

log = logging.getLogger(__name__)

REPLAY_OF, REPLAY_ID, REPLAY_REASON = (
    "kappa-replay-of",
    "kappa-replay-id",
    "kappa-dead-letter-reason",
)
GROUP = "kappa-dlq-replay"
"""The consumer group prefix of the reads of a replay (never committed)."""

FAULT_ENV = "KAPPA_REPLAY_FAULT"
"""Tests only: ``after-produce`` makes the process die (``os._exit(137)``, as kill -9)
after the records are acknowledged and before their positions are recorded."""


@dataclass(frozen=True)
class DeadLetter:
    """One dead letter of a Kafka input: the original record and why it failed."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    reason: str
    kafka_timestamp: datetime | None = None
    dead_letter_time: datetime | None = None

    @property
    def coordinate(self) -> str:
        """``topic/partition/offset`` of the original record (the dead letter's identity)."""
        return f"{self.topic}/{self.partition}/{self.offset}"


@dataclass(frozen=True)
class ReplayPlan:
    """How one input's dead letters are decoded and where they go back to."""

    topic: str
    bootstrap: str
    decoder: DecoderSpec
    bounds_min: int | None = None
    bounds_max: int | None = None
    max_future: int | None = None
    producer_settings: dict[str, str] = field(default_factory=dict)


@dataclass
class ReplayResult:
    """What one replay did."""

    replay_id: str
    selected: int = 0
    replayed: int = 0
    failed_again: int = 0
    already: int = 0
    """Dead letters a replay had produced before (never produced twice)."""
    recovered_after_crash: int = 0
    reasons: dict[str, str] = field(default_factory=dict)
    """coordinate -> the new reason of each dead letter that failed again."""

    def as_json(self) -> dict[str, Any]:
        return {
            "replay_id": self.replay_id,
            "selected": self.selected,
            "replayed": self.replayed,
            "failed_again": self.failed_again,
            "already_replayed": self.already,
            "recovered_after_crash": self.recovered_after_crash,
            "reasons": self.reasons,
        }


class ReplayLedger:
    """The JSON-lines record of every replay of one input (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def entries(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        out = []
        for number, line in enumerate(self.path.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except ValueError:
                # a line cut short by a crash: only the last one can be, and it is an
                # intent's or a position's, both recovered from the topic
                log.warning("%s: line %d is cut short (a crash); ignored", self.path, number)
        return out

    def append(self, *entries: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        cut = self.path.is_file() and not self.path.read_bytes().endswith(b"\n")
        with self.path.open("a") as handle:
            if cut and self.path.stat().st_size:
                handle.write("\n")  # a line a crash cut short stays alone (and ignored)
            for entry in entries:
                handle.write(json.dumps(entry, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def produced(self) -> dict[str, dict[str, Any]]:
        """coordinate -> where it was produced again (partition, offset, replay)."""
        return {e["coordinate"]: e for e in self.entries() if e.get("kind") == "produced"}

    def open_intents(self) -> list[dict[str, Any]]:
        """Intents with no ``done``: replays a crash cut short."""
        entries = self.entries()
        done = {e["replay"] for e in entries if e.get("kind") == "done"}
        return [e for e in entries if e.get("kind") == "intent" and e["replay"] not in done]

    def trail(self) -> dict[str, list[dict[str, Any]]]:
        """coordinate -> every attempt (failed again, with its reason, or produced)."""
        out: dict[str, list[dict[str, Any]]] = {}
        for entry in self.entries():
            if entry.get("kind") in ("failed", "produced"):
                out.setdefault(entry["coordinate"], []).append(entry)
        return out


def ledger_path(checkpoint_root: Path, job: str, input_name: str) -> Path:
    """Where the replays of one input are recorded (beside the job's checkpoints)."""
    return checkpoint_root / job / "dead-letter-replays" / f"{input_name}.jsonl"


# -- reading dead letters ----------------------------------------------------------------


def read_dead_letters(
    target: DeadLetterTarget, topic: str, spark: SparkSession | None = None
) -> list[DeadLetter]:
    """The dead letters of records of ``topic`` in ``target`` (its Hive table, else its
    topic), one per original record (a Kafka DLQ may hold a re-delivered one twice: the
    latest wins), in the order of their original offsets."""
    if target.hive_table is not None:
        if spark is None:
            raise ConfigError("dlq.table", target.hive_table, "reading it needs a SparkSession")
        rows = [
            row.asDict()
            for row in spark.table(target.hive_table)
            .where(f"topic = '{topic}'")
            .select(
                "topic",
                "partition",
                "offset",
                "key",
                "value",
                "reason",
                "kafka_timestamp",
                "dead_letter_time",
            )
            .collect()
        ]
    elif target.kafka_topic is not None:
        rows = [r for r in _consume_dlq_topic(target) if r.get("topic") == topic]
    else:
        return []
    latest: dict[str, DeadLetter] = {}
    for row in rows:
        if row.get("partition") is None or row.get("offset") is None:
            continue  # not a Kafka record's dead letter (e.g. an unplaceable lake row)
        letter = DeadLetter(
            topic=str(row["topic"]),
            partition=int(row["partition"]),
            offset=int(row["offset"]),
            key=None if row.get("key") is None else bytes(row["key"]),
            value=None if row.get("value") is None else bytes(row["value"]),
            reason=str(row.get("reason") or ""),
            kafka_timestamp=row.get("kafka_timestamp"),
            dead_letter_time=row.get("dead_letter_time"),
        )
        latest[letter.coordinate] = letter
    return sorted(latest.values(), key=lambda d: (d.partition, d.offset))


def _consume_dlq_topic(target: DeadLetterTarget) -> list[dict[str, Any]]:
    """Every message of the DLQ topic, parsed (read from the beginning to the end)."""
    from kappaplus.dead_letters.targets import parse_dlq_message

    assert target.kafka_topic is not None and target.kafka_bootstrap is not None
    settings = dict(target.kafka_settings)
    ranges = true_ends(target.kafka_bootstrap, settings, target.kafka_topic)
    return [
        parse_dlq_message(message.value() or b"{}")
        for message in read_ranges(
            target.kafka_bootstrap, settings, target.kafka_topic, ranges, group_prefix=GROUP
        )
    ]


def select(
    letters: Iterable[DeadLetter],
    *,
    reason: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[DeadLetter]:
    """The dead letters whose reason contains ``reason`` and whose dead-letter time is in
    ``[since, until)`` (either end open)."""

    def keep(letter: DeadLetter) -> bool:
        if reason is not None and reason.lower() not in letter.reason.lower():
            return False
        when = _utc(letter.dead_letter_time)
        if since is not None and (when is None or when < since):
            return False
        return not (until is not None and (when is None or when >= until))

    return [letter for letter in letters if keep(letter)]


# -- decoding again ----------------------------------------------------------------------


def decode_again(letters: Sequence[DeadLetter], plan: ReplayPlan) -> list[str | None]:
    """Per dead letter, why it fails again with the current decoder and bounds (None: it
    now decodes)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from kappaplus.codecs import decode_batches
    from kappaplus.codecs.schema import ERROR_COL, RECORD_ARROW_TYPE, RECORD_COL
    from kappaplus.connectors.kafka.reader import arrow_schema
    from kappaplus.core.event_time import bound_violation

    if not letters:
        return []
    n = len(letters)
    stamps = [_utc(d.kafka_timestamp) or datetime(1970, 1, 1, tzinfo=UTC) for d in letters]
    records = pa.RecordBatch.from_arrays(
        [
            pa.array([d.key for d in letters], pa.binary()),
            pa.array([d.value for d in letters], pa.binary()),
            pa.array([d.topic for d in letters]),
            pa.array([d.partition for d in letters], pa.int32()),
            pa.array([d.offset for d in letters], pa.int64()),
            pa.array(stamps, pa.timestamp("us", tz="UTC")),
            pa.array([0] * n, pa.int32()),
        ],
        schema=arrow_schema(False),
    )
    decoded_schema = to_arrow_schema(plan.decoder.decoded_schema(), timezone="UTC")
    target = pa.schema(
        [f.with_type(RECORD_ARROW_TYPE) if f.name == RECORD_COL else f for f in decoded_schema]
    )
    (decoded,) = list(decode_batches(plan.decoder, target, [records]))
    errors = decoded.column(decoded.schema.get_field_index(ERROR_COL)).to_pylist()
    event = plan.decoder.event_time
    times = (
        decoded.column(decoded.schema.get_field_index(event)).cast(pa.int64()).to_pylist()
        if event
        else [None] * n
    )
    now = int(time.time() * 1_000_000)
    out: list[str | None] = []
    for error, micros in zip(errors, times, strict=True):
        if error is not None:
            out.append(str(error))
            continue
        if event is None:
            out.append(None)
            continue
        out.append(
            bound_violation(
                event,
                micros,
                low=plan.bounds_min,
                high=plan.bounds_max,
                max_future=plan.max_future,
                now=now,
            )
        )
    return out


def _utc(moment: datetime | None) -> datetime | None:
    """``moment`` as an aware UTC time (Spark returns naive UTC times)."""
    if moment is None:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


# -- producing again, each once ------------------------------------------------------------


def _end_offsets(plan: ReplayPlan) -> dict[int, int]:
    """partition -> end offset of the input's topic."""
    ranges = true_ends(plan.bootstrap, plan.producer_settings, plan.topic)
    return {partition: end for partition, (_, end) in ranges.items()}


def _produced_since(plan: ReplayPlan, ends: dict[str, int], replay_id: str) -> dict[str, Any]:
    """Records carrying ``replay_id`` from the recorded end offsets to today's ends:
    coordinate -> (partition, offset)."""
    ranges = {p: (int(ends.get(str(p), 0)), high) for p, high in _end_offsets(plan).items()}
    found: dict[str, Any] = {}
    for message in read_ranges(
        plan.bootstrap, plan.producer_settings, plan.topic, ranges, group_prefix=GROUP
    ):
        headers = {str(k): _text(v) for k, v in list(message.headers() or [])}
        if headers.get(REPLAY_ID) == replay_id and REPLAY_OF in headers:
            where = {"partition": message.partition(), "offset": int(message.offset() or 0)}
            found[headers[REPLAY_OF]] = where
    return found


def _text(value: str | bytes | None) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


def recover(ledger: ReplayLedger, plan: ReplayPlan) -> int:
    """Finish the replays a crash cut short: what they produced is recorded as produced
    (read back from the topic); the rest are dead letters still to replay. Returns how many
    records were found produced."""
    found_total = 0
    for intent in ledger.open_intents():
        found = _produced_since(plan, intent["ends"], intent["replay"])
        known = ledger.produced()
        entries = [
            {
                "kind": "produced",
                "replay": intent["replay"],
                "coordinate": coordinate,
                **where,
                "recovered": True,
            }
            for coordinate, where in found.items()
            if coordinate not in known
        ]
        entries.append({"kind": "done", "replay": intent["replay"], "recovered": True})
        ledger.append(*entries)
        found_total += len(entries) - 1
        log.info(
            "replay %s had been cut short: %d of its %d records were produced, the rest stay",
            intent["replay"],
            len(found),
            len(intent["coordinates"]),
        )
    return found_total


def _produce_again(
    good: Sequence[DeadLetter],
    plan: ReplayPlan,
    replay_id: str,
    ends: Mapping[int, int],
    progress: Callable[[int, int], None] | None,
) -> dict[str, dict[str, int]]:
    """Produce ``good`` to the input's topic (idempotent producer, each to its original
    partition when the topic still has it); where each landed, by coordinate.
    :class:`KafkaError` when one was not acknowledged."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            **plan.producer_settings,
            "bootstrap.servers": plan.bootstrap,
            "enable.idempotence": "true",
            "acks": "all",
            "linger.ms": "20",
            "log_level": "0",
        }
    )
    placed: dict[str, dict[str, int]] = {}
    failures: list[str] = []

    def report(coordinate: str) -> Callable[[Any, Any], None]:
        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                failures.append(f"{coordinate}: {err}")
            else:
                placed[coordinate] = {"partition": msg.partition(), "offset": msg.offset()}

        return delivered

    for index, letter in enumerate(good, start=1):
        headers = [
            (REPLAY_OF, letter.coordinate.encode()),
            (REPLAY_ID, replay_id.encode()),
            (REPLAY_REASON, letter.reason.encode()[:1000]),
        ]
        kwargs: dict[str, Any] = {"headers": headers, "on_delivery": report(letter.coordinate)}
        if letter.partition in ends:
            kwargs["partition"] = letter.partition
        producer.produce(plan.topic, value=letter.value, key=letter.key, **kwargs)
        producer.poll(0)
        if progress is not None:
            progress(index, len(good))
    if producer.flush(60) != 0 or failures:
        raise KafkaError(
            f"replaying to topic {plan.topic!r}: {failures[:3] or 'flush timed out'}; run the "
            "same command again: what was produced is found in the topic, never produced twice"
        )
    return placed


def replay_dead_letters(
    letters: Sequence[DeadLetter],
    plan: ReplayPlan,
    ledger: ReplayLedger,
    *,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> ReplayResult:
    """Decode ``letters`` again; produce those that now decode to the input's topic, each
    once (see the module docstring); record those that fail again with their new reason."""
    replay_id = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:6]}"
    result = ReplayResult(replay_id, selected=len(letters))
    if not dry_run:
        result.recovered_after_crash = recover(ledger, plan)
    done = ledger.produced()
    pending = [d for d in letters if d.coordinate not in done]
    result.already = len(letters) - len(pending)
    reasons = decode_again(pending, plan)
    good = [d for d, why in zip(pending, reasons, strict=True) if why is None]
    bad = [(d, why) for d, why in zip(pending, reasons, strict=True) if why is not None]
    result.failed_again = len(bad)
    result.reasons = {d.coordinate: str(why) for d, why in bad}
    if dry_run:
        result.replayed = len(good)
        return result
    at = datetime.now(UTC).isoformat()
    ledger.append(
        *(
            {
                "kind": "failed",
                "replay": replay_id,
                "coordinate": d.coordinate,
                "reason": why,
                "previous_reason": d.reason,
                "at": at,
            }
            for d, why in bad
        )
    )
    if not good:
        return result
    ends = _end_offsets(plan)
    ledger.append(
        {
            "kind": "intent",
            "replay": replay_id,
            "topic": plan.topic,
            "ends": {str(p): o for p, o in ends.items()},
            "coordinates": [d.coordinate for d in good],
            "at": at,
        }
    )
    placed = _produce_again(good, plan, replay_id, ends, progress)
    if os.environ.get(FAULT_ENV) == "after-produce":
        os._exit(137)  # tests: a kill -9 between producing and recording
    ledger.append(
        *(
            {"kind": "produced", "replay": replay_id, "coordinate": c, **where}
            for c, where in placed.items()
        ),
        {"kind": "done", "replay": replay_id},
    )
    result.replayed = len(placed)
    return result
