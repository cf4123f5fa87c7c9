"""``kappa up``, ``kappa down``, ``kappa metastore start|stop|status`` and
``kappa s3 start|stop|status``: the local stack.

``kappa up`` starts the embedded Kafka broker and the Hive metastore server of the state
directory (detached; a running one is reused), with ``--s3`` also an S3-compatible object
store (moto's server), and ``kappa down`` stops them all. Sessions of the same state
directory find the metastore server by themselves, so a stream run and a backfill run of
one job can run side by side.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from kappaplus.cli.errors import error_exit, print_error
from kappaplus.core.errors import KappaError
from kappaplus.core.settings import state_dir
from kappaplus.local.broker import EmbeddedBroker
from kappaplus.local.metastore import MetastoreServer
from kappaplus.local.s3 import ENDPOINT_ENV, ObjectStore, delta_storage_options, toml_inline

_console = Console()
_HOME = typer.Option(None, "--home", help="State directory (default $KAPPA_HOME or ./.kappa).")

metastore_app = typer.Typer(
    help="The local Hive metastore server (thrift on 127.0.0.1, Derby under the state dir).",
    no_args_is_help=True,
)


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
        raise error_exit(_console, exc, 1) from exc
    verb = f"already running (pid {before.pid})" if before.running else "started"
    _console.print(f"metastore {verb} at [bold]{uri}[/bold] (log {server.log_file})")
    _console.print(
        f"sessions of the state directory {server.home} (kappa run, create_session) use it "
        "automatically; elsewhere pass --metastore-uri / metastore_uri or set KAPPA_METASTORE_URI"
    )


@metastore_app.command("stop")
def metastore_stop(home: Path = _HOME) -> None:
    """Stop the metastore server (tables and data stay under the state directory)."""
    try:
        stopped = MetastoreServer(home).stop()
    except KappaError as exc:
        raise error_exit(_console, exc, 1) from exc
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


s3_app = typer.Typer(
    help="The local S3-compatible object store (moto_server on 127.0.0.1; objects in memory, "
    "lost when it stops).",
    no_args_is_help=True,
)


@s3_app.command("start")
def s3_start(
    port: int = typer.Option(None, "--port", "-p", help="Port (default 5000, else a free one)."),
    bucket: str = typer.Option("kappa", "--bucket", help="Bucket to create (kept if it exists)."),
    home: Path = _HOME,
) -> None:
    """Start the object store detached (and create the bucket), or report the one running;
    prints the catalog and storage properties to paste into a job config."""
    store = ObjectStore(home, port, bucket=bucket)
    before = store.status()
    try:
        endpoint = store.start()
    except KappaError as exc:
        raise error_exit(_console, exc, 1) from exc
    verb = f"already running (pid {before.pid})" if before.running else "started"
    _console.print(f"s3 store {verb} at [bold]{endpoint}[/bold] (log {store.log_file})")
    print_s3_properties(store, endpoint)


@s3_app.command("stop")
def s3_stop(home: Path = _HOME) -> None:
    """Stop the object store: its objects (kept in memory) are gone, and so is the SQL
    catalog under the state directory that named them."""
    try:
        stopped = ObjectStore(home).stop()
    except KappaError as exc:
        raise error_exit(_console, exc, 1) from exc
    _console.print("s3 store stopped" if stopped else "no s3 store running")


@s3_app.command("status")
def s3_status(home: Path = _HOME) -> None:
    """Show pid, endpoint and bucket of the running object store."""
    info = ObjectStore(home).status()
    if not info.running:
        _console.print("no s3 store running")
        raise typer.Exit(1)
    since = dt.datetime.fromtimestamp(info.started_at or 0).isoformat(timespec="seconds")
    _console.print(
        f"s3 store running: pid {info.pid}, [bold]{info.endpoint}[/bold], bucket "
        f"s3://{info.bucket}/, since {since}\nlog: {info.log_file}"
    )


def print_s3_properties(store: ObjectStore, endpoint: str) -> None:
    """The lines a user pastes into a job config to keep tables in the store's bucket."""
    catalog = store.iceberg_catalog(endpoint)
    _console.print(
        f"Iceberg tables in s3://{store.bucket}/warehouse ([inputs|outputs.<name>.iceberg]; "
        "the SQL catalog file is removed with the store):",
        markup=False,
    )
    print(f"  catalog = {toml_inline(catalog)}")
    _console.print(
        f'Delta tables at path = "s3://{store.bucket}/<table>" ([inputs|outputs.<name>.delta]):',
        markup=False,
    )
    print(f"  storage_options = {toml_inline(delta_storage_options(endpoint))}")
    _console.print(
        "objects live in the server's memory: kappa down (or kappa s3 stop) loses them",
        style="dim",
    )


