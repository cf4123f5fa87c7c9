"""``--until-idle`` stops a run that has nothing to read (issue 47, item 4).

A bootstrap that had finished, run again with the same command: its queries resume from
their checkpoints at the head of the topic and never run a batch. Idleness counts from the
start of the run, whether or not a batch ever ran: the rerun stops by itself once it has
been idle ``--until-idle`` seconds, finished (exit 0). Before, it said "live (caught up in 0
batches)" every 10 s until it was killed (here: until ``--timeout`` stopped it).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from runtime_helpers import uid
from test_catch_up import JOB, START, config, flights, output, produce, truth

from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import RunResult, run_job
from kappaplus.runtime.state.records import exit_code


@pytest.mark.slow  # two bootstrap runs, the second idle for 15 s: about 2 minutes
@pytest.mark.timeout(900)
def test_a_finished_bootstrap_run_again_stops_when_idle(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    from kappaplus.examples.generate import write_table

    rows = flights(0, 720)  # four hours
    flush = [{**r, "event_time": r["event_time"] + timedelta(days=1)} for r in flights(720, 8)]
    cutoff = START + timedelta(hours=2)
    table, out, late = f"idle_lake_{uid()}", f"idle_boot_{uid()}", f"idle_late_{uid()}"
    lake = [r for r in rows if r["event_time"] < cutoff + timedelta(hours=1)]
    write_table(spark, table, lake, "flight_id string, origin string, event_time timestamp")
    topic = new_topic(partitions=4, prefix="idle-boot")
    produce(kafka_bootstrap, topic, rows + flush)
    hive = {
        "hive": {
            "table": table,
            "event_time_column": "event_time",
            "partition_format": "dt=%Y-%m-%d/hr=%H",
        }
    }
    job_config = config(topic, kafka_bootstrap, scratch, out, late, **hive)

    def bootstrap(until_idle: float, timeout: float) -> RunResult:
        options = RunOptions(
            "bootstrap",
            start=START.isoformat(),
            cutoff=cutoff.isoformat(),
            lateness="1 hour",
            until_idle=until_idle,
            timeout=timeout,
        )
        return run_job(spark, JOB, job_config, options)

    first = bootstrap(4.0, timeout=600.0)
    assert first.status == "finished" and first.record.stopped_by is None
    assert output(spark, out, START + timedelta(hours=23)) == truth(rows)

    # the same command again: nothing to read; it must stop by itself, not by --timeout
    # (--timeout only bounds the test: before, the rerun ran until it, "live (caught up in
    # 0 batches)" every 10 s)
    again = bootstrap(15.0, timeout=240.0)
    record = again.record
    assert again.tracker.stats["counts"].input_batches == 0
    assert record.stopped_by is None, f"stopped by {record.stopped_by}, not by idleness"
    assert again.status == "finished" and exit_code(record) == 0
    assert output(spark, out, START + timedelta(hours=23)) == truth(rows)  # nothing twice
