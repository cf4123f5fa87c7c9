"""Job configuration: key paths in errors, allowed vs forbidden per-mode overrides, resolution."""

from __future__ import annotations

from pathlib import Path

import pytest

from kappaplus.config import (
    AVAILABLE_NOW,
    check_job,
    load_config,
    parse_config,
    resolve,
)
from kappaplus.core.errors import ConfigError
from kappaplus.jobs import InputSpec, Job, OutputSpec

BASE = """
job = "myjobs.rides:JOB"
watermark_delay = "10 seconds"
trigger_interval = "5 seconds"

[params]
window = "10 seconds"

[inputs.rides.kafka]
topic = "rides"
bootstrap_servers = "localhost:9092,broker-2:9093"
format = "json"
maxOffsetsPerTrigger = 5000
dlq = { topic = "rides_dlq" }

[inputs.rides.kafka.options]
"kafka.security.protocol" = "SASL_SSL"
"kafka.sasl.mechanism" = "PLAIN"
"kafka.sasl.password" = "hunter2"

[inputs.rides.hive]
table = "raw.rides"
event_time_column = "event_time"
partition_format = "dt=%Y-%m-%d/hr=%H"
partition_time = "arrival"
max_lateness = "2 hours"
max_event_time_per_trigger = "1 hour"

[outputs.counts.hive]
table = "agg.ride_counts"

[outputs.counts.kafka]
topic = "ride_counts"
bootstrap_servers = "localhost:9092"
"""


def _error(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        parse_config(text)
    return err.value


def _job() -> Job:
    return Job(
        name="ride-counts",
        inputs=[InputSpec("rides", "ride_id string, event_time timestamp", "event_time")],
        outputs=[OutputSpec("counts", event_time_column="start")],
        transform=lambda inputs, params: {"counts": inputs["rides"]},
        watermark_delay="30 seconds",
        params={"window": "10 seconds", "min_fare": 2.5},
        window_params=["window"],
    )


def test_valid_config_loads_with_types() -> None:
    cfg = parse_config(BASE)
    rides = cfg.inputs["rides"]
    assert rides.kafka is not None and rides.hive is not None
    assert rides.kafka.max_offsets_per_trigger == 5000
    assert rides.kafka.dlq is not None and rides.kafka.dlq.topic == "rides_dlq"
    assert rides.hive.partition_time == "arrival"
    assert cfg.outputs["counts"].hive is not None


def test_secrets_never_appear_in_repr_or_errors() -> None:
    cfg = parse_config(BASE)
    assert "hunter2" not in repr(cfg)
    assert "hunter2" not in str(cfg.inputs["rides"].kafka)
    err = _error(BASE.replace('"kafka.security.protocol"', '"security.protocol"'))
    assert err.option == "inputs.rides.kafka.options"
    assert "security.protocol" in str(err)
    assert "hunter2" not in str(err)


@pytest.mark.parametrize(
    ("old", "new", "path", "value"),
    [
        ('table = "raw.rides"', 'table = "raw rides"', "inputs.rides.hive.table", "raw rides"),
        (
            '"localhost:9092,broker-2:9093"',
            '"localhost"',
            "inputs.rides.kafka.bootstrap_servers",
            "localhost",
        ),
        ('format = "json"', 'format = "xml"', "inputs.rides.kafka.format", "xml"),
        (
            "maxOffsetsPerTrigger = 5000",
            "maxOffsetsPerTrigger = -1",
            "inputs.rides.kafka.maxOffsetsPerTrigger",
            -1,
        ),
        (
            'max_lateness = "2 hours"',
            'max_lateness = "late"',
            "inputs.rides.hive.max_lateness",
            "late",
        ),
        (
            'partition_format = "dt=%Y-%m-%d/hr=%H"',
            'partition_format = "dt/%Y"',
            "inputs.rides.hive.partition_format",
            "dt/%Y",
        ),
        (
            'partition_time = "arrival"',
            'partition_time = "ingest"',
            "inputs.rides.hive.partition_time",
            "ingest",
        ),
        ('watermark_delay = "10 seconds"', 'watermark_delay = "soon"', "watermark_delay", "soon"),
        ('format = "json"', 'format = "json"\nformt = "avro"', "inputs.rides.kafka.formt", "avro"),
        (
            'dlq = { topic = "rides_dlq" }',
            'dlq = { topic = "a", table = "b" }',
            "inputs.rides.kafka.dlq",
            {"topic": "a", "table": "b"},
        ),
    ],
)
def test_errors_name_key_path_and_value(old: str, new: str, path: str, value: object) -> None:
    assert old in BASE
    err = _error(BASE.replace(old, new))
    assert err.option == path
    assert err.value == value
    assert path in str(err)


def test_missing_keys_are_named() -> None:
    err = _error(BASE.replace('table = "agg.ride_counts"', 'tabel = "agg.ride_counts"'))
    assert err.option == "outputs.counts.hive.table" and "missing" in str(err)
    assert "'outputs.counts.hive.tabel' = 'agg.ride_counts': unknown key" in str(err)
    err = _error(BASE.replace('event_time_column = "event_time"\n', ""))
    assert err.option == "inputs.rides.hive.event_time_column"
    assert "missing" in str(err)
    err = _error(BASE.replace('max_lateness = "2 hours"\n', ""))
    assert err.option == "inputs.rides.hive"
    assert "max_lateness" in str(err)


def test_arrival_partitions_need_max_lateness_and_avro_needs_schema() -> None:
    err = _error(BASE.replace('format = "json"', 'format = "avro"'))
    assert err.option == "inputs.rides.kafka" and "schema_file" in str(err)


def test_schema_file_resolves_relative_to_config_file(tmp_path: Path) -> None:
    text = BASE.replace('format = "json"', 'format = "avro"\nschema_file = "rides.avsc"')
    (tmp_path / "job.toml").write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "job.toml")
    assert err.value.option == "inputs.rides.kafka.schema_file"
    assert err.value.value == str(tmp_path / "rides.avsc")
    (tmp_path / "rides.avsc").write_text("{}")
    cfg = load_config(tmp_path / "job.toml")
    assert cfg.inputs["rides"].kafka is not None
    assert cfg.inputs["rides"].kafka.schema_file == tmp_path / "rides.avsc"