UP_HELP = (
    "Start the local services, or reuse the running ones: the embedded Kafka broker and the "
    "Hive metastore server, detached, with their files under the state directory.\n\n"
    "`kappa run` (any session of the same state directory) uses the metastore server by "
    "itself, so a stream run and a backfill run of one job can run at the same time. "
    "The broker keeps topics in memory only.\n\n"
    "--s3 (opt-in) also starts an S3-compatible object store (moto_server, objects in memory) "
    "with a bucket, and prints the Iceberg catalog and Delta storage properties that put "
    "tables there. `kappa down` stops them all."
)


_BROKER = typer.Option(
    True, "--broker/--no-broker", help="Start the embedded Kafka-protocol broker."
)
_METASTORE = typer.Option(
    True, "--metastore/--no-metastore", help="Start the Hive metastore server."
)
_BROKER_PORT = typer.Option(
    None, "--broker-port", help="Broker port (default 9092, else a free one)."
)
_METASTORE_PORT = typer.Option(
    None, "--metastore-port", help="Metastore port (default 9083, else a free one)."
)
_S3 = typer.Option(
    False,
    "--s3/--no-s3",
    help="Also start the S3-compatible object store (moto_server; objects in memory).",
)
_S3_PORT = typer.Option(None, "--s3-port", help="Object store port (default 5000).")
_PRINT_ENV = typer.Option(
    False,
    "--print-env",
    help='Print only the export lines (for eval "$(kappa up --print-env)").',
)


def up(
    home: Path = _HOME,
    broker: bool = _BROKER,
    metastore: bool = _METASTORE,
    broker_port: int = _BROKER_PORT,
    metastore_port: int = _METASTORE_PORT,
    s3: bool = _S3,
    s3_port: int = _S3_PORT,
    print_env: bool = _PRINT_ENV,
) -> None:
    """Start (or reuse) the embedded broker and the metastore server; see ``UP_HELP``."""
    if not (broker or metastore or s3):
        _console.print("[red]error:[/red] nothing to start (--no-broker and --no-metastore)")
        raise typer.Exit(2)
    root = state_dir(home)
    table = Table("service", "state", "address", "pid")
    logs: list[str] = []
    addresses: dict[str, str] = {}
    wanted: list[tuple[str, str, EmbeddedBroker | MetastoreServer | ObjectStore, str]] = []
    if broker:
        wanted.append(("broker", "kafka broker", EmbeddedBroker(root, broker_port), "the broker"))
    if metastore:
        server = MetastoreServer(root, metastore_port)
        wanted.append(("metastore", "hive metastore", server, "the metastore server (a JVM)"))
    store = ObjectStore(root, s3_port)
    if s3:
        wanted.append(("s3", "s3 object store", store, "the object store (moto_server)"))
    failed = _start_services(wanted, print_env, table, logs, addresses)
    exports = export_lines(addresses, root)
    if print_env:
        print("\n".join(exports))
        raise typer.Exit(1 if failed else 0)
    _console.print(table)
    _console.print(f"state directory: {root}")
    _print_addresses(addresses, root, store)
    if exports:
        _console.print(
            'for job configs (bootstrap_servers = "${KAPPA_BOOTSTRAP}") and other shells, '
            'export (or eval "$(kappa up --print-env)"):'
        )
        for line in exports:
            print(f"  {line}")
    for line in logs:
        _console.print(line, style="dim")
    _console.print("stop with: kappa down" + (f" --home {home}" if home else ""))
    if failed:
        raise typer.Exit(1)


