"""The aligned cut of a Kafka batch (``kappaplus.connectors.kafka.alignment.align``), on
timestamps given up front: batches never exceed the limit, always move, deliver every record
once in offset order, and, where stamps are in order, every record of a batch is stamped
before every record left for later batches, across partitions."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kappaplus.connectors.kafka.alignment import StaticTimes, align

TP = tuple[str, int]


def _drain(data: dict[TP, list[int]], limit: int) -> list[dict[TP, tuple[int, int]]]:
    """Batches ``{tp: (start, end)}`` until every partition is read."""
    times = StaticTimes({tp: (list(range(len(s))), s) for tp, s in data.items()})
    bases = {tp: 0 for tp in data}
    targets = {tp: len(s) for tp, s in data.items()}
    batches = []
    cut = None
    for _ in range(10_000):
        if bases == targets:
            return batches
        plan = align(bases, targets, limit, times, previous_cut_ms=cut)
        if plan.cut_ms is not None:
            cut = plan.cut_ms
        batches.append({tp: (bases[tp], plan.ends[tp]) for tp in data})
        bases = dict(plan.ends)
    raise AssertionError("no end")


stamps = st.lists(st.integers(0, 50), min_size=0, max_size=40)


@settings(max_examples=200, deadline=None)
@given(st.lists(stamps, min_size=2, max_size=4), st.integers(1, 25))
def test_ordered_stamps_are_cut_at_one_time(partitions: list[list[int]], limit: int) -> None:
    data = {("t", i): sorted(s) for i, s in enumerate(partitions)}
    batches = _drain(data, limit)
    for batch in batches:
        sizes = [end - start for start, end in batch.values()]
        assert 0 < sum(sizes) <= limit and min(sizes) >= 0
    for tp, s in data.items():  # every record once, in order
        spans = [b[tp] for b in batches] or [(0, 0)]
        assert spans[0][0] == 0 and spans[-1][1] == len(s)
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
    for index, batch in enumerate(batches):
        taken = [data[tp][i] for tp, (a, b) in batch.items() for i in range(a, b)]
        later = [
            data[tp][i]
            for other in batches[index + 1 :]
            for tp, (a, b) in other.items()
            for i in range(a, b)
        ]
        # a batch split only because one stamp alone holds more than the limit may share it
        if taken and later:
            assert max(taken) <= min(later)


@settings(max_examples=200, deadline=None)
@given(st.lists(stamps, min_size=2, max_size=4), st.integers(1, 25))
def test_unordered_stamps_still_deliver_everything_once(
    partitions: list[list[int]], limit: int
) -> None:
    data = {("t", i): s for i, s in enumerate(partitions)}
    batches = _drain(data, limit)
    for batch in batches:
        assert 0 < sum(end - start for start, end in batch.values()) <= limit
    for tp, s in data.items():
        assert sum(end - start for start, end in (b[tp] for b in batches)) == len(s)


def test_a_dense_and_a_sparse_partition_advance_together() -> None:
    dense = list(range(0, 1000, 1))  # a record every ms
    sparse = list(range(0, 1000, 10))  # every 10 ms
    batches = _drain({("t", 0): dense, ("t", 1): sparse}, 110)
    first = batches[0]
    assert first[("t", 0)] == (0, 100) and first[("t", 1)] == (0, 10)  # both up to 100 ms


def test_caught_up_reads_everything_and_untimed_partitions_get_a_fair_share() -> None:
    times = StaticTimes({("t", 0): ([0, 1, 2], [5, 6, 7]), ("t", 1): ([0, 1, 2], [-1, -1, -1])})
    plan = align({("t", 0): 0, ("t", 1): 0}, {("t", 0): 3, ("t", 1): 3}, 10, times)
    assert plan.ends == {("t", 0): 3, ("t", 1): 3} and plan.cut_ms is None
    plan = align({("t", 0): 0, ("t", 1): 0}, {("t", 0): 3, ("t", 1): 3}, 4, times)
    assert plan.untimed == [("t", 1)] and plan.ends[("t", 1)] == 2
    assert sum(plan.ends.values()) <= 4


def test_out_of_order_and_far_future_stamps_are_counted() -> None:
    # partition 1: a record stamped far ahead, then records back in the past
    times = StaticTimes(
        {
            ("t", 0): (list(range(6)), [10, 20, 30, 40, 50, 60]),
            ("t", 1): ([0, 1, 2, 3], [10, 10**9, 15, 16]),
        }
    )
    plan = align(
        {("t", 0): 0, ("t", 1): 0},
        {("t", 0): 6, ("t", 1): 4},
        4,
        times,
        previous_cut_ms=12,
        max_skew_ms=1000,
    )
    assert plan.skewed == {("t", 1): 1}  # the far-future stamp did not hold partition 1 back
    assert plan.ends[("t", 1)] == 3  # up to the record stamped 16, the cut
    assert plan.out_of_order == {("t", 0): 1, ("t", 1): 1}  # stamped before the last cut


def test_a_partition_quiet_for_long_is_no_spike() -> None:
    day = 24 * 3600 * 1000
    times = StaticTimes(
        {("t", 0): ([0, 1, 2], [0, 2 * day, 2 * day + 1]), ("t", 1): ([0, 1, 2], [1, 2, 3])}
    )
    plan = align({("t", 0): 0, ("t", 1): 0}, {("t", 0): 3, ("t", 1): 3}, 4, times, max_skew_ms=day)
    assert plan.skewed == {} and plan.ends == {("t", 0): 1, ("t", 1): 3}