def test_load_config_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "none.toml")
    assert err.value.option == "config" and "not found" in str(err.value)
    (tmp_path / "bad.toml").write_text("job = [")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(tmp_path / "bad.toml")


ALLOWED = """
[mode.backfill]
watermark_delay = "2 hours"
trigger_interval = "available-now"
params = { window = "2 hours" }
[mode.backfill.inputs.rides.hive]
maxEventTimePerTrigger = "6 hours"
max_rows_per_trigger = 1000000
maxBytesPerTrigger = 1000000000
[mode.backfill.outputs.counts.hive]
table = "agg.ride_counts_rebuild"
[mode.stream]
trigger_interval = "1 second"
[mode.stream.inputs.rides.kafka]
max_offsets_per_trigger = 100
[mode.bootstrap.outputs.counts.kafka]
topic = "ride_counts_v2"
"""


def test_allowed_overrides_apply_per_mode() -> None:
    cfg = parse_config(BASE + ALLOWED)
    job = _job()
    backfill = resolve(cfg, "backfill", job)
    assert backfill.watermark_delay == "2 hours"
    assert backfill.trigger_available_now and backfill.trigger_interval == AVAILABLE_NOW
    assert backfill.params == {"window": "2 hours", "min_fare": 2.5}
    hive = backfill.inputs["rides"].hive
    assert hive is not None and backfill.inputs["rides"].kafka is None
    assert hive.max_event_time_per_trigger == "6 hours"
    assert (hive.max_rows_per_trigger, hive.max_bytes_per_trigger) == (1_000_000, 1_000_000_000)
    assert hive.table == "raw.rides"  # the input table is not a per-mode thing
    assert backfill.outputs["counts"].hive.table == "agg.ride_counts_rebuild"  # type: ignore[union-attr]
    assert backfill.outputs["counts"].kafka.topic == "ride_counts_backfill"  # type: ignore[union-attr]
    assert "mode.backfill.params.window" in backfill.overridden

    stream = resolve(cfg, "stream", job)
    assert stream.watermark_delay == "10 seconds" and stream.trigger_interval == "1 second"
    assert stream.params["window"] == "10 seconds"
    assert stream.inputs["rides"].hive is None
    assert stream.inputs["rides"].kafka.max_offsets_per_trigger == 100  # type: ignore[union-attr]
    assert stream.outputs["counts"].hive.table == "agg.ride_counts"  # type: ignore[union-attr]

    boot = resolve(cfg, "bootstrap", job)
    assert boot.inputs["rides"].kafka is not None and boot.inputs["rides"].hive is not None
    assert boot.outputs["counts"].kafka.topic == "ride_counts_v2"  # type: ignore[union-attr]
    assert boot.outputs["counts"].hive.table == "agg.ride_counts"  # type: ignore[union-attr]
    # the config object itself is untouched by resolution
    assert cfg.inputs["rides"].hive.max_event_time_per_trigger == "1 hour"  # type: ignore[union-attr]


