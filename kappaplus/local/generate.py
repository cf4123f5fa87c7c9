"""Demo data on the embedded stack: the reference jobs' rider and driver events
(:mod:`kappaplus.examples.generate`) written to Hive tables and/or produced to Kafka.

``python -m kappaplus.local.generate --tables --bootstrap 127.0.0.1:9092``; with ``kappa
up`` running, the tables go to its metastore server.
"""

from __future__ import annotations

from collections.abc import Sequence

from kappaplus.examples.generate import (
    DRIVER_EVENT_DDL,
    RIDER_EVENT_DDL,
    arrival_order,
    driver_events,
    produce,
    rider_events,
    write_table,
)


def main(argv: Sequence[str] | None = None) -> None:
    """Demo data: ``python -m kappaplus.local.generate --hours 24 --tables --bootstrap
    127.0.0.1:9092`` writes the Hive tables ``rider_events`` / ``driver_status`` (in the
    state directory's warehouse) and/or produces the topics ``rider-events`` /
    ``driver-status`` in arrival order."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m kappaplus.local.generate")
    parser.add_argument("--start", default="2024-03-01T00:00:00")
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--riders", type=int, default=200)
    parser.add_argument("--drivers", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tables", action="store_true", help="write the Hive tables")
    parser.add_argument("--bootstrap", help="produce to Kafka at host:port")
    args = parser.parse_args(argv)
    riders = rider_events(riders=args.riders, start=args.start, hours=args.hours, seed=args.seed)
    drivers = driver_events(
        drivers=args.drivers, start=args.start, hours=args.hours, seed=args.seed
    )
    if args.tables:
        from kappaplus.local.metastore import LOCAL_DISCOVERY
        from kappaplus.session import create_session

        spark = create_session("kappa-generate", metastore_discovery=LOCAL_DISCOVERY)
        write_table(spark, "rider_events", riders, RIDER_EVENT_DDL)
        write_table(spark, "driver_status", drivers, DRIVER_EVENT_DDL)
        spark.stop()
    if args.bootstrap:
        produce(args.bootstrap, "rider-events", arrival_order(riders))
        produce(args.bootstrap, "driver-status", arrival_order(drivers))
    print(f"{len(riders)} rider events, {len(drivers)} driver events")


if __name__ == "__main__":
    main()
