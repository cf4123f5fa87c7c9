"""One ``Mode`` enum decides what each mode reads and writes; durations are parsed once, when a
config is loaded, and carry their value (``.micros``) to every user of the config."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import pytest

import kappaplus
from kappaplus.config import parse_config, resolve
from kappaplus.core.errors import ConfigError
from kappaplus.core.modes import MODES, Mode
from kappaplus.core.timeutil import Duration
from kappaplus.runtime.options import RunOptions

CONFIG = """
job = "kappaplus.examples.sessionization:JOB"
watermark_delay = "10 minutes"
[inputs.events.kafka]
topic = "events"
bootstrap_servers = "localhost:9092"
[inputs.events.hive]
table = "raw.events"
event_time_column = "event_time"
[inputs.events.event_time_bounds]
max_future = "2 hours"
[outputs.sessions.hive]
table = "agg.sessions"
[mode.backfill]
watermark_delay = 0
"""


MODE_COMPARISON = re.compile(
    r"\bmode\s*(==|!=|\bin\s*[(\[{])"  # mode == "stream", run.mode in ("backfill", ...)
    r"|(==|!=|\bis\b|\bis not\b)\s*Mode\.[A-Z]"  # x is Mode.STREAM
    r"|Mode\.[A-Z]+\s*(==|!=|\bis\b)"  # Mode.STREAM == x
    r"|[\"'](stream|backfill|bootstrap)[\"']\s*(==|!=)"  # "stream" == mode
)
STRATEGIES = {"kappaplus/core/modes.py", "kappaplus/runtime/binding/modes.py"}


def mode_comparisons(package: Path) -> list[str]:
    """Every line outside the strategies that compares a run mode with a name."""
    found = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package.parent).as_posix()
        if relative in STRATEGIES:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if MODE_COMPARISON.search(code):
                found.append(f"{relative}:{number}: {line.strip()}")
    return found


def test_only_the_strategies_ask_which_mode_a_run_is_in(tmp_path: Path) -> None:
    package = Path(kappaplus.__file__).parent
    assert mode_comparisons(package) == []
    # the check sees each way of asking (it cannot pass by seeing nothing)
    probe = tmp_path / "kappaplus" / "probe.py"
    probe.parent.mkdir()
    probe.write_text(
        'if run.mode == "backfill": pass\n'
        'late = x if mode != "stream" else y\n'
        'if record.mode in ("backfill", "bootstrap"): pass\n'
        "ok = run.mode is Mode.STREAM\n"
        'ok = "bootstrap" == mode\n'
        'if output_mode == "append": pass\n'
    )
    assert [f.split(":")[1] for f in mode_comparisons(probe.parent)] == ["1", "2", "3", "4", "5"]


def test_modes_decide_what_a_run_reads() -> None:
    assert [m.value for m in Mode] == list(MODES) == ["stream", "backfill", "bootstrap"]
    assert [(m.reads_kafka, m.reads_lake, m.has_end) for m in Mode] == [
        (True, False, False),
        (False, True, True),
        (True, True, False),
    ]
    cfg = parse_config(CONFIG)
    for mode in Mode:
        binding = resolve(cfg, mode).inputs["events"]
        assert (binding.kafka is not None, binding.hive is not None) == (
            mode.reads_kafka,
            mode.reads_lake,
        )


def test_run_options_take_a_mode_name_and_refuse_others() -> None:
    assert RunOptions("backfill").mode is Mode.BACKFILL
    with pytest.raises(ConfigError, match="replay"):
        RunOptions("replay")  # type: ignore[arg-type]


def test_durations_are_parsed_once_and_keep_their_text() -> None:
    cfg = parse_config(CONFIG)
    stream, backfill = resolve(cfg, "stream"), resolve(cfg, "backfill")
    assert stream.watermark_delay == "10 minutes"
    assert stream.watermark_delay is not None and stream.watermark_delay.micros == 600_000_000
    assert backfill.watermark_delay is not None and backfill.watermark_delay.micros == 0
    bounds = cfg.inputs["events"].event_time_bounds
    assert bounds.max_future is not None and bounds.max_future.delta.total_seconds() == 7200
    # a default is parsed too, and a Duration survives pickling (Spark ships closures)
    assert (
        parse_config(CONFIG.replace('max_future = "2 hours"', ""))
        .inputs["events"]
        .event_time_bounds.max_future.micros
        == 86_400_000_000
    )
    assert pickle.loads(pickle.dumps(Duration.parse("90 s"))).micros == 90_000_000


def test_duration_units_and_bad_numbers() -> None:
    from kappaplus.core.timeutil import parse_duration, parse_timestamp

    assert parse_duration("500 ms") == 500_000, "milliseconds, not minutes"
    assert parse_duration("5 us") == 5 and parse_duration("2 mins") == 120_000_000
    assert parse_duration("3 hrs") == parse_duration("3 hours") == 3 * 3_600_000_000
    for bad in ("inf", "1e400", "1e400 s", "nan"):
        with pytest.raises(ConfigError, match="'lateness'"):
            parse_duration(bad, "lateness")
    with pytest.raises(ConfigError, match="'start' = '\u00b2'"):
        parse_timestamp("\u00b2", "start")