def test_backfill_targets_default_and_explicit() -> None:
    cfg = parse_config(
        BASE.replace(
            'table = "agg.ride_counts"', 'table = "agg.ride_counts"\nbackfill_table = "agg.rebuild"'
        )
    )
    assert resolve(cfg, "backfill").outputs["counts"].hive.table == "agg.rebuild"  # type: ignore[union-attr]


def test_watermark_defaults_to_the_job() -> None:
    cfg = parse_config(BASE.replace('watermark_delay = "10 seconds"\n', ""))
    assert resolve(cfg, "stream", _job()).watermark_delay == "30 seconds"


@pytest.mark.parametrize(
    ("override", "path", "value"),
    [
        ('[mode.backfill]\ntransform = "other:job"', "mode.backfill.transform", "other:job"),
        ('[mode.backfill]\njob = "other:JOB"', "mode.backfill.job", "other:JOB"),
        (
            '[mode.stream.inputs.rides.kafka]\ntopic = "rides_v2"',
            "mode.stream.inputs.rides.kafka.topic",
            "rides_v2",
        ),
        (
            '[mode.backfill.inputs.rides.hive]\nevent_time_column = "ts"',
            "mode.backfill.inputs.rides.hive.event_time_column",
            "ts",
        ),
        (
            '[mode.backfill.inputs.rides.hive]\npartition_format = "d=%Y"',
            "mode.backfill.inputs.rides.hive.partition_format",
            "d=%Y",
        ),
        (
            '[mode.backfill.outputs.counts.hive]\npartition_column = "day"',
            "mode.backfill.outputs.counts.hive.partition_column",
            "day",
        ),
        (
            '[mode.bootstrap.inputs.rides.kafka.options]\n"kafka.x" = "1"',
            "mode.bootstrap.inputs.rides.kafka.options",
            {"kafka.x": "1"},
        ),
    ],
)
def test_forbidden_overrides_name_path_and_principle(
    override: str, path: str, value: object
) -> None:
    err = _error(BASE + override)
    assert err.option == path
    assert err.value == value
    key = path.rsplit(".", 1)[1]
    assert f"overriding {key!r} per mode is not allowed (principle 2" in str(err)


def test_unknown_mode_and_dangling_references() -> None:
    err = _error(BASE + '[mode.replay]\nwatermark_delay = "1 hour"')
    assert err.option == "mode.replay" and "unknown mode" in str(err)
    err = _error(BASE + "[mode.backfill.inputs.trips.hive]\nmax_rows_per_trigger = 5")
    assert err.option == "mode.backfill.inputs.trips" and "no input 'trips'" in str(err)
    err = _error(BASE + '[mode.backfill]\nwatermark_delay = "2 fortnights"')
    assert err.option == "mode.backfill.watermark_delay" and err.value == "2 fortnights"
    err = _error(BASE + '[mode.backfill]\nparams = { window = "wide" }')
    assert err.option == "mode.backfill.params.window" and err.value == "wide"


def test_param_overrides_must_be_window_params_of_the_job() -> None:
    cfg = parse_config(BASE + '[mode.backfill]\nparams = { min_fare = "5 seconds" }')
    with pytest.raises(ConfigError) as err:
        resolve(cfg, "backfill", _job())
    assert err.value.option == "mode.backfill.params.min_fare"
    assert "not a window/slice size" in str(err.value)
    # without the job the static checks still pass (the value is a duration)
    assert resolve(cfg, "backfill").params["min_fare"] == "5 seconds"


def test_check_job_matches_inputs_outputs_and_params() -> None:
    job = _job()
    check_job(parse_config(BASE), job)
    err_cfg = parse_config(
        BASE.replace("[outputs.counts.hive]", "[outputs.totals.hive]").replace(
            "[outputs.counts.kafka]", "[outputs.totals.kafka]"
        )
    )
    with pytest.raises(ConfigError) as err:
        check_job(err_cfg, job)
    assert err.value.option == "outputs.counts"
    with pytest.raises(ConfigError) as err:
        check_job(parse_config(BASE.replace("[params]", "[params]\nfudge = 3")), job)
    assert err.value.option == "params.fudge" and err.value.value == 3
    with pytest.raises(ConfigError) as err:
        check_job(
            parse_config(
                BASE.replace('event_time_column = "event_time"', 'event_time_column = "ts"')
            ),
            job,
        )
    assert err.value.option == "inputs.rides.hive.event_time_column"


