"""Claims of Kafka targets: which query wrote a topic, over which event times.

A Hive table records who wrote it in its commit markers
(:mod:`kappaplus.connectors.hive.commits`); a topic has no such place of its own. So a run's
output query records its *claim* on the topic it writes in a small compacted topic on the
same cluster, :data:`CLAIMS_TOPIC` (``_kappa_claims``, one partition, created on first use
with ``cleanup.policy=compact``): one record per (target topic, query), keyed
``<topic>\\x00<query>``, whose value is the query's provenance (run identity, job, mode,
range, output, checkpoint), the last batch it claimed and the event-time span (``[min,
max]`` epoch microseconds of the output's event-time column) of every row it has produced
so far. Compaction keeps the last claim per key.

The claim is produced (and acknowledged) **before** the batch's records: a crash in between
leaves a claim wider than the records, never records outside a claim. It is produced again
only when the span widens, so a backfill writes a few claims and a stream about one per
batch with new event times. Every record the runtime produces also carries the header
:data:`QUERY_HEADER` (the query name), so a consumer can tell the runs apart (or keep one
of two deliberately appended copies).

What it cannot see: records written to the topic by producers other than kappaplus's
runtime (a service, ``kafka-console-producer``, the ``kappa_kafka`` sink used directly),
records written before claims were recorded, and claims lost with the claims topic (deleted,
or a cluster whose retention deletes compacted records). It is a refusal before the first
batch, not a lock: two runs started at the same moment on two machines both see no claim
(on one machine the run's target lock, :mod:`kappaplus.runtime.state.locks`, serializes
them).

>>> claim_key("rides_backfill", "job-backfill-counts-1a2b")
b'rides_backfill\\x00job-backfill-counts-1a2b'
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kappaplus.core.errors import KafkaError

log = logging.getLogger(__name__)

CLAIMS_TOPIC = "_kappa_claims"
"""Where the claims of every Kafka target of a cluster are recorded."""

QUERY_HEADER = "kappa.query"
"""The header naming the query that produced a record."""

CLAIM_VERSION = 1


def claim_key(topic: str, query: str) -> bytes:
    """The key of ``query``'s claim on ``topic`` (a NUL cannot be in a topic name)."""
    return f"{topic}\x00{query}".encode()


@dataclass(frozen=True)
class TopicClaim:
    """What one query (one checkpoint) recorded of the records it produced to a topic."""

    topic: str
    query: str
    batch: int
    """The last batch id it claimed (its records may not all be produced yet)."""
    provenance: dict[str, Any] | None
    span: tuple[int, int] | None
    """``(min, max)`` event time of its rows so far; None if it produced none (or the
    output has no timestamp event-time column)."""

    def as_json(self) -> dict[str, Any]:
        return {
            "version": CLAIM_VERSION,
            "topic": self.topic,
            "query": self.query,
            "batch": self.batch,
            "provenance": self.provenance,
            "span": None if self.span is None else list(self.span),
            "claimed_at": time.time(),
        }

    @classmethod
    def parse(cls, value: bytes) -> TopicClaim | None:
        """The claim a record's value holds; None if it is not one (never fails)."""
        try:
            data = json.loads(value)
            span = data.get("span")
            return cls(
                str(data["topic"]),
                str(data["query"]),
                int(data.get("batch", 0)),
                data.get("provenance") if isinstance(data.get("provenance"), dict) else None,
                (int(span[0]), int(span[1])) if isinstance(span, list) and len(span) == 2 else None,
            )
        except (ValueError, KeyError, TypeError, IndexError):
            return None


def _client(bootstrap: str, settings: Mapping[str, str]) -> dict[str, str]:
    return {**settings, "bootstrap.servers": bootstrap}


def _exists(bootstrap: str, settings: Mapping[str, str], topic: str) -> bool:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**_client(bootstrap, settings), "log_level": "0"})
    try:
        # every topic: a metadata request naming one may create it on brokers that
        # auto-create topics
        metadata = admin.list_topics(timeout=10)
    except Exception as exc:
        raise KafkaError(
            f"cannot read the metadata of {bootstrap} (claims topic {topic!r}): {exc}"
        ) from exc
    found = metadata.topics.get(topic)
    return found is not None and found.error is None and bool(found.partitions)


def read_claims(
    bootstrap: str,
    settings: Mapping[str, str],
    topic: str,
    claims_topic: str = CLAIMS_TOPIC,
) -> list[TopicClaim]:
    """The last claim of every query on ``topic`` (none when the claims topic does not
    exist yet), read from the beginning of the claims topic to its true end."""
    from kappaplus.connectors.kafka.whole_topic import read_ranges, true_ends

    if not _exists(bootstrap, settings, claims_topic):
        return []
    prefix = f"{topic}\x00".encode()
    latest: dict[bytes, TopicClaim | None] = {}
    ranges = true_ends(bootstrap, settings, claims_topic)
    for message in read_ranges(
        bootstrap, settings, claims_topic, ranges, group_prefix="kappa-claims"
    ):
        key = message.key()
        if not key or not key.startswith(prefix):
            continue
        value = message.value()
        latest[key] = None if value is None else TopicClaim.parse(value)  # None: tombstone
    return [claim for claim in latest.values() if claim is not None and claim.topic == topic]


