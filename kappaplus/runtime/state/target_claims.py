"""Who else wrote this target: no Hive table or Kafka topic holds two runs' rows for one
event-time range unless the user asks for it.

Every batch the Hive sink commits records the run it came from (``provenance``: run
identity, range, output, checkpoint) and the event-time span of the rows its query has
committed so far (``span``, from the output's event-time column; see
:mod:`kappaplus.connectors.hive.sink`). Before its first batch, a run looks at every other
query (another checkpoint) that committed batches to each of its Hive targets. If one
covers event times this run will write -- its recorded span, or its configured range when
it recorded no span, overlaps this run's range (a stream's range is unbounded) -- the run
is refused with :class:`~kappaplus.runtime.state.identity.IdentityError` (exit 2), naming the
table, the other run and its range, and the ways out:

- resume that run (its config and range: same checkpoint, same query: never refused);
- write to another table;
- ``--replace-range``: replace that run's rows over this run's range with this run's
  (:mod:`kappaplus.runtime.state.range_replace`);
- ``--append``: write anyway, deliberately (the rows of both runs stay).

A run that already committed batches to the table is a resumed run: it was checked (or
allowed by a flag) before its first batch, so it is not checked again and a restart is
never refused. This covers what a lost checkpoint, ``--fresh`` over a written table, a
corrected topic (a new binding: a new identity, a new checkpoint), two registered names of
the same files and a backfill into a table a stream wrote have in common.

Iceberg targets (:mod:`kappaplus.connectors.iceberg.sink`) record each query's last batch
in a table property but no event-time span: a run is refused when ANOTHER query committed
batches to the table, whatever their range (stricter than for Hive; ``--append`` writes
anyway; ``--replace-range`` is for Hive tables only).

Delta targets (:mod:`kappaplus.connectors.delta.sink`) likewise, by the application
transactions in the table's log (one ``txn`` appId per query that committed batches):
another query's appId in the table refuses the run unless ``--append``.

Kafka targets (``[outputs.<n>.kafka]``; a backfill writes ``<topic>_backfill``) follow
the Hive rule with what a topic can record: each output query records its claim on its
topic -- its provenance and the event-time span of every row it produced so far -- in the
compacted claims topic ``_kappa_claims`` of the same cluster, before each batch's records
(:mod:`kappaplus.connectors.kafka.claims`), and stamps its records with the header
``kappa.query``. Before its first batch, a run reads the claims on its topics: another
query's claim whose span (else its configured range) overlaps this run's range refuses the
run (exit 2) naming the topic, the other query and its span, and the ways out: resume that
run, write to another topic, or ``--append`` (records cannot be removed from a topic:
``--replace-range`` does not apply). A query that already claimed the topic is a resume,
never refused. It cannot see records of producers other than kappaplus's runtime, records
written before claims were recorded, nor claims lost with the claims topic.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kappaplus.core.modes import Mode
from kappaplus.core.timeutil import iso, parse_timestamp
from kappaplus.runtime.state.identity import IdentityError, RunIdentity

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyspark.sql import SparkSession

    from kappaplus.connectors.hive.commits import CommittedRun
    from kappaplus.runtime.binding.outputs import OutputPlan

log = logging.getLogger(__name__)

Span = tuple[int | None, int | None]
"""``[start, end)`` in epoch microseconds; None is unbounded."""


@dataclass(frozen=True)
class Claim:
    """Rows another run committed to a target over event times this run will write."""

    output: str
    table: str
    other: CommittedRun
    extent: Span
    """What the other run's rows cover: its recorded span (``[min, max]`` as
    ``[min, max + 1)``), else its configured range."""
    mine: Span
    """This run's range."""
    same_identity: bool = False
    """The other run is this run from another checkpoint (lost, moved or ``--fresh``)."""
    from_span: bool = False
    """``extent`` is the span of the other run's rows (``[min, max]``), not a range."""
    kind: str = "table"
    """``table`` (Hive) or ``topic`` (Kafka: its claims topic says who wrote it)."""

    @property
    def overlap(self) -> Span:
        """The event times both cover."""
        return (_max_start(self.extent[0], self.mine[0]), _min_end(self.extent[1], self.mine[1]))

    def shown_extent(self) -> str:
        """The other run's rows: ``rows over [min, max]`` or ``over [start, end)``."""
        if self.from_span:
            return f"rows over {show_span(self.extent, closed=True)}"
        return f"over {show_span(self.extent)}"

    def shown_overlap(self) -> str:
        """The event times both cover, closed where the other run's last row ends it."""
        start, end = self.overlap
        closed = self.from_span and end is not None and end == self.extent[1]
        return show_span((start, end), closed=closed)

    def describe(self) -> str:
        """``query Q (job J, backfill, checkpoint C) with rows over [a, b]``."""
        prov = self.other.provenance or {}
        return (
            f"query {self.other.query} (job {prov.get('job')}, {prov.get('mode')}, checkpoint "
            f"{prov.get('checkpoint')}) with {self.shown_extent()}"
        )


