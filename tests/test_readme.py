"""The README as a newcomer's first screen: short, the two commands first, its job example
a job and a configuration that load, its commands and options real, its links alive.

The full guide, run literally, is ``tests/test_getting_started_guide.py``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
FENCE = re.compile(r"```(\w+)\n(.*?)```", re.S)


def test_the_readme_is_short_and_opens_with_the_two_commands() -> None:
    assert len(README.splitlines()) <= 200
    kind, first = FENCE.findall(README)[0]
    assert kind == "bash"
    assert [line.split()[:2] for line in first.splitlines()] == [
        ["make", "demo"],
        ["make", "test"],
    ]


def test_the_readme_job_and_its_config_load(tmp_path: Path, monkeypatch) -> None:
    from kappaplus import load_job, parse_config

    blocks = FENCE.findall(README)
    (job,) = [body for kind, body in blocks if kind == "python"]
    (config,) = [body for kind, body in blocks if kind == "toml"]
    assert job.startswith("# myjobs/rides.py\n")
    (tmp_path / "myjobs").mkdir()
    (tmp_path / "myjobs" / "__init__.py").write_text("")
    (tmp_path / "myjobs" / "rides.py").write_text(job)
    monkeypatch.syspath_prepend(str(tmp_path))
    _forget_myjobs()  # another test's `myjobs` package would answer for this one
    try:
        loaded = load_job("myjobs.rides:JOB")
    finally:
        _forget_myjobs()
    parsed = parse_config(config)
    assert [spec.name for spec in loaded.inputs] == list(parsed.inputs) == ["rides"]
    assert [spec.name for spec in loaded.outputs] == list(parsed.outputs) == ["counts"]
    rides = parsed.inputs["rides"]
    assert rides.kafka is not None and rides.hive is not None  # production and history


def test_the_readme_commands_and_options_exist() -> None:
    import typer.main

    from kappaplus.cli import app

    cli = typer.main.get_command(app)
    lines = [
        line.split("#")[0].split()
        for kind, body in FENCE.findall(README)
        if kind == "bash"
        for line in body.splitlines()
        if line.startswith("kappa ")
    ]
    assert len(lines) >= 3
    for words in lines:
        command = cli.commands[words[1]]
        options = {opt for param in command.params for opt in param.opts}
        used = [word for word in words if word.startswith("--")]
        assert set(used) <= options, (words, options)


def test_the_readme_links_lead_to_files_of_the_project() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    assert len(links) > 20
    missing = [link for link in links if "://" not in link and not (ROOT / link).exists()]
    assert missing == []


def _forget_myjobs() -> None:
    """Drop every imported ``myjobs`` module, so the next import reads this test's files."""
    for name in [n for n in sys.modules if n == "myjobs" or n.startswith("myjobs.")]:
        del sys.modules[name]