def _ensure_topic(bootstrap: str, settings: Mapping[str, str], topic: str) -> None:
    """Create the compacted claims topic (one partition) unless it exists."""
    from confluent_kafka.admin import AdminClient, NewTopic

    if _exists(bootstrap, settings, topic):
        return
    admin = AdminClient({**_client(bootstrap, settings), "log_level": "0"})
    new = NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})
    try:
        admin.create_topics([new], operation_timeout=10)[topic].result(timeout=15)
    except Exception as exc:  # noqa: BLE001 - created meanwhile by another run is fine
        if "already exists" not in str(exc).lower() and "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise KafkaError(
                f"cannot create the claims topic {topic!r} on {bootstrap}: {exc}; create it "
                f"(1 partition, cleanup.policy=compact) or let the run's principal create it"
            ) from exc
    deadline = time.monotonic() + 10
    while not _exists(bootstrap, settings, topic):
        if time.monotonic() > deadline:
            raise KafkaError(f"the claims topic {topic!r} on {bootstrap} did not appear")
        time.sleep(0.05)


def widen(span: tuple[int, int] | None, other: tuple[int, int] | None) -> tuple[int, int] | None:
    """The smallest ``(min, max)`` holding both (None: no rows).

    >>> widen((5, 9), (2, 6)), widen(None, (2, 6)), widen((5, 9), None)
    ((2, 9), (2, 6), (5, 9))
    """
    if span is None or other is None:
        return span if other is None else other
    return (min(span[0], other[0]), max(span[1], other[1]))


class TopicClaimer:
    """Records one output query's claim on its topic, batch by batch, on the driver."""

    def __init__(
        self,
        bootstrap: str,
        settings: Mapping[str, str],
        topic: str,
        query: str,
        provenance: Mapping[str, Any] | None,
        claims_topic: str = CLAIMS_TOPIC,
    ) -> None:
        self.bootstrap = bootstrap
        self.settings = dict(settings)
        self.topic = topic
        self.query = query
        self.provenance = None if provenance is None else dict(provenance)
        self.claims_topic = claims_topic
        self._claimed: TopicClaim | None = None
        self._loaded = False
        self._topic_ready = False

    def claimed(self) -> TopicClaim | None:
        """This query's last recorded claim (read once, then kept)."""
        if not self._loaded:
            mine = [
                c
                for c in read_claims(self.bootstrap, self.settings, self.topic, self.claims_topic)
                if c.query == self.query
            ]
            self._claimed = mine[0] if mine else None
            self._loaded = True
        return self._claimed

    def claim(self, batch_id: int, batch_span: tuple[int, int] | None) -> bool:
        """Record (and wait for the broker to acknowledge) that this query's rows cover
        ``batch_span`` too, before the batch's records are produced; nothing is produced
        when the recorded claim covers it already. Returns whether a claim was produced."""
        before = self.claimed()
        span = widen(None if before is None else before.span, batch_span)
        if before is not None and span == before.span:
            return False
        claim = TopicClaim(self.topic, self.query, batch_id, self.provenance, span)
        self._produce(claim)
        self._claimed = claim
        return True

    def _produce(self, claim: TopicClaim) -> None:
        """Produce ``claim`` and wait for it; the producer is let go after (a claim is
        rare: a run's producers must not outlive it, reconnecting to a broker gone)."""
        from confluent_kafka import Producer

        if not self._topic_ready:
            _ensure_topic(self.bootstrap, self.settings, self.claims_topic)
            self._topic_ready = True
        producer = Producer(
            {
                **_client(self.bootstrap, self.settings),
                "enable.idempotence": True,
                "linger.ms": 0,
                "log_level": 3,
            }
        )
        failures: list[str] = []

        def delivered(error: Any, _message: Any) -> None:
            if error is not None:
                failures.append(str(error))

        producer.produce(
            self.claims_topic,
            key=claim_key(claim.topic, claim.query),
            value=json.dumps(claim.as_json()).encode(),
            on_delivery=delivered,
        )
        remaining = producer.flush(30)
        del producer
        if failures or remaining:
            raise KafkaError(
                f"cannot record the claim of query {claim.query} on topic {claim.topic} in "
                f"{self.claims_topic!r}: {failures[0] if failures else 'not acknowledged'}; "
                "the batch is not written (Spark retries it)"
            )
        log.debug(
            "claim of %s on %s: batch %s, span %s",
            claim.query,
            claim.topic,
            claim.batch,
            claim.span,
        )
