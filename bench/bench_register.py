"""Partition registration of an existing lake directory, side by side in one run.

Ways compared over the same hourly Parquet tree (``--hours`` partitions, one small file each),
each on a fresh external table in the embedded catalog:

- ``msck``: ``MSCK REPAIR TABLE`` (Spark lists the tree and computes file statistics per
  partition, ``spark.sql.gatherFastStats=true``, the default);
- ``msck-nostats``: the same with ``spark.sql.gatherFastStats=false``;
- ``register``: :func:`kappaplus.lake.register.register_table` (one pyarrow listing, checks
  every directory against the partition format, ``ALTER TABLE ADD PARTITION ... LOCATION``
  in batches).

Prints seconds per way and the ratio to ``register``; compare ratios only (load: ``uptime``).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from datetime import UTC, datetime, timedelta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hours", type=int, default=480)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="bench-register-")
    os.environ["KAPPA_HOME"] = home
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kappaplus.lake.register import register_table
    from kappaplus.session import create_session

    location = f"{home}/lake/rides"
    base = datetime(2024, 3, 1, tzinfo=UTC)
    for hour in range(args.hours):
        at = base + timedelta(hours=hour)
        folder = f"{location}/dt={at:%Y-%m-%d}/hr={at:%H}"
        os.makedirs(folder)
        times = [at + timedelta(minutes=i) for i in range(10)]
        table = pa.table(
            {"ride_id": [f"{hour}-{i}" for i in range(10)], "event_time": pa.array(times)}
        )
        pq.write_table(table, f"{folder}/part-0.parquet")
    spark = create_session("bench-register")
    ddl = "ride_id string, event_time timestamp, dt string, hr string"
    spark.sql(
        f"CREATE TABLE warmup ({ddl}) USING parquet PARTITIONED BY (dt, hr) LOCATION '{location}'"
    )
    seconds: dict[str, float] = {}
    for way in ("msck", "msck-nostats", "register"):
        name = way.replace("-", "_")
        spark.conf.set("spark.sql.gatherFastStats", "false" if way == "msck-nostats" else "true")
        began = time.monotonic()
        if way == "register":
            register_table(spark, name, location, partition_format="dt=%Y-%m-%d/hr=%H")
        else:
            spark.sql(
                f"CREATE TABLE {name} ({ddl}) USING parquet PARTITIONED BY (dt, hr) "
                f"LOCATION '{location}'"
            )
            spark.sql(f"MSCK REPAIR TABLE {name}")
        seconds[way] = time.monotonic() - began
        assert spark.sql(f"SHOW PARTITIONS {name}").count() == args.hours
    load = os.getloadavg()[0]
    print(f"{args.hours} partitions, load {load:.1f}")
    for way, took in seconds.items():
        print(f"{way:14} {took:7.1f} s  x{took / seconds['register']:.2f}")


if __name__ == "__main__":
    main()