def test_mode_needs_the_bindings_it_reads() -> None:
    no_hive = BASE.split("[inputs.rides.hive]")[0] + '\n[outputs.counts.hive]\ntable = "a.b"\n'
    cfg = parse_config(no_hive)
    assert resolve(cfg, "stream").inputs["rides"].kafka is not None
    with pytest.raises(ConfigError) as err:
        resolve(cfg, "backfill")
    assert err.value.option == "inputs.rides.hive" and "backfill mode" in str(err.value)
    with pytest.raises(ConfigError, match="mode"):
        resolve(cfg, "batch")


def test_hive_output_visibility_and_hour_partition() -> None:
    cfg = parse_config(BASE)
    out = cfg.outputs["counts"].hive
    assert out is not None and (out.visibility, out.hour_partition) == ("batch", None)
    hourly = BASE.replace(
        'table = "agg.ride_counts"',
        'table = "agg.ride_counts"\nhour_partition = "hr"\nvisibility = "partition"',
    )
    out = resolve(parse_config(hourly), "backfill", _job()).outputs["counts"].hive
    assert out is not None and (out.visibility, out.hour_partition) == ("partition", "hr")
    for line, path, value in [
        ('visibility = "atomic"', "outputs.counts.hive.visibility", "atomic"),
        ('hour_partition = "dt"', "outputs.counts.hive.hour_partition", "dt"),
        ('hour_partition = "kappa_batch"', "outputs.counts.hive.hour_partition", "kappa_batch"),
        ('partition_column = "a b"', "outputs.counts.hive.partition_column", "a b"),
    ]:
        err = _error(
            BASE.replace('table = "agg.ride_counts"', f'table = "agg.ride_counts"\n{line}')
        )
        assert (err.option, err.value) == (path, value)
    # the hour is the hour of the output's event-time column: the output must declare one
    job = _job()
    no_time = Job(
        name=job.name,
        inputs=job.inputs,
        outputs=[OutputSpec("counts")],
        transform=job.transform,
        watermark_delay=job.watermark_delay,
        params=dict(job.params),
        window_params=list(job.window_params),
    )
    with pytest.raises(ConfigError) as err:
        check_job(parse_config(hourly), no_time)
    assert err.value.option == "outputs.counts.hive.hour_partition"


def test_hive_binding_clock_skew_and_unplaceable_rows() -> None:
    from kappaplus.config import HiveInput

    base = {"table": "lake.rides", "event_time_column": "event_time"}
    assert HiveInput.model_validate(base).dead_letter_table is None
    skewed = HiveInput.model_validate({**base, "max_earliness": "40 minutes"})
    assert skewed.max_earliness == "40 minutes"
    routed = HiveInput.model_validate({**base, "unplaceable": "dead_letter"})
    assert routed.dead_letter_table == "lake.rides_dead_letters"
    named = HiveInput.model_validate(
        {**base, "unplaceable": "dead_letter", "dlq": {"table": "ops.dead"}}
    )
    assert named.dead_letter_table == "ops.dead"
    with pytest.raises(ValueError, match="unplaceable"):
        HiveInput.model_validate({**base, "dlq": {"table": "ops.dead"}})
    with pytest.raises(ValueError):
        HiveInput.model_validate({**base, "unplaceable": "drop"})


def test_environment_references_in_a_config(monkeypatch: pytest.MonkeyPatch) -> None:
    from kappaplus.config import parse_config

    text = """
job = "kappaplus.examples.rides:JOB"
[inputs.rides.kafka]
topic = "${TOPIC:-rides}"
bootstrap_servers = "${KAPPA_BOOTSTRAP}"
options = { "kafka.sasl.password" = "$${literal}" }
[outputs.counts.hive]
table = "agg.counts"
"""
    monkeypatch.setenv("KAPPA_BOOTSTRAP", "127.0.0.1:39092")
    monkeypatch.delenv("TOPIC", raising=False)
    kafka = parse_config(text).inputs["rides"].kafka
    assert kafka is not None
    assert kafka.bootstrap_servers == "127.0.0.1:39092" and kafka.topic == "rides"
    assert kafka.options["kafka.sasl.password"] == "${literal}"
    monkeypatch.delenv("KAPPA_BOOTSTRAP")
    with pytest.raises(ConfigError) as unset:
        parse_config(text)
    message = str(unset.value)
    assert "inputs.rides.kafka.bootstrap_servers" in message and "'KAPPA_BOOTSTRAP'" in message


