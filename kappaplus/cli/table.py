"""``kappa table register|describe``: bring a lake table you already have.

Both use the catalog every ``kappa`` command of the state directory uses: the metastore
server once ``kappa up`` runs, else the embedded one (``docs/runtime.md``, "One catalog").
"""

from __future__ import annotations

import json

import typer
from rich.console import Console

from kappaplus.cli.errors import error_exit
from kappaplus.cli.session_options import METASTORE_URI, command_session
from kappaplus.core.errors import ConfigError, KappaError

app = typer.Typer(
    help="Lake tables: register a Parquet/ORC directory you have, see what a backfill reads.",
    no_args_is_help=True,
)
_console = Console()


def _check_partition_format(partition_format: str | None) -> None:
    from pydantic import ValidationError

    from kappaplus.config import HiveInput

    if partition_format is None:
        return
    try:
        HiveInput.model_validate(
            {"table": "t", "event_time_column": "t", "partition_format": partition_format}
        )
    except ValidationError as exc:
        problem = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        raise ConfigError("--partition-format", partition_format, problem) from None


_NAME = typer.Argument(..., help="Table name, e.g. lake.rides.")
_LOCATION = typer.Option(
    ..., "--location", "-l", help="Directory of the files (with --delta: the table's)."
)
_FMT = typer.Option("parquet", "--format", "-f", help="parquet or orc.")
_PARTITION_FORMAT = typer.Option(
    None,
    "--partition-format",
    help="e.g. 'dt=%Y-%m-%d/hr=%H': checks every directory (default: from the names).",
)
_REPLACE = typer.Option(
    False, "--replace", help="Point an existing table at this location (files are kept)."
)
_DELTA = typer.Option(
    False,
    "--delta",
    help="--location is a Delta table: record NAME for it in the state directory "
    "(no Spark started); the `path` of `inputs.<n>.delta` and describe --delta accept NAME.",
)
_ICEBERG = typer.Option(
    False,
    "--iceberg",
    help="--location is an Iceberg table (its directory or metadata file): register it "
    "as NAME in the Iceberg catalog (no Spark started).",
)
_CATALOG = typer.Option(
    None,
    "--catalog",
    help='With --iceberg: catalog properties as JSON, e.g. \'{"type": "rest", "uri": ...}\' '
    "(default: the embedded SQL catalog of the state directory).",
)


@app.command("register")
def register_command(
    name: str = _NAME,
    location: str = _LOCATION,
    fmt: str = _FMT,
    partition_format: str = _PARTITION_FORMAT,
    replace: bool = _REPLACE,
    metastore_uri: str = METASTORE_URI,
    delta: bool = _DELTA,
    iceberg: bool = _ICEBERG,
    catalog: str = _CATALOG,
) -> None:
    """Register the directory --location as the external table NAME: columns from the
    files, partition columns (STRING) from the directory names, every partition added.

    Run it again to add partitions that appeared since. Dropping the table later never
    deletes the files. With --delta: NAME stands for the Delta table at --location. With
    --iceberg: NAME (namespace.table) is registered in the Iceberg catalog for the table's
    newest metadata file (or the one --location names).
    """
    if delta:
        _register_delta(name, location, replace)
        return
    if iceberg or catalog is not None:
        _register_iceberg(name, location, catalog, replace)
        return
    _register_hive(name, location, fmt, partition_format, replace, metastore_uri)


