"""``kappa down`` and ``kappa metastore start|stop|status``: the local service stack."""

from __future__ import annotations

import datetime as dt
import importlib
from pathlib import Path

import typer
from rich.console import Console

from kappaplus.errors import KappaError
from kappaplus.local.metastore import MetastoreServer

_console = Console()
_HOME = typer.Option(None, "--home", help="State directory (default $KAPPA_HOME or ./.kappa).")

metastore_app = typer.Typer(
    help="The local Hive metastore server (thrift on 127.0.0.1, Derby under the state dir).",
    no_args_is_help=True,
)


def _fail(exc: Exception) -> typer.Exit:
    _console.print(f"[red]error:[/red] {exc}")
    return typer.Exit(1)


@metastore_app.command("start")
def metastore_start(
    port: int = typer.Option(None, "--port", "-p", help="Port (default 9083, else a free one)."),
    home: Path = _HOME,
) -> None:
    """Start the metastore server detached, or report the one already running."""
    server = MetastoreServer(home, port)
    before = server.status()
    try:
        uri = server.start()
    except KappaError as exc:
        raise _fail(exc) from exc
    verb = f"already running (pid {before.pid})" if before.running else "started"
    _console.print(f"metastore {verb} at [bold]{uri}[/bold] (log {server.log_file})")
    _console.print(f"sessions: create_session(..., metastore_uri={uri!r}) or KAPPA_METASTORE_URI")


@metastore_app.command("stop")
def metastore_stop(home: Path = _HOME) -> None:
    """Stop the metastore server (tables and data stay under the state directory)."""
    try:
        stopped = MetastoreServer(home).stop()
    except KappaError as exc:
        raise _fail(exc) from exc
    _console.print("metastore stopped" if stopped else "no metastore running")


@metastore_app.command("status")
def metastore_status(home: Path = _HOME) -> None:
    """Show pid, port and URI of the running metastore server."""
    info = MetastoreServer(home).status()
    if not info.running:
        _console.print("no metastore running")
        raise typer.Exit(1)
    since = dt.datetime.fromtimestamp(info.started_at or 0).isoformat(timespec="seconds")
    _console.print(
        f"metastore running: pid {info.pid}, [bold]{info.uri}[/bold], since {since}\n"
        f"log: {info.log_file}"
    )


def down(home: Path = _HOME) -> None:
    """Stop the local services: the metastore server and the embedded broker."""
    failed = False
    try:
        stopped = MetastoreServer(home).stop()
        _console.print("metastore stopped" if stopped else "no metastore running")
    except KappaError as exc:
        _console.print(f"[red]error:[/red] {exc}")
        failed = True
    try:
        broker_module = importlib.import_module("kappaplus.local.broker")
    except ModuleNotFoundError:
        broker_module = None
    if broker_module is not None:
        try:
            stopped = broker_module.EmbeddedBroker(home).stop()
            _console.print("broker stopped" if stopped else "no broker running")
        except KappaError as exc:
            _console.print(f"[red]error:[/red] {exc}")
            failed = True
    if failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``kappa down`` and the ``kappa metastore`` group to the CLI."""
    app.command("down")(down)
    app.add_typer(metastore_app, name="metastore")
