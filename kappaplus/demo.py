"""``kappa demo``: a Kappa+ backfill on the embedded stack, end to end, in a few minutes.

It generates two days of rider app events into a Hive table partitioned by *arrival*
hour (events arrive up to 25 minutes late and out of order), backfills an hourly count
per event type by streaming the table one event-time slice per micro-batch, and checks
every window against a plain Spark batch query over the same table.
"""

from __future__ import annotations

import logging
import shutil
import time
from datetime import UTC, datetime

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kappaplus.settings import state_dir

log = logging.getLogger(__name__)
console = Console()

TABLE = "demo_rider_events"
START = datetime(2024, 6, 1, tzinfo=UTC)
DAYS = 2
LATENESS_MINUTES = 25


def generate(spark, events: int) -> None:  # type: ignore[no-untyped-def]
    """Rider events over two days; each arrives up to 25 minutes after it happened."""
    from pyspark.sql import functions as F

    base = int(START.timestamp())
    kinds = F.array(*[F.lit(k) for k in ("app_open", "search", "trip_request", "payment")])
    df = spark.range(events).select(
        F.concat(F.lit("rider-"), (F.col("id") % 200).cast("string")).alias("rider_id"),
        F.element_at(kinds, (F.abs(F.hash("id")) % 4 + 1).cast("int")).alias("event_type"),
        (F.lit(base) + (F.rand(11) * DAYS * 86400).cast("long")).cast("timestamp").alias("ts"),
    )
    arrival = (F.col("ts").cast("long") + (F.rand(12) * LATENESS_MINUTES * 60).cast("long")).cast(
        "timestamp"
    )
    spark.sql(f"DROP TABLE IF EXISTS {TABLE}")
    (
        df.withColumn("dt", F.date_format(arrival, "yyyy-MM-dd"))
        .withColumn("hr", F.date_format(arrival, "HH"))
        .repartition(2, "dt", "hr")
        .write.partitionBy("dt", "hr")
        .format("parquet")
        .saveAsTable(TABLE)
    )


def run_demo(events: int = 20_000, slice_hours: int = 6) -> bool:
    """Run the demo; return True when the backfill equals the batch ground truth."""
    from pyspark.sql import functions as F

    from kappaplus.session import create_session
    from kappaplus.sources.hive import read_hive_stream

    home = state_dir()
    started = time.time()
    console.rule("[bold]kappaplus demo: backfill a Hive table as a stream")
    with console.status("starting Spark (local mode, embedded Hive metastore)"):
        spark = create_session("kappa-demo", home=home)
    with console.status(f"generating {events:,} rider events into Hive table {TABLE}"):
        generate(spark, events)
    console.print(
        f"table [cyan]{TABLE}[/]: {events:,} events over {DAYS} days, partitioned by arrival "
        f"hour, up to {LATENESS_MINUTES} min late"
    )

    end = START.replace(day=START.day + DAYS)
    stream = read_hive_stream(
        spark,
        TABLE,
        event_time_column="ts",
        start=START.isoformat(),
        end=end.isoformat(),
        max_event_time_per_trigger=f"{slice_hours} hours",
        watermark_delay="10 minutes",
        partitionTimeKind="arrival",
        maxLateness=f"{LATENESS_MINUTES} minutes",
        manifestDir=str(home / "demo" / "manifests"),
    )
    hourly = (
        stream.groupBy(F.window("ts", "1 hour"), "event_type")
        .count()
        .select(F.col("window.start").alias("hour"), "event_type", "count")
    )
    checkpoint = home / "demo" / "checkpoint"
    shutil.rmtree(checkpoint, ignore_errors=True)
    query = (
        hourly.writeStream.format("memory")
        .queryName("demo_hourly")
        .outputMode("append")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    with Progress(
        TextColumn("backfill"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TextColumn("{task.fields[slice]}"),
        TimeElapsedColumn(),
        console=console,
    ) as bar:
        task = bar.add_task("backfill", total=1.0, slice="")
        while query.isActive:
            progress = query.lastProgress
            if progress and progress["sources"]:
                import json

                offset = json.loads(progress["sources"][0]["endOffset"])
                bar.update(task, completed=offset.get("done", 0.0), slice=offset.get("range", ""))
            time.sleep(0.5)
        query.awaitTermination()
        bar.update(task, completed=1.0)
    batches = len(query.recentProgress)

    got = spark.table("demo_hourly")
    in_range = (F.col("ts") >= F.lit(START)) & (F.col("ts") < F.lit(end))
    truth = (
        spark.table(TABLE)
        .where(in_range)
        .groupBy(F.window("ts", "1 hour").start.alias("hour"), "event_type")
        .count()
    )
    missing, extra = truth.exceptAll(got).count(), got.exceptAll(truth).count()

    table = Table(title="events per hour and type (first 8 hours)")
    table.add_column("hour (UTC)")
    for kind in ("app_open", "search", "trip_request", "payment"):
        table.add_column(kind, justify="right")
    pivot = got.groupBy("hour").pivot("event_type").sum("count").orderBy("hour").limit(8)
    for row in pivot.collect():
        table.add_row(
            row["hour"].strftime("%Y-%m-%d %H:%M"),
            *[str(row[k] or 0) for k in ("app_open", "search", "trip_request", "payment")],
        )
    console.print(table)
    ok = missing == 0 and extra == 0
    console.print(
        f"{got.count()} windows from {batches} micro-batches; vs batch query: "
        f"{missing} missing, {extra} extra -> "
        + ("[green]identical[/]" if ok else "[red]DIFFERENT[/]")
    )
    console.print(f"state under {home}; took {time.time() - started:.0f} s")
    spark.stop()
    return ok


def register(app: typer.Typer) -> None:
    """Add ``kappa demo`` to the CLI."""

    @app.command()
    def demo(
        events: int = typer.Option(20_000, help="How many rider events to generate."),
        slice_hours: int = typer.Option(6, help="Event time per micro-batch (hours)."),
    ) -> None:
        """Generate rider events into Hive and backfill them as a stream, checked against batch."""
        if not run_demo(events, slice_hours):
            raise typer.Exit(1)