def _start_services(
    wanted: list[tuple[str, str, EmbeddedBroker | MetastoreServer | ObjectStore, str]],
    print_env: bool,
    table: Table,
    logs: list[str],
    addresses: dict[str, str],
) -> bool:
    """Start (or reuse) each wanted service, noting its address, row and log; whether one
    failed (each failure printed)."""
    failed = False
    for key, label, service, what in wanted:
        try:
            was_running = service.status().running
            if print_env:
                addresses[key] = service.start()
                continue
            with _console.status(f"starting {what}"):
                addresses[key] = service.start()
            state = "already running" if was_running else "started"
            table.add_row(label, state, addresses[key], str(service.status().pid))
            logs.append(f"{key} log: {service.log_file}")
        except KappaError as exc:
            print_error(_console, f"{key}: {exc}")
            table.add_row(label, "[red]failed[/red]", "-", "-")
            failed = True
    return failed


def _print_addresses(addresses: dict[str, str], root: Path, store: ObjectStore) -> None:
    """Where each started service listens, and how a job config names it."""
    if "broker" in addresses:
        _console.print(
            f"bootstrap servers: [bold]{addresses['broker']}[/bold] "
            "(bootstrap_servers in a job config)"
        )
    if "metastore" in addresses:
        _console.print(f"metastore URI: [bold]{addresses['metastore']}[/bold]")
        _console.print(
            "kappa run and create_session pick this metastore up automatically when they use "
            f"the same state directory (KAPPA_HOME={root})"
        )
    if "s3" in addresses:
        _console.print(f"s3 endpoint: [bold]{addresses['s3']}[/bold]")
        print_s3_properties(store, addresses["s3"])


def export_lines(addresses: dict[str, str], home: Path) -> list[str]:
    """The shell lines exporting where the services listen, for configs that say
    ``${KAPPA_BOOTSTRAP}`` and for processes of other state directories.

    >>> export_lines({"broker": "127.0.0.1:39092"}, Path("/tmp/k"))
    ['export KAPPA_HOME=/tmp/k', 'export KAPPA_BOOTSTRAP=127.0.0.1:39092']
    """
    import shlex

    lines = [f"export KAPPA_HOME={shlex.quote(str(home))}"] if addresses else []
    if "broker" in addresses:
        lines.append(f"export KAPPA_BOOTSTRAP={addresses['broker']}")
    if "metastore" in addresses:
        lines.append(f"export KAPPA_METASTORE_URI={addresses['metastore']}")
    if "s3" in addresses:
        lines.append(f"export {ENDPOINT_ENV}={addresses['s3']}")
    return lines


def running_services(home: Path | None = None) -> list[str]:
    """One entry per local service running for the state directory ``home`` (broker,
    metastore server, object store) with its address, from the pid files alone: what
    ``kappa status`` shows under the runs. No request is made to the services."""
    found = []
    bootstrap = EmbeddedBroker(home).bootstrap()
    if bootstrap is not None:
        found.append(f"broker {bootstrap}")
    metastore = MetastoreServer(home).status()
    if metastore.running:
        found.append(f"metastore {metastore.uri}")
    store = ObjectStore(home).status()
    if store.running:
        found.append(f"s3 {store.endpoint} (s3://{store.bucket}/)")
    return found


def down(home: Path = _HOME) -> None:
    """Stop the local services: the metastore server, the embedded broker and the object
    store (whose objects, kept in memory, are gone with it)."""
    failed = False
    services: list[tuple[str, EmbeddedBroker | MetastoreServer | ObjectStore]] = [
        ("metastore", MetastoreServer(home)),
        ("broker", EmbeddedBroker(home)),
        ("s3 store", ObjectStore(home)),
    ]
    for key, service in services:
        try:
            stopped = service.stop()
            _console.print(f"{key} stopped" if stopped else f"no {key} running")
        except KappaError as exc:
            print_error(_console, exc)
            failed = True
    if failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``kappa up``, ``kappa down`` and the ``kappa metastore`` and ``kappa s3`` groups
    to the CLI."""
    app.command("up", help=UP_HELP)(up)
    app.command("down")(down)
    app.add_typer(metastore_app, name="metastore")
    app.add_typer(s3_app, name="s3")
