"""``kappa demo``: the whole loop on the embedded stack (:mod:`kappaplus.local.demo`)."""

from __future__ import annotations

import typer

from kappaplus.local.demo import run_demo


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
        down: bool = typer.Option(False, "--down", help="Stop the services at the end."),
    ) -> None:
        """Start the embedded stack, produce rider events to Kafka, archive them to Hive,
        run sessionization in stream mode and backfill it, then reconcile side by side."""
        report = run_demo(riders, days, slice_hours, batch_hours, down=down)
        if down:
            from kappaplus.cli.stack import down as stop_services

            stop_services(None)  # type: ignore[arg-type]
        if not report.ok:
            raise typer.Exit(1)