def _max_start(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _min_end(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def show_span(span: Span, *, closed: bool = False) -> str:
    """``[2024-03-01T00:00:00Z, 2024-03-02T00:00:00Z)``; ``-`` for an unbounded end;
    ``closed``: the span of rows, ``[min, max]`` (its end is ``max + 1``)."""
    start, end = span
    first = "-" if start is None else iso(start)
    if closed and end is not None:
        return f"[{first}, {iso(end - 1)}]"
    return f"[{first}, {'-' if end is None else iso(end)})"


def run_span(range_: Mapping[str, Any] | None) -> Span:
    """``[start, end)`` of a recorded run range: ``start``/``end`` of a backfill;
    ``[start, -)`` for a bootstrap (it continues on Kafka past its cutoff) and a stream."""
    range_ = range_ or {}
    start, end = range_.get("start"), range_.get("end")
    return (
        parse_timestamp(start, "start") if start else None,
        parse_timestamp(end, "end") if end else None,
    )


def extent_of(other: CommittedRun) -> Span:
    """What ``other``'s committed rows cover: its span, else its configured range."""
    if other.span is not None:
        return (other.span[0], other.span[1] + 1)
    return run_span((other.provenance or {}).get("range"))


def overlaps(a: Span, b: Span) -> bool:
    """Whether two ``[start, end)`` spans share an event time (None: unbounded).

    >>> overlaps((0, 10), (10, 20)), overlaps((0, 11), (10, None)), overlaps((None, None), (5, 6))
    (False, True, True)
    """
    if a[1] is not None and b[0] is not None and a[1] <= b[0]:
        return False
    return not (b[1] is not None and a[0] is not None and b[1] <= a[0])


def subtract(span: Span, removed: tuple[tuple[int, int], ...]) -> list[Span]:
    """What is left of ``span`` once the ``[start, end)`` ranges ``removed`` are taken out.

    >>> subtract((0, 10), ((3, 5),)), subtract((0, 10), ((0, 10),)), subtract((None, 8), ((2, 4),))
    ([(0, 3), (5, 10)], [], [(None, 2), (4, 8)])
    """
    pieces = [span]
    for start, end in removed:
        left: list[Span] = []
        for a, b in pieces:
            if not overlaps((a, b), (start, end)):
                left.append((a, b))
                continue
            if a is None or a < start:
                left.append((a, start))
            if b is None or end < b:
                left.append((end, b))
        pieces = left
    return pieces


def find_claims(
    spark: SparkSession, plans: Mapping[str, OutputPlan], identity: RunIdentity
) -> list[Claim]:
    """Every other run's committed rows in this run's Hive targets, and every other query's
    claim on its Kafka topics, over event times this run will write; none for a target this
    run already committed batches to or claimed (a resume)."""
    from kappaplus.connectors.hive.commits import committed_runs

    mine = run_span(identity.range)
    ours = {plan.query_name for plan in plans.values()}
    claims: list[Claim] = []
    for plan in plans.values():
        claims.extend(_topic_claims(plan, identity, mine, ours))
        if plan.hive is None:
            continue
        table = plan.hive.table
        runs = committed_runs(spark, table)
        if any(run.query == plan.query_name for run in runs):
            continue  # resumed: checked before its first batch
        promoted = Mode(identity.mode).follows_promoted_backfill and _promoted_from(spark, table)
        for other in runs:
            prov = other.provenance
            if not prov:
                continue  # not written by a run (or before provenance was recorded)
            if other.query in ours:
                continue  # another output of this very run (same checkpoints)
            if promoted and prov.get("mode") == "backfill":
                # `kappa promote` made this backfill the production history, after checking
                # it finished and reconciles with the stream up to the stream's watermark:
                # the stream continues after it (the promotion's hand-over)
                log.info("table %s: rows of %s are its promoted history", table, other.query)
                continue
            whole = extent_of(other)
            left = [piece for piece in subtract(whole, other.replaced) if overlaps(piece, mine)]
            if not left:
                continue  # never overlapped, or its rows there were replaced
            extent = (left[0][0], left[-1][1])
            same = prov.get("key") == identity.key() and prov.get("output") == plan.name
            spanned = other.span is not None and extent[1] == whole[1]
            claims.append(Claim(plan.name, table, other, extent, mine, same, spanned))
    return claims


def _topic_claims(
    plan: OutputPlan, identity: RunIdentity, mine: Span, ours: set[str]
) -> list[Claim]:
    """Other queries' claims on the Kafka topic ``plan`` writes over event times this run
    will write (:mod:`kappaplus.connectors.kafka.claims`); none when this query claimed
    the topic already (a resume)."""
    from kappaplus.connectors.hive.commits import CommittedRun
    from kappaplus.connectors.kafka.claims import read_claims
    from kappaplus.runtime.binding.outputs import kafka_settings

    if plan.kafka is None:
        return []
    topic = plan.kafka.topic
    found = read_claims(plan.kafka.bootstrap_servers, kafka_settings(plan.kafka), topic)
    if any(claim.query == plan.query_name for claim in found):
        return []  # resumed: checked before its first batch
    claims = []
    for claim in found:
        prov = claim.provenance
        if not prov or claim.query in ours:
            continue
        other = CommittedRun(claim.query, claim.batch + 1, prov, claim.span)
        extent = extent_of(other)
        if not overlaps(extent, mine):
            continue
        same = prov.get("key") == identity.key() and prov.get("output") == plan.name
        claims.append(
            Claim(plan.name, topic, other, extent, mine, same, claim.span is not None, "topic")
        )
    return claims


def _promoted_from(spark: SparkSession, table: str) -> str | None:
    """The backfill table ``kappa promote`` put in as ``table`` (its property), or None."""
    try:
        rows = spark.sql(f"SHOW TBLPROPERTIES {table}").collect()
    except Exception:  # noqa: BLE001 - a table without properties was not promoted
        return None
    found = {str(row[0]): str(row[1]) for row in rows}
    return found.get("kappa.promote.from") or None


def refuse_other_queries(
    kind: str, table: str, queries: list[str], mine: str, *, append: bool
) -> None:
    """The lake-table rule (Iceberg, Delta): ``queries`` committed batches to ``table``; a
    run is refused (:class:`IdentityError`) when one of them is not its own query ``mine``
    and it has none there (a resume is never refused), unless ``append``."""
    if not queries or mine in queries:
        return
    if append:
        log.warning(
            "%s table %s holds batches of %s; --append: this run's rows are added",
            kind,
            table,
            ", ".join(queries),
        )
        return
    raise IdentityError(
        "output",
        table,
        f"{kind} table {table} already holds batches of another run "
        f"(query {', '.join(queries)}); this run's rows could repeat theirs. Resume that "
        "run with its own config, write to another table, or pass --append to add this "
        "run's rows beside them deliberately (--replace-range is for Hive tables)",
    )


def check_iceberg_targets(plans: Mapping[str, OutputPlan], *, append: bool = False) -> None:
    """Refuse (:class:`IdentityError`) to write an Iceberg target another query committed
    batches to (its ``kappa.batch.<query>`` table properties; see the module docstring),
    unless ``append``; a resumed query (its own batches in the table) is never refused."""
    from kappaplus.connectors.iceberg.sink import BATCH_PROPERTY_PREFIX, IcebergTableSink

    for plan in plans.values():
        if plan.iceberg is None:
            continue
        sink = IcebergTableSink(plan.iceberg.table, plan.iceberg.catalog, query=plan.query_name)
        try:
            table = sink.load()
        except Exception:  # noqa: BLE001 - missing (created by the first batch): no claim
            continue
        queries = sorted(
            key[len(BATCH_PROPERTY_PREFIX) :]
            for key in table.properties
            if key.startswith(BATCH_PROPERTY_PREFIX)
        )
        refuse_other_queries("Iceberg", plan.iceberg.table, queries, plan.query_name, append=append)


def check_delta_targets(plans: Mapping[str, OutputPlan], *, append: bool = False) -> None:
    """Refuse (:class:`IdentityError`) to write a Delta target whose log holds another
    query's application transactions (``txn`` appIds; see the module docstring), unless
    ``append``; a resumed query (its own appId in the log) is never refused."""
    from kappaplus.connectors.delta.sink import app_transactions, output_location

    for plan in plans.values():
        if plan.delta is None:
            continue
        found = app_transactions(output_location(plan.delta.path), plan.delta.storage_options)
        refuse_other_queries(
            "Delta", plan.delta.path, sorted(found), plan.query_name, append=append
        )


def check_targets(
    spark: SparkSession,
    plans: Mapping[str, OutputPlan],
    identity: RunIdentity,
    *,
    append: bool = False,
    replace_range: bool = False,
) -> list[Claim]:
    """Refuse (:class:`IdentityError`) a run whose Hive or Kafka targets hold another run's
    rows over event times it will write (module docstring), unless ``append`` or
    ``replace_range`` (Hive tables only) says what to do; the table claims that flag
    allowed (what a range replacement replaces)."""
    check_iceberg_targets(plans, append=append)
    check_delta_targets(plans, append=append)
    claims = find_claims(spark, plans, identity)
    if not claims:
        return []
    topics = [claim for claim in claims if claim.kind == "topic"]
    if replace_range and topics and not append:
        claim = topics[0]
        raise IdentityError(
            "output",
            claim.table,
            f"topic {claim.table} holds records of {claim.describe()}: --replace-range "
            "cannot remove records from a Kafka topic. Resume that run with its own config "
            "and range, write to another topic, or pass --append to add this run's records "
            "beside them deliberately",
        )
    if append or replace_range:
        for claim in claims:
            log.warning(
                "%s %s holds rows of %s; %s",
                claim.kind,
                claim.table,
                claim.describe(),
                "--append: this run's rows are added beside them"
                if append
                else f"--replace-range: this run replaces them over {claim.shown_overlap()}",
            )
        return [claim for claim in claims if claim.kind == "table"]
    claim = claims[0]
    others = f" (and {len(claims) - 1} more)" if len(claims) > 1 else ""
    if claim.kind == "topic":
        raise IdentityError("output", claim.table, _topic_refusal(claim, others))
    ways = (
        "write to another table, pass --replace-range to replace those rows over "
        f"{claim.shown_overlap()} with this run's, or --append to add this run's rows "
        "beside them deliberately"
    )
    if claim.same_identity:
        prov = claim.other.provenance or {}
        raise IdentityError(
            "output",
            claim.table,
            f"table {claim.table} already holds {claim.other.batches} batch(es) this run "
            f"committed ({claim.shown_extent()}) from the checkpoint "
            f"{prov.get('checkpoint')} (query {claim.other.query}), which is gone or was "
            f"started over (--fresh): running again would write those rows twice. Restore "
            f"that checkpoint, drop the table (DROP TABLE {claim.table}) to rewrite it, "
            f"or {ways}",
        )
    raise IdentityError(
        "output",
        claim.table,
        f"table {claim.table} already holds rows of another run{others}: "
        f"{claim.describe()}, and this run covers {show_span(claim.mine)}: those event times "
        f"would be written twice. Resume that run with its own config and range, or {ways}",
    )


def _topic_refusal(claim: Claim, others: str) -> str:
    """Why a run may not write the topic another query claimed, and the ways out."""
    ways = (
        "write to another topic, or pass --append to add this run's records beside them "
        "deliberately (each record names its query in the header kappa.query)"
    )
    if claim.same_identity:
        prov = claim.other.provenance or {}
        return (
            f"topic {claim.table} already holds records this run produced "
            f"({claim.shown_extent()}) from the checkpoint {prov.get('checkpoint')} (query "
            f"{claim.other.query}), which is gone or was started over (--fresh): running "
            f"again would produce them twice. Restore that checkpoint, or {ways}"
        )
    return (
        f"topic {claim.table} already holds records of another run{others}: "
        f"{claim.describe()}, and this run covers {show_span(claim.mine)}: those event times "
        f"would be produced twice. Resume that run with its own config and range, or {ways}"
    )
