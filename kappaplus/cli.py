"""The ``kappa`` command line. Every command has ``--help``.

Command groups live next to what they drive (``kappaplus/local/broker_cli.py`` for the
broker, ``kappaplus/runtime/cli.py`` for jobs) and are mounted here.
"""

from __future__ import annotations

import importlib
import logging
import sys
from typing import TextIO

import typer

app = typer.Typer(
    name="kappa",
    help="Kappa+ on PySpark: run a job from Kafka, backfill it from Hive, with one codebase.",
    no_args_is_help=True,
    add_completion=False,
)

# (module, attribute, name): typer sub-apps mounted as `kappa NAME ...`.
_GROUPS = [
    ("kappaplus.local.broker_cli", "app", "broker"),
]
# (module, attribute): modules whose `register(app)` adds top-level commands.
_COMMANDS = [
    "kappaplus.runtime.cli",
    "kappaplus.archive_cli",
    "kappaplus.local.stack_cli",
    "kappaplus.demo",
]


def _mount() -> None:
    for module_name, attribute, name in _GROUPS:
        app.add_typer(getattr(importlib.import_module(module_name), attribute), name=name)
    for module_name in _COMMANDS:
        importlib.import_module(module_name).register(app)


class _CurrentStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """A log handler writing to whatever ``sys.stderr`` is when a record is logged.

    rich's live progress display swaps ``sys.stderr`` for a proxy that prints above the
    table; a plain StreamHandler keeps the stream of its creation and would scribble
    over the table instead.
    """

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


@app.callback()
def main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log debug detail.")) -> None:
    """Kappa+ on PySpark."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=[_CurrentStderr()],
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)


_mount()

if __name__ == "__main__":
    app()
