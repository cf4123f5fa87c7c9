"""``kappa demo``: the whole loop on the embedded stack (:mod:`kappaplus.local.demo`)."""

from __future__ import annotations

import typer
from rich.console import Console

from kappaplus.cli.errors import error_exit
from kappaplus.core.errors import KappaError
from kappaplus.core.settings import state_dir
from kappaplus.local.demo import run_demo
from kappaplus.local.demo_lakes import LAKES, demo_lake

_console = Console()


def register(app: typer.Typer) -> None:
    """Add ``kappa demo`` to the CLI."""

    @app.command()
    def demo(
        riders: int = typer.Option(150, help="Riders to simulate."),
        days: int = typer.Option(3, help="Days of events."),
        slice_hours: int = typer.Option(12, help="Backfill: event time per micro-batch (hours)."),
        batch_hours: float = typer.Option(
            3.0, help="Stream: hours of arrivals per micro-batch (sets maxOffsetsPerTrigger)."
        ),
        lake: str = typer.Option(
            "hive",
            "--lake",
            help=f"Table format of the lake the topic is archived to and the backfill reads: "
            f"{', '.join(LAKES)} (hive: Parquet partitions by event dt/hr in the "
            "metastore; iceberg: an Iceberg table in the embedded pyiceberg SQL catalog "
            "under $KAPPA_HOME/iceberg, local warehouse; delta: a Delta table under "
            "$KAPPA_HOME/delta through delta-rs).",
        ),
        s3: bool = typer.Option(
            False,
            "--s3",
            help="With --lake iceberg: the Iceberg table in the embedded S3-compatible object "
            "store (started like kappa up --s3; objects in memory, lost at kappa down).",
        ),
        record_format: str = typer.Option(
            "json",
            "--format",
            help="The rider events in Kafka: json, or protobuf (rides.v1.RiderEvent from the "
            "rides.proto shipped in kappaplus/examples; archived, streamed and backfilled "
            "with format = 'protobuf').",
        ),
        down: bool = typer.Option(False, "--down", help="Stop the services at the end."),
    ) -> None:
        """Start the embedded stack, produce rider events to Kafka, archive them to the lake
        (a Hive table, or an Iceberg or Delta table with --lake iceberg|delta), run
        sessionization in stream mode and backfill it from the lake, then reconcile side by
        side."""
        try:
            # a bad value fails before the stack
            demo_lake(lake, state_dir(), option="--lake", catalog={} if s3 else None)
            report = run_demo(
                riders,
                days,
                slice_hours,
                batch_hours,
                down=down,
                lake=lake,
                s3=s3,
                record_format=record_format,
            )
        except KappaError as exc:
            if exc.exit_code != 2:
                raise
            raise error_exit(_console, exc, 2) from exc
        if down:
            from kappaplus.cli.stack import down as stop_services

            stop_services(None)  # type: ignore[arg-type]
        if not report.ok:
            raise typer.Exit(1)
