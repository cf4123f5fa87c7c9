"""Job definition: specs validate at construction, jobs load by dotted path, run checks outputs."""

from __future__ import annotations

import textwrap
from datetime import datetime
from pathlib import Path

import pytest

from kappaplus.core.errors import ConfigError
from kappaplus.jobs import InputSpec, Job, OutputSpec, Params, ddl_field_names, load_job

RIDES_DDL = "ride_id string, city string, fare double, event_time timestamp"


def _counts(inputs, params):  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    rides = inputs["rides"]
    counted = rides.groupBy(F.window("event_time", params.window), "city").count()
    return {"counts": counted.select(F.col("window.start").alias("start"), "city", "count")}


def _job(**changes):  # type: ignore[no-untyped-def]
    spec = dict(
        name="ride-counts",
        inputs=[InputSpec("rides", RIDES_DDL, "event_time")],
        outputs=[OutputSpec("counts", event_time_column="start")],
        transform=_counts,
        watermark_delay="10 seconds",
        params={"window": "10 seconds", "min_fare": 2.5},
        window_params=["window"],
    )
    spec.update(changes)
    return Job(**spec)


def test_ddl_field_names_handles_nested_types_and_backticks() -> None:
    ddl = "a string, `b c` map<string, int>, d struct<x: int, y: array<string>>, e decimal(10, 2)"
    assert ddl_field_names(ddl) == ["a", "b c", "d", "e"]


def test_input_spec_requires_event_time_column_in_schema() -> None:
    with pytest.raises(ConfigError) as err:
        InputSpec("rides", RIDES_DDL, "ts")
    assert err.value.option == "inputs.rides.event_time_column"
    assert err.value.value == "ts"
    assert "event_time" in str(err.value)


def test_input_spec_rejects_bad_names() -> None:
    with pytest.raises(ConfigError, match="input.name"):
        InputSpec("ride events", RIDES_DDL, "event_time")


def test_output_spec_defaults_partition_by_event_date() -> None:
    out = OutputSpec("counts")
    assert (out.output_mode, out.partition_by) == ("append", "dt")
    with pytest.raises(ConfigError, match="outputs.counts.output_mode"):
        OutputSpec("counts", output_mode="complete")  # type: ignore[arg-type]


def test_job_validates_declarations() -> None:
    with pytest.raises(ConfigError, match="declared twice"):
        _job(inputs=[InputSpec("rides", RIDES_DDL, "event_time")] * 2)
    with pytest.raises(ConfigError, match="watermark_delay"):
        _job(watermark_delay="soon")
    with pytest.raises(ConfigError, match="window_params"):
        _job(window_params=["slice"])
    with pytest.raises(ConfigError, match="params.window"):
        _job(params={"window": "wide"})


def test_params_are_read_only_and_name_missing_keys() -> None:
    params = Params({"window": "10 seconds"})
    assert params.window == "10 seconds"
    assert params.duration_micros("window") == 10_000_000
    with pytest.raises(AttributeError, match="read-only"):
        params.window = "1 hour"  # type: ignore[misc]
    with pytest.raises(AttributeError, match="'slice'"):
        _ = params.slice
    with pytest.raises(KeyError, match="'slice'"):
        _ = params["slice"]
    with pytest.raises(TypeError):
        params._values["window"] = "x"  # type: ignore[index]


def test_make_params_overrides_known_keys_only() -> None:
    job = _job()
    assert job.make_params({"window": "2 hours"}).window == "2 hours"
    assert job.make_params().min_fare == 2.5
    with pytest.raises(ConfigError) as err:
        job.make_params({"windw": "2 hours"})
    assert err.value.option == "params.windw"


def test_load_job_by_dotted_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "myjobs"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "rides.py").write_text(
        textwrap.dedent(
            f"""
            from kappaplus.jobs import InputSpec, Job, OutputSpec

            def transform(inputs, params):
                return {{"out": inputs["rides"]}}

            JOB = Job(name="passthrough", inputs=[InputSpec("rides", {RIDES_DDL!r}, "event_time")],
                      outputs=[OutputSpec("out", event_time_column="event_time")],
                      transform=transform)

            def make_job():
                return JOB

            NOT_A_JOB = 42
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    job = load_job("myjobs.rides:JOB")
    assert job.name == "passthrough" and job.input_names == ["rides"]
    assert load_job("myjobs.rides:make_job") is job
    cases = {
        "myjobs.rides": "dotted path",
        "myjobs.nowhere:JOB": "cannot import module 'myjobs.nowhere'",
        "myjobs.rides:MISSING": "no attribute 'MISSING'",
        "myjobs.rides:NOT_A_JOB": "is a int, not a kappaplus Job",
    }
    for path, message in cases.items():
        with pytest.raises(ConfigError, match=message) as err:
            load_job(path)
        assert err.value.option == "job" and err.value.value == path


def test_run_binds_inputs_and_checks_outputs(spark) -> None:  # type: ignore[no-untyped-def]
    job = _job()
    schema = job.input("rides").struct_type()
    rows = [
        ("r1", "sf", 10.0, datetime(2024, 1, 1, 0, 0, 1)),
        ("r2", "sf", 12.0, datetime(2024, 1, 1, 0, 0, 9)),
        ("r3", "sf", 11.0, datetime(2024, 1, 1, 0, 0, 11)),
        ("r4", "ny", 9.0, datetime(2024, 1, 1, 0, 0, 2)),
    ]
    rides = spark.createDataFrame(rows, schema)
    out = job.run({"rides": rides}, job.make_params())
    got = sorted((r.start.second, r.city, r["count"]) for r in out["counts"].collect())
    assert got == [(0, "ny", 1), (0, "sf", 2), (10, "sf", 1)]
    # a bigger window (a backfill tuning) changes only the grouping, not the code
    wide = job.run({"rides": rides}, job.make_params({"window": "1 hour"}))
    assert sorted((r.city, r["count"]) for r in wide["counts"].collect()) == [("ny", 1), ("sf", 3)]

    with pytest.raises(ConfigError, match="inputs not bound"):
        job.run({})
    bad = _job(transform=lambda inputs, params: {"other": inputs["rides"]})
    with pytest.raises(ConfigError, match=r"returned outputs \['other'\]"):
        bad.run({"rides": rides})


def test_struct_type_requires_timestamp_event_time(spark) -> None:  # type: ignore[no-untyped-def]
    spec = InputSpec("rides", "ride_id string, event_time string", "event_time")
    with pytest.raises(ConfigError, match="must be a timestamp column"):
        spec.struct_type()
