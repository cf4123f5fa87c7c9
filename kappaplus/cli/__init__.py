"""The ``kappa`` command line, every command in this package. Every command has ``--help``.

One module per command or group, each a thin layer over the code it drives:

- jobs: ``run.py`` (``kappa run``, ``status``), ``check.py`` (``kappa check``),
  ``promote.py`` (``kappa promote``), ``audit.py`` (``kappa audit``, ``reconcile``);
- data: ``archive.py`` (``kappa archive``), ``table.py`` (``kappa table ...``),
  ``dlq.py`` (``kappa dlq ...``), ``sql.py`` (``kappa sql``);
- the embedded stack (:mod:`kappaplus.local`): ``stack.py`` (``kappa up/down``,
  ``metastore``, ``s3``),
  ``broker.py``, ``topic.py``, ``demo.py``;
- the machine: ``jvm_archive.py`` (``kappa jvm-archive``, the driver JVM's class archive).

Only this package and :mod:`kappaplus.local` import the local development stack.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
from pathlib import Path
from typing import TextIO

import typer

from kappaplus.core.settings import STATE_DIR_ENV

app = typer.Typer(
    name="kappa",
    help="Kappa+ on PySpark: run a job from Kafka, backfill it from the lake (Hive, Iceberg, "
    "Delta), with one codebase.",
    no_args_is_help=True,
    add_completion=False,
)


def _mount() -> None:
    """Mount every command: groups as ``kappa NAME ...``, the rest at the top level."""
    from kappaplus.cli import (
        archive,
        audit,
        broker,
        check,
        demo,
        dlq,
        jvm_archive,
        promote,
        run,
        sql,
        stack,
        table,
        topic,
    )

    for name, group in (
        ("broker", broker.app),
        ("topic", topic.app),
        ("table", table.app),
        ("dlq", dlq.app),
    ):
        app.add_typer(group, name=name)
    for module in (run, check, archive, stack, demo, audit, promote, sql, jvm_archive):
        module.register(app)
    _reflow_help(app)


def reflowed(doc: str) -> str:
    r"""A docstring as help text: each paragraph's lines joined into one, so the terminal
    wraps it (typer keeps a docstring's line breaks); indented lines are kept as they are.

    >>> reflowed("Run a job.\n\n  The same code\n  in every mode.\n")
    'Run a job.\n\nThe same code in every mode.'
    """
    paragraphs = []
    for paragraph in inspect.cleandoc(doc).split("\n\n"):
        lines = paragraph.split("\n")
        if any(line.startswith((" ", "\b")) for line in lines):
            paragraphs.append(paragraph)
        else:
            paragraphs.append(" ".join(line.strip() for line in lines))
    return "\n\n".join(paragraphs)


def _reflow_help(typer_app: typer.Typer) -> None:
    """Reflow the docstring help of every command of ``typer_app`` and its groups."""
    for command in typer_app.registered_commands:
        if command.help is None and command.callback is not None and command.callback.__doc__:
            command.help = reflowed(command.callback.__doc__)
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _reflow_help(group.typer_instance)


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


class _StateLogFile(logging.FileHandler):
    """Every record at DEBUG, appended to ``<state dir>/logs/kappa.log``; the file (and the
    state directory) is made only when a record arrives."""

    def __init__(self) -> None:
        home = os.environ.get(STATE_DIR_ENV) or ".kappa"
        path = Path(home).expanduser().resolve() / "logs" / "kappa.log"
        super().__init__(path, delay=True)
        self.setLevel(logging.DEBUG)

    def filter(self, record: logging.LogRecord) -> bool:
        # kappaplus at DEBUG; other libraries (py4j logs every JVM call at DEBUG) from INFO
        return record.levelno >= logging.INFO or record.name.startswith("kappaplus")

    def _open(self):  # type: ignore[no-untyped-def]
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()


def _not_py4j_retry(record: logging.LogRecord) -> bool:
    """False for py4j's notice that it retries a command on a fresh connection (logged on the
    root logger at INFO with a traceback, e.g. while the JVM shuts down); a retry that fails
    too is logged at ERROR and still shown."""
    return not (
        record.name == "root"
        and record.levelno == logging.INFO
        and record.getMessage() == "Exception while sending command."
    )


@app.callback()
def main(
    verbose: bool = typer.Option(
        False,
        "--verbose",
        "-v",
        help="Log debug detail, and show Spark's own output (JVM warnings, Java stack traces) "
        "on stderr instead of $KAPPA_HOME/logs/spark-driver.log.",
    ),
) -> None:
    """Kappa+ on PySpark.

    Logs: what kappaplus does is said on stderr (INFO; -v: DEBUG) and kept at DEBUG in
    $KAPPA_HOME/logs/kappa.log; Spark's own output goes to $KAPPA_HOME/logs/spark-driver.log.
    """
    from kappaplus.core.jvm import send_output_to_log

    on_stderr = _CurrentStderr()
    on_stderr.setLevel(logging.DEBUG if verbose else logging.INFO)
    if not verbose:
        on_stderr.addFilter(_not_py4j_retry)
    in_file = _StateLogFile()
    formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in (on_stderr, in_file):
        handler.setFormatter(formatter)
    logging.basicConfig(level=logging.DEBUG, handlers=[on_stderr, in_file])
    send_output_to_log(not verbose)
    # py4j logs the traceback of an exception in a Python callback (foreachBatch) at ERROR; the
    # same failure reaches the run as its query's exception and is reported in one line, and
    # a query stopped by Ctrl-C/SIGTERM in the middle of a batch interrupts its callback: the
    # traceback is shown with -v only.
    logging.getLogger("py4j").setLevel(logging.WARNING if verbose else logging.CRITICAL)


_mount()
