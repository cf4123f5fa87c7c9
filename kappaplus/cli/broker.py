"""``kappa broker start|stop|status``: the embedded Kafka-protocol broker for local runs."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from kappaplus.cli.errors import error_exit
from kappaplus.core.errors import BrokerError
from kappaplus.local.broker import MEMORY, EmbeddedBroker

app = typer.Typer(
    help="The embedded Kafka-protocol broker (tansu; in-memory storage by default) on 127.0.0.1.",
    no_args_is_help=True,
)
_console = Console()

_HOME = typer.Option(None, "--home", help="State directory (default $KAPPA_HOME or ./.kappa).")


@app.command()
def start(
    port: int = typer.Option(None, "--port", "-p", help="Port (default 9092, else a free one)."),
    storage: str = typer.Option(
        MEMORY,
        "--storage",
        help="memory://tansu/ (lost when the broker stops) or s3://BUCKET/ (an S3-compatible "
        "store with conditional PUTs, named by AWS_ENDPOINT, AWS_ACCESS_KEY_ID, "
        "AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION, AWS_ALLOW_HTTP; survives a restart).",
    ),
    home: Path = _HOME,
) -> None:
    """Start the broker detached, or report the one already running."""
    try:
        broker = EmbeddedBroker(home, port, storage=storage)
        before = broker.status()
        bootstrap = broker.start()
    except BrokerError as exc:
        raise error_exit(_console, exc, 1) from exc
    if before.running:
        _console.print(f"broker already running (pid {before.pid}) at [bold]{bootstrap}[/bold]")
    else:
        _console.print(f"broker started at [bold]{bootstrap}[/bold] (log {broker.log_file})")


@app.command()
def stop(home: Path = _HOME) -> None:
    """Stop the running broker (with memory storage its topics are gone)."""
    try:
        stopped = EmbeddedBroker(home).stop()
    except BrokerError as exc:
        raise error_exit(_console, exc, 1) from exc
    _console.print("broker stopped" if stopped else "no broker running")


@app.command()
def status(home: Path = _HOME) -> None:
    """Show pid, port, bootstrap address and topics of the running broker."""
    try:
        info = EmbeddedBroker(home).status()
    except BrokerError as exc:
        raise error_exit(_console, exc, 1) from exc
    if not info.running:
        _console.print("no broker running")
        raise typer.Exit(1)
    started = dt.datetime.fromtimestamp(info.started_at or 0).isoformat(timespec="seconds")
    _console.print(
        f"broker running: pid {info.pid}, port {info.port}, bootstrap [bold]{info.bootstrap}"
        f"[/bold], since {started}\nlog: {info.log_file}"
    )
    table = Table("topic", "partitions")
    for name, partitions in info.topics.items():
        table.add_row(name, str(partitions))
    _console.print(table if info.topics else "no topics")
