"""``kappa topic create`` and ``kappa up --print-env``: configs that travel."""

from __future__ import annotations

from pathlib import Path

from kafka_fixtures import unique_topic_name
from typer.testing import CliRunner

from kappaplus.cli import app
from kappaplus.local.broker import EmbeddedBroker, free_port, list_topics


def test_topic_create_with_the_partitions_asked_for(kafka_bootstrap: str) -> None:
    runner = CliRunner()
    name = unique_topic_name("one")
    result = runner.invoke(
        app, ["topic", "create", name, "--partitions", "1", "-b", kafka_bootstrap]
    )
    assert result.exit_code == 0, result.output
    assert list_topics(kafka_bootstrap)[name] == 1
    again = runner.invoke(app, ["topic", "create", name, "-b", kafka_bootstrap])
    assert again.exit_code == 0 and "exists" in again.output
    clash = runner.invoke(app, ["topic", "create", name, "-p", "3", "-b", kafka_bootstrap])
    assert clash.exit_code == 1 and "1 partition" in clash.output
    listed = runner.invoke(app, ["topic", "list"], env={"KAPPA_BOOTSTRAP": kafka_bootstrap})
    assert f"{name}\t1" in listed.output


def test_up_prints_the_values_to_export(tmp_path: Path) -> None:
    home = tmp_path / "stack"
    port = free_port()
    try:
        result = CliRunner().invoke(
            app,
            [
                "up",
                "--home",
                str(home),
                "--no-metastore",
                "--broker-port",
                str(port),
                "--print-env",
            ],
        )
        assert result.exit_code == 0, result.output
        assert result.output.splitlines() == [
            f"export KAPPA_HOME={home}",
            f"export KAPPA_BOOTSTRAP=127.0.0.1:{port}",
        ]
        shown = CliRunner().invoke(app, ["up", "--home", str(home), "--no-metastore"])
        assert f"export KAPPA_BOOTSTRAP=127.0.0.1:{port}" in shown.output
    finally:
        EmbeddedBroker(home).stop()
