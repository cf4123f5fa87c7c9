"""Which settings ``create_session`` gives the builder, by master (no Spark started)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kappaplus.session import (
    SESSION_SETTINGS,
    builder_settings,
    is_local_master,
    local_defaults,
)

HOME = Path("/tmp/kappa-home-not-created")


@pytest.mark.parametrize(
    ("master", "local"),
    [
        ("local", True),
        ("local[2]", True),
        ("local[*]", True),
        ("local[2, 3]", True),
        ("spark://10.0.0.5:7077", False),
        ("yarn", False),
        ("k8s://https://k:6443", False),
        ("local-cluster[2,1,1024]", False),
    ],
)
def test_local_masters(master: str, local: bool) -> None:
    assert is_local_master(master) is local


def test_a_cluster_gets_only_the_callers_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    import kappaplus.session as session

    monkeypatch.setattr(session, "_launches_jvm", lambda: False)  # spark-submit's JVM
    caller = {"spark.executor.memory": "8g", "spark.sql.shuffle.partitions": "400"}
    assert builder_settings("spark://h:7077", HOME, caller, hive=False) == caller
    assert builder_settings("yarn", HOME, None, hive=True) == {}
    named = builder_settings("yarn", HOME, None, hive=True, metastore_uri="thrift://m:9083")
    assert named == {"spark.hadoop.hive.metastore.uris": "thrift://m:9083"}


def test_local_gets_the_local_defaults_and_the_caller_wins() -> None:
    settings = builder_settings("local[2]", HOME, {"spark.ui.enabled": "true"}, hive=False)
    assert settings["spark.sql.shuffle.partitions"] == "2"  # one per local core
    assert settings["spark.ui.enabled"] == "true"
    for key, value in SESSION_SETTINGS.items():
        assert settings[key] == value
    assert set(local_defaults(HOME)) <= set(settings)


def test_a_local_session_on_a_metastore_server_rides_out_a_restart(tmp_path: Path) -> None:
    from kappaplus.session import METASTORE_RETRIES

    uri = "thrift://127.0.0.1:9083"
    settings = builder_settings("local[2]", tmp_path, None, metastore_uri=uri)
    assert settings["spark.hadoop.hive.metastore.failure.retries"] == "3"
    assert {k: settings[k] for k in METASTORE_RETRIES} == METASTORE_RETRIES
    # the embedded Derby metastore has no server to reconnect to
    assert not set(METASTORE_RETRIES) & set(builder_settings("local[2]", tmp_path, None))
    # the caller's own settings win
    mine = {"spark.hadoop.hive.metastore.failure.retries": "10"}
    chosen = builder_settings("local[2]", tmp_path, mine, metastore_uri=uri)
    assert chosen["spark.hadoop.hive.metastore.failure.retries"] == "10"


def test_a_small_local_driver_runs_the_serial_collector_unless_told_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def java_options(master: str) -> str:
        return builder_settings(master, HOME, hive=False)["spark.driver.extraJavaOptions"]

    monkeypatch.delenv("KAPPA_DRIVER_JAVA_OPTIONS", raising=False)
    assert "-XX:+UseSerialGC" in java_options("local[2]").split()
    assert "-XX:MaxHeapFreeRatio=30" in java_options("local[2]").split()
    assert "-XX:+UseSerialGC" in java_options("local[1]").split()
    assert "GC" not in java_options("local[16]")  # G1, the JVM's own choice
    monkeypatch.setenv("KAPPA_DRIVER_JAVA_OPTIONS", "-XX:+UseParallelGC -Xss2m")
    chosen = java_options("local[2]").split()
    assert "-XX:+UseParallelGC" in chosen and "-XX:+UseSerialGC" not in chosen
    assert not any("HeapFreeRatio" in option for option in chosen)


def test_a_local_driver_it_starts_gets_the_spawn_free_file_system(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import kappaplus.session as session
    from kappaplus.jars import jvm_jar

    jar = jvm_jar()
    if jar is None and not os.environ.get("CI"):  # in CI set-up builds it: fail below
        pytest.skip("the project's jar is not built (no javac): Hadoop's file system stays")
    assert jar is not None, "set-up did not build kappaplus/jars/kappaplus-jvm.jar"
    monkeypatch.setattr(session, "_launches_jvm", lambda: True)
    local = builder_settings("local[2]", HOME, {"spark.driver.extraClassPath": "/x.jar"})
    for key, value in session.SPAWN_FREE_LOCAL_FS.items():
        assert local[key] == value
    assert local["spark.driver.extraClassPath"].split(":") == ["/x.jar", str(jar)]
    chosen = {"spark.hadoop.fs.file.impl": "org.example.Fs"}
    assert builder_settings("local[2]", HOME, chosen)["spark.hadoop.fs.file.impl"] == (
        "org.example.Fs"
    )  # the caller's choice stays
    assert "spark.hadoop.fs.file.impl" not in builder_settings("spark://h:7077", HOME)
    # a JVM already running (spark-submit's, an earlier session's) takes no class path
    monkeypatch.setattr(session, "_launches_jvm", lambda: False)
    running = builder_settings("local[2]", HOME)
    assert "spark.hadoop.fs.file.impl" not in running
    assert "spark.driver.extraClassPath" not in running


def test_a_small_cluster_driver_it_starts_gets_the_serial_collector_where_none_is_chosen(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import kappaplus.driver_jvm as driver_jvm
    import kappaplus.session as session

    monkeypatch.setattr(session, "_launches_jvm", lambda: True)
    monkeypatch.setattr(driver_jvm, "driver_cores", lambda: 2)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    defaults = tmp_path / "spark-defaults.conf"

    def driver_options(conf: dict[str, str] | None = None) -> list[str] | None:
        settings = builder_settings("spark://h:7077", HOME, conf, hive=False)
        options = settings.get("spark.driver.extraJavaOptions")
        return None if options is None else options.split()

    # no spark-defaults.conf: the collector alone
    assert driver_options() == driver_jvm.SERIAL_GC.split()
    # the cluster's own driver options stay, after it (a properties file: = and spaces)
    defaults.write_text("# admin\nspark.driver.extraJavaOptions = -Da=1 -Db=2\n")
    assert driver_options() == [*driver_jvm.SERIAL_GC.split(), "-Da=1", "-Db=2"]
    # the caller's replace the file's, as Spark's launcher would, and stay too
    assert driver_options({"spark.driver.extraJavaOptions": "-Dc=3"})[-1] == "-Dc=3"
    # a collector chosen anywhere (file, either key, caller): nothing added
    defaults.write_text("spark.driver.defaultJavaOptions -XX:+UseG1GC\n")
    assert driver_options() is None
    defaults.write_text("spark.driver.extraJavaOptions\t-XX:+UseParallelGC -Da=1\n")
    assert driver_options() is None  # the launcher reads the file's own, untouched
    assert driver_options({"spark.driver.extraJavaOptions": "-XX:+UseZGC"}) == ["-XX:+UseZGC"]
    # a larger driver machine keeps the JVM's own choice; a running JVM takes no options
    defaults.unlink()
    monkeypatch.setattr(driver_jvm, "driver_cores", lambda: 8)
    assert driver_options() is None
    monkeypatch.setattr(driver_jvm, "driver_cores", lambda: 2)
    monkeypatch.setattr(session, "_launches_jvm", lambda: False)
    assert driver_options() is None