def _register_hive(
    name: str,
    location: str,
    fmt: str,
    partition_format: str | None,
    replace: bool,
    metastore_uri: str | None,
) -> None:
    """``kappa table register`` of a Hive table: the partitions listed before Spark starts,
    then every one added."""
    from rich.progress import Progress

    from kappaplus.core.table.catalogs import describe_catalog
    from kappaplus.lake.register import list_partitions, register_table
    from kappaplus.session import stop_session

    try:
        _check_partition_format(partition_format)
        list_partitions(location, partition_format)  # before Spark starts
    except KappaError as exc:
        raise error_exit(_console, exc) from exc
    spark = command_session("kappa-table-register", metastore_uri=metastore_uri)
    try:
        with Progress(console=_console, transient=True) as bar:
            task = bar.add_task("adding partitions", total=None)

            def advance(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            result = register_table(
                spark,
                name,
                location,
                format=fmt,
                partition_format=partition_format,
                replace=replace,
                progress=advance,
            )
    except KappaError as exc:
        raise error_exit(_console, exc) from exc
    finally:
        stop_session(spark)
    _console.print(
        f"registered {result.table} ({result.format}) over {result.location} in "
        f"{describe_catalog(result.catalog)}: {len(result.columns)} columns, "
        f"{result.partitions} partitions ({result.added} added) in {result.seconds:.1f}s"
    )
    _console.print(f"see what a backfill reads: kappa table describe {result.table}")


_DESCRIBE_COMMAND_NAME = typer.Argument(..., help="Table name, e.g. lake.rides.")
_EVENT_TIME = typer.Option(
    None, "--event-time", "-e", help="Event-time column (default: the one timestamp)."
)
_DESCRIBE_COMMAND_PARTITION_FORMAT = typer.Option(
    None, "--partition-format", help="e.g. 'dt=%Y-%m-%d/hr=%H' (default: inferred)."
)
_AS_JSON = typer.Option(False, "--json", help="Print JSON.")
_DESCRIBE_COMMAND_ICEBERG = typer.Option(
    False, "--iceberg", help="NAME is an Iceberg table (pyiceberg; no Spark started)."
)
_DESCRIBE_COMMAND_CATALOG = typer.Option(
    None,
    "--catalog",
    help='Iceberg catalog properties as JSON, e.g. \'{"type": "rest", "uri": ...}\' '
    "(default: the embedded SQL catalog under the state directory).",
)
_DESCRIBE_COMMAND_DELTA = typer.Option(
    False,
    "--delta",
    help="NAME is a Delta table's location or a name registered with register --delta "
    "(delta-rs; no Spark started).",
)
_STORAGE_OPTIONS = typer.Option(
    None,
    "--storage-options",
    help="With --delta: delta-rs storage options as JSON, e.g. '{\"AWS_ENDPOINT_URL\": ...}'.",
)


@app.command("describe")
def describe_command(
    name: str = _DESCRIBE_COMMAND_NAME,
    event_time: str = _EVENT_TIME,
    partition_format: str = _DESCRIBE_COMMAND_PARTITION_FORMAT,
    as_json: bool = _AS_JSON,
    metastore_uri: str = METASTORE_URI,
    iceberg: bool = _DESCRIBE_COMMAND_ICEBERG,
    catalog: str = _DESCRIBE_COMMAND_CATALOG,
    delta: bool = _DESCRIBE_COMMAND_DELTA,
    storage_options: str = _STORAGE_OPTIONS,
) -> None:
    """Show what a backfill of NAME will see, from file metadata only: partitions, files,
    rows, the event-time range, null event times, and how far event times sit outside
    their partitions (what max_lateness / max_earliness must cover). With --iceberg: the
    snapshot, data and delete files, rows, the event-time range from manifest bounds, and
    how many files a typical slice overlaps. With --delta: the version, partition columns,
    files, rows, the event-time range from the log's statistics, deletion vectors, and how
    many files a typical slice overlaps."""
    if delta:
        _describe_delta(name, event_time, storage_options, as_json)
        return
    if iceberg or catalog is not None:
        _describe_iceberg(name, event_time, catalog, as_json)
        return
    from kappaplus.lake.describe import describe_lines, describe_table
    from kappaplus.session import stop_session

    spark = command_session("kappa-table-describe", metastore_uri=metastore_uri)
    try:
        found = describe_table(
            spark, name, event_time_column=event_time, partition_format=partition_format
        )
    except KappaError as exc:
        raise error_exit(_console, exc) from exc
    finally:
        stop_session(spark)
    if as_json:
        print(json.dumps(found.as_json(), indent=2))
        return
    for line in describe_lines(found):
        print(line)


def _describe_iceberg(
    name: str, event_time: str | None, catalog: str | None, as_json: bool
) -> None:
    from kappaplus.lake.iceberg_describe import describe_iceberg, iceberg_lines

    try:
        props = json.loads(catalog) if catalog else None
    except json.JSONDecodeError as exc:
        raise error_exit(_console, ConfigError("--catalog", catalog, f"not JSON: {exc}")) from exc
    try:
        found = describe_iceberg(name, props, event_time)
    except KappaError as exc:
        raise error_exit(_console, exc) from exc
    if as_json:
        print(json.dumps(found.as_json(), indent=2))
        return
    for line in iceberg_lines(found):
        print(line)


def _register_iceberg(name: str, location: str, catalog: str | None, replace: bool) -> None:
    from kappaplus.lake.iceberg_register import register_iceberg

    try:
        props = json.loads(catalog) if catalog else None
    except json.JSONDecodeError as exc:
        raise error_exit(_console, ConfigError("--catalog", catalog, f"not JSON: {exc}")) from exc
    try:
        done = register_iceberg(name, location, props, replace=replace)
    except KappaError as exc:
        raise error_exit(_console, exc) from exc
    _console.print(
        f"registered Iceberg table {done.table} -> {done.metadata_location} "
        f"(snapshot {done.snapshot_id}){' (replaced)' if done.replaced else ''}"
    )
    flag = f" --catalog '{catalog}'" if catalog else ""
    _console.print(f"see what a backfill reads: kappa table describe --iceberg {name}{flag}")


def _register_delta(name: str, location: str, replace: bool) -> None:
    import os

    from kappaplus.connectors.delta.log import open_delta
    from kappaplus.connectors.delta.names import register_delta_name

    where = location if "://" in location else os.path.abspath(location)
    try:
        table = open_delta(where, None)  # a Delta table there, or a one-line error
        register_delta_name(name, where, replace=replace)
    except KappaError as exc:
        raise error_exit(_console, exc) from exc
    _console.print(f"registered Delta table {name} -> {where} (version {table.version()})")
    _console.print(f"see what a backfill reads: kappa table describe --delta {name}")


def _describe_delta(
    name: str, event_time: str | None, storage_options: str | None, as_json: bool
) -> None:
    from kappaplus.lake.delta_describe import delta_lines, describe_delta

    try:
        props = json.loads(storage_options) if storage_options else None
    except json.JSONDecodeError as exc:
        raise error_exit(
            _console, ConfigError("--storage-options", storage_options, f"not JSON: {exc}")
        ) from exc
    try:
        found = describe_delta(name, props, event_time)
    except KappaError as exc:
        raise error_exit(_console, exc) from exc
    if as_json:
        print(json.dumps(found.as_json(), indent=2))
        return
    for line in delta_lines(found):
        print(line)
