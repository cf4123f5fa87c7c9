"""The ``kappa`` command line: every command has ``--help``, and its text reads as prose."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from kappaplus.cli import app, reflowed

runner = CliRunner()


def _command_paths(command: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = [prefix]
    for name, sub in getattr(command, "commands", {}).items():
        paths += _command_paths(sub, (*prefix, name))
    return paths


COMMANDS = _command_paths(typer.main.get_command(app))


def test_every_command_is_listed() -> None:
    names = {path[0] for path in COMMANDS if path}
    assert {"run", "status", "archive", "demo", "up", "down", "broker", "metastore"} <= names
    assert ("broker", "start") in COMMANDS and ("metastore", "start") in COMMANDS


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "kappa")
def test_every_command_has_help_in_whole_paragraphs(path: tuple[str, ...]) -> None:
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "2000"})
    assert result.exit_code == 0, result.output
    assert "Usage: kappa" in result.output
    # the description (before the first option box): one line per paragraph at 2000
    # columns, so no docstring line break survives in the middle of a sentence
    description = result.output.split("╭")[0].split("Usage:")[1].splitlines()[1:]
    for line, following in zip(description, description[1:], strict=False):
        assert not (line.strip() and following.strip()), (line, following)


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "kappa")
def test_help_shows_every_bracketed_name_as_written(path: tuple[str, ...]) -> None:
    # "[outputs.<o>.late]" in a help text is a config key to rich, not a style tag
    command: Any = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    texts = [command.help or ""] + [getattr(p, "help", None) or "" for p in command.params]
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "2000"})
    shown = " ".join(result.output.split())
    for token in re.findall(r"\[[a-z][\w.<>|-]*\]", " ".join(texts)):
        assert token in shown, (token, path)


def test_reflowed_joins_lines_and_keeps_indented_blocks() -> None:
    assert reflowed("One.\n    two\n    three.\n\n    four\n    five.") == (
        "One. two three.\n\nfour five."
    )
    assert reflowed("Example:\n\n    \b\n      kappa up\n      kappa down") == (
        "Example:\n\n\b\n  kappa up\n  kappa down"
    )
