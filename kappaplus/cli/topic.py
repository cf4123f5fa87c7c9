"""``kappa topic create|list``: Kafka topics with the partition count a job needs.

The embedded broker creates a topic on first use with 4 partitions; Kafka keeps order only
within a partition, so a job that needs one arrival order per key across all keys (or a
test that compares against one global order) creates its topics first with ``--partitions 1``.
Works against any Kafka cluster (``--bootstrap``), by default the one of ``$KAPPA_BOOTSTRAP``
or the embedded broker of the state directory.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.console import Console

from kappaplus.cli.errors import error_exit
from kappaplus.core.errors import ConfigError, KappaError

app = typer.Typer(
    help="Kafka topics: create one with the partitions you need (order holds per partition).",
    no_args_is_help=True,
)
_console = Console()
_HOME = typer.Option(None, "--home", help="State directory (default $KAPPA_HOME or ./.kappa).")
_BOOTSTRAP = typer.Option(
    None,
    "--bootstrap",
    "-b",
    help="host:port[,...] (default $KAPPA_BOOTSTRAP, else the running embedded broker).",
)


def default_bootstrap(bootstrap: str | None, home: Path | None = None) -> str:
    """``bootstrap``, else ``$KAPPA_BOOTSTRAP``, else the embedded broker that runs."""
    from kappaplus.local.broker import EmbeddedBroker

    if bootstrap:
        return bootstrap
    if os.environ.get("KAPPA_BOOTSTRAP"):
        return os.environ["KAPPA_BOOTSTRAP"]
    info = EmbeddedBroker(home).status()
    if info.running and info.bootstrap:
        return info.bootstrap
    raise ConfigError(
        "--bootstrap", None, "no broker given, $KAPPA_BOOTSTRAP unset and no `kappa up` broker runs"
    )


@app.command("create")
def create(
    name: str = typer.Argument(..., help="Topic name."),
    partitions: int = typer.Option(
        1, "--partitions", "-p", min=1, help="Partitions (1 keeps one arrival order overall)."
    ),
    bootstrap: str = _BOOTSTRAP,
    home: Path = _HOME,
) -> None:
    """Create topic NAME with --partitions partitions (replication 1), or say it exists.

    Create topics before anything produces to them: the embedded broker would create them
    with 4 partitions on first use, and Kafka keeps order only within a partition.
    """
    from kappaplus.local.broker import create_topic, list_topics

    try:
        address = default_bootstrap(bootstrap, home)
        existing = list_topics(address).get(name)
        if existing is not None:
            _console.print(f"topic {name!r} exists on {address} with {existing} partition(s)")
            if existing != partitions:
                _console.print(
                    f"[red]error:[/red] it has {existing} partition(s), not {partitions}; "
                    "delete and recreate it (its data is lost) or use another name"
                )
                raise typer.Exit(1)
            return
        create_topic(address, name, partitions)
    except KappaError as exc:
        raise error_exit(_console, exc) from exc
    _console.print(f"created topic {name!r} with {partitions} partition(s) on {address}")


@app.command("list")
def list_command(bootstrap: str = _BOOTSTRAP, home: Path = _HOME) -> None:
    """List the topics and their partition counts."""
    from kappaplus.local.broker import list_topics

    try:
        address = default_bootstrap(bootstrap, home)
        topics = list_topics(address)
    except KappaError as exc:
        raise error_exit(_console, exc, 1) from exc
    for topic, count in topics.items():
        print(f"{topic}\t{count}")