def test_fail_on_data_loss_is_a_key_of_the_kafka_binding() -> None:
    """The data-loss error advises failOnDataLoss=false: a job config can say it."""
    from kappaplus.config import KafkaInput
    from kappaplus.runtime.binding.kafka_inputs import kafka_options

    base = {"topic": "rides", "bootstrap_servers": "h:9092"}
    assert kafka_options(KafkaInput.model_validate(base))["failOnDataLoss"] is True
    lenient = KafkaInput.model_validate({**base, "failOnDataLoss": False})
    assert kafka_options(lenient)["failOnDataLoss"] is False
    with pytest.raises(ValueError):
        KafkaInput.model_validate({**base, "failOnDataLoss": "maybe"})


def test_kafka_client_settings_are_checked_alike_for_inputs_and_outputs() -> None:
    unprefixed = _error(BASE.replace('"kafka.sasl.mechanism"', '"sasl.mechanism"'))
    assert unprefixed.option == "inputs.rides.kafka.options"
    assert "'sasl.mechanism'" in str(unprefixed) and "must start with 'kafka.'" in str(unprefixed)
    java_only = BASE + '[outputs.counts.kafka.options]\n"kafka.sasl.jaas.config" = "x"\n'
    err = _error(java_only)
    assert err.option == "outputs.counts.kafka.options"
    assert "Java client setting" in str(err) and "x" not in str(err.value)


def test_late_rows_go_to_exactly_one_table_or_topic() -> None:
    late = BASE + "\n[outputs.counts.late]\n"
    for body in ('table = "agg.late"\ntopic = "counts_late"\n', ""):
        err = _error(late + body)
        assert err.option == "outputs.counts.late"
        assert "set exactly one of 'table' (a Hive table) or 'topic'" in str(err)
    err = _error(late + 'table = "agg.late"\nbootstrap_servers = "localhost:9092"\n')
    assert err.option == "outputs.counts.late" and "go with 'topic'" in str(err)
    # a topic's brokers default to the output's Kafka binding; without one they are needed
    no_kafka = BASE[: BASE.index("[outputs.counts.kafka]")]
    err = _error(no_kafka + '[outputs.counts.late]\ntopic = "counts_late"\n')
    assert err.option == "outputs.counts"
    assert "late.topic needs late.bootstrap_servers" in str(err) and "\n" not in str(err)
    config = parse_config(late + 'topic = "counts_late"\n')
    target = resolve(config, "stream").outputs["counts"].late
    assert target is not None and target.table is None
    assert (target.topic, target.bootstrap_servers) == ("counts_late", "localhost:9092")
    assert resolve(config, "backfill").outputs["counts"].late is None
    config = parse_config(
        no_kafka + '[outputs.counts.late]\ntopic = "counts_late"\nbootstrap_servers = "b:9092"\n'
    )
    target = resolve(config, "stream").outputs["counts"].late
    assert target is not None and target.bootstrap_servers == "b:9092"


def test_delta_binding_resolves_and_is_one_lake_of_an_input() -> None:
    """[inputs.<n>.delta] resolves for the lake modes; beside a Hive binding it is refused;
    its event-time column must be a field of the job's input."""
    no_hive = BASE.split("[inputs.rides.hive]")[0]
    delta = (
        no_hive
        + '[inputs.rides.delta]\npath = "s3://lake/rides"\nevent_time_column = "event_time"\n'
        + 'version = 3\nstorage_options = { AWS_REGION = "eu-west-1" }\n'
        + '[outputs.counts.hive]\ntable = "a.b"\n'
    )
    cfg = parse_config(delta)
    for mode in ("backfill", "bootstrap"):
        found = resolve(cfg, mode).inputs["rides"].delta
        assert found is not None and found.path == "s3://lake/rides" and found.version == 3
    assert resolve(cfg, "stream").inputs["rides"].delta is None
    check_job(cfg, _job())
    both = BASE + '[inputs.rides.delta]\npath = "/lake/rides"\nevent_time_column = "event_time"\n'
    assert "Hive, Iceberg or Delta" in str(_error(both))
    wrong = delta.replace(
        'event_time_column = "event_time"\nversion', 'event_time_column = "t"\nversion'
    )
    with pytest.raises(ConfigError) as err:
        check_job(parse_config(wrong), _job())
    assert err.value.option == "inputs.rides.delta.event_time_column"
