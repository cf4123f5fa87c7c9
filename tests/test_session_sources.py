"""The session's data sources: kappaplus's registered, Spark's search for ``pyspark_*``
data source packages skipped when none is installed (``skip_static_source_lookup``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from kappaplus.local.processes import process_tree
from kappaplus.local.service import runs_command
from kappaplus.session import skip_static_source_lookup, static_source_modules


def test_sources_are_registered_without_spark_looking_for_packages(spark) -> None:  # type: ignore[no-untyped-def]
    assert static_source_modules() == []  # this environment installs no pyspark_* package
    jvm = spark.sparkContext._jvm
    manager = getattr(
        getattr(jvm.org.apache.spark.sql.execution.datasources, "DataSourceManager$"), "MODULE$"
    )
    assert manager.dataSourceBuilders().isDefined()  # the lookup will not run
    assert manager.dataSourceBuilders().get().isEmpty()
    sources = spark._jsparkSession.sessionState().dataSourceManager()
    for name in ("kappa_hive", "kappa_kafka", "kappa_hybrid"):
        assert sources.dataSourceExists(name), name
    lookups = [p for p in process_tree(os.getpid()) if runs_command(p, b"lookup_data_sources")]
    assert lookups == [], lookups  # Spark's lookup daemon and its worker
    assert skip_static_source_lookup(spark) is False  # set once per JVM, not again


def test_an_installed_pyspark_package_is_left_to_spark(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "pyspark_weather.py").write_text("DefaultSource = None\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    assert static_source_modules() == ["pyspark_weather"]
    # returns before touching the session: Spark looks the package up as it always does
    assert skip_static_source_lookup(None) is False  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["pyspark", "pyspark_"])
def test_only_pyspark_underscore_modules_count(tmp_path: Path, monkeypatch, name: str) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / f"{name}x.py").write_text("")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    assert static_source_modules() == ([f"{name}x"] if name == "pyspark_" else [])
