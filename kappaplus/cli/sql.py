"""``kappa sql "SELECT ..."``: look at a table the way the other commands see it.

A newcomer's first question after a backfill is "what did it write?". The ``kappa``
commands find the metastore server ``kappa up`` started (else the embedded catalog); a
plain ``pyspark`` shell does not, and sees another catalog. This command runs one
statement in the commands' session and prints its first rows."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kappaplus.audit.report import add_text_row
from kappaplus.cli.errors import error_exit
from kappaplus.cli.session_options import MASTER, METASTORE_URI, command_session
from kappaplus.core.errors import ConfigError, KappaError

_console = Console()
log = logging.getLogger(__name__)


def sql_command(
    statement: str = typer.Argument(..., help="One Spark SQL statement, e.g. SELECT * FROM t."),
    limit: int = typer.Option(20, "--limit", "-n", help="Rows to print at most."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per row instead."),
    master: str = MASTER,
    metastore_uri: str = METASTORE_URI,
) -> None:
    """Run one Spark SQL statement in the session the kappa commands use (the metastore
    server `kappa up` started, else the embedded catalog) and print its first rows.

    Exit status 2 when Spark refuses the statement (a missing table, a misspelt column):
    its message in one line, the rest in the log.
    """
    from pyspark.errors import AnalysisException, ParseException

    from kappaplus.cli.run import _stop_quietly

    if limit < 1:
        raise error_exit(_console, ConfigError("--limit", limit, "must be at least 1"))
    try:
        spark = command_session("kappa-sql", master=master, metastore_uri=metastore_uri)
    except KappaError as exc:
        raise error_exit(_console, exc) from exc
    try:
        frame = spark.sql(statement)
        rows = frame.limit(limit + 1).collect()
        columns = frame.columns
    except (AnalysisException, ParseException) as exc:
        log.debug("kappa sql: %s", statement, exc_info=True)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = missing_table_hint(spark, first)
        raise error_exit(
            _console, f"{first} (in: {statement})" + (f"; {hint}" if hint else ""), 2
        ) from exc
    finally:
        _stop_quietly(spark)
    shown, more = rows[:limit], len(rows) > limit
    if as_json:
        for row in shown:
            print(json.dumps(row.asDict(recursive=True), default=str))
        return
    table = Table(
        *(escape(c) for c in columns),
        caption=f"first {limit} rows" if more else f"{len(shown)} rows",
    )
    for row in shown:  # values as written: "[x]" is no style tag here
        add_text_row(table, *("" if value is None else str(value) for value in row))
    _console.print(table)


_NOT_FOUND = re.compile(r"The table or view (`[^ ]+`) cannot be found")


def missing_table_hint(spark: Any, message: str) -> str | None:
    """Where a table Spark did not find may be (the other catalog: the local metastore
    server stopped, or made before ``kappa up``), as ``kappa run`` says it; None if the
    message names no missing table or nothing is known.

    >>> missing_table_hint(None, "[PARSE_SYNTAX_ERROR] Syntax error at or near 'SELEC'.")
    """
    from kappaplus.core.table.catalogs import elsewhere

    found = _NOT_FOUND.search(message)
    if found is None:
        return None
    name = found.group(1).replace("`", "").removeprefix("spark_catalog.")
    try:
        return elsewhere(spark, name)
    except Exception:  # noqa: BLE001 - only a hint: the error stands without it
        log.debug("no hint for %s", name, exc_info=True)
        return None


def register(app: typer.Typer) -> None:
    """Mount ``kappa sql`` on the top-level app."""
    app.command("sql")(sql_command)
