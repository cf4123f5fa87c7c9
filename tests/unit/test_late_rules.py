"""The late-row rules (kappaplus.core.late_rules) against Spark's own window assignment and
independent arithmetic."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kappaplus.core.errors import ConfigError
from kappaplus.core.late_rules import LateRule

US = 1_000_000
BASE = int(datetime(2024, 3, 1, tzinfo=UTC).timestamp()) * US


@settings(max_examples=200, deadline=None)
@given(
    times=st.lists(st.one_of(st.none(), st.integers(BASE, BASE + 10**11)), max_size=50),
    watermark=st.integers(0, BASE + 10**11),
    size=st.sampled_from([1, 7, 60, 600]),
)
def test_rules_match_independent_arithmetic(times, watermark, size) -> None:
    params = {"w": f"{size} seconds"}
    size_us = size * US
    tumbling = LateRule.parse("window:w", params).late_mask(times, watermark)
    session = LateRule.parse("session:w", params).late_mask(times, watermark)
    plain = LateRule.parse("event_time", params).late_mask(times, watermark)
    for i, t in enumerate(times):
        if t is None or watermark <= 0:
            assert not (tumbling[i] or session[i] or plain[i])
            continue
        assert tumbling[i] == ((t // size_us + 1) * size_us <= watermark)
        assert session[i] == (t + size_us <= watermark)
        assert plain[i] == (t <= watermark)


def test_window_ends_are_sparks(spark) -> None:  # type: ignore[no-untyped-def]
    """The end of the last window holding each time, as Spark's F.window computes it."""
    from pyspark.sql import functions as F

    rng = np.random.default_rng(4)
    times = (BASE + rng.integers(0, 10**10, 300)).tolist()
    df = spark.createDataFrame([(t,) for t in times], "t long").select(
        "t", F.timestamp_micros("t").alias("ts")
    )
    cases = (("window:w", ("10 minutes",)), ("window:w/s", ("10 minutes", "3 minutes")))
    for spec, window in cases:
        ends = {
            r.t: r.end
            for r in df.groupBy("t")
            .agg(F.max(F.unix_micros(F.window("ts", *window).end)).alias("end"))
            .collect()
        }
        params = {"w": window[0], "s": window[-1]}
        rule = LateRule.parse(spec, params)
        for watermark in (BASE, BASE + 10**9, BASE + 5 * 10**9):
            got = rule.late_mask(times, watermark).tolist()
            assert got == [ends[t] <= watermark for t in times], spec


@pytest.mark.parametrize(
    "text, problem",
    [
        ("windows:w", "expected"),
        ("window:", "names the job param"),
        ("window:nope", "no job param"),
        ("session:w/w", "names the job param"),
        ("event_time:w", "takes no param"),
    ],
)
def test_bad_rules_name_the_key(text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        LateRule.parse(text, {"w": "1 minute"}, "job j.out.late_by")
    assert "job j.out.late_by" in str(caught.value) and problem in str(caught.value)


def test_a_late_table_needs_the_outputs_rule(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from kappaplus.config import LateRowsTarget
    from kappaplus.jobs import InputSpec, Job, OutputSpec
    from kappaplus.runtime.side_outputs.late_rows import late_rows_plans

    def job(late_by: str | None) -> Job:
        return Job(
            name="j",
            inputs=[InputSpec("events", "id STRING, ts TIMESTAMP", "ts")],
            outputs=[OutputSpec("counts", late_by=late_by)],
            transform=lambda inputs, params: {"counts": inputs["events"]},
            params={"window": "1 minute"},
        )

    target = {"counts": LateRowsTarget(table="counts_late")}
    with pytest.raises(ConfigError) as caught:
        late_rows_plans(job(None), {"window": "1 minute"}, target, tmp_path)
    assert "outputs.counts.late" in str(caught.value) and "late_by" in str(caught.value)
    (plan,) = late_rows_plans(job("window:window"), {"window": "1 minute"}, target, tmp_path)
    assert (plan.rule.kind, plan.rule.size, plan.table) == ("window", 60 * US, "counts_late")
    assert late_rows_plans(job("window:window"), {"window": "1 minute"}, {}, tmp_path) == []
    with pytest.raises(ConfigError, match="no job param"):
        job("window:size")
