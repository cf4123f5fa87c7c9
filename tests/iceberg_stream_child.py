"""A child process for the kill -9 test: an Iceberg backfill (10-minute tumbling counts and
sums) into a Parquet sink, one slice of ~250 rows per micro-batch.

    python iceberg_stream_child.py CATALOG_JSON TABLE WORK (processing|available-now)
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    props, table, work, trigger = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    from pyspark.sql import functions as F

    from kappaplus.connectors.iceberg import read_iceberg_stream
    from kappaplus.session import create_session

    spark = create_session("iceberg-kill-child")
    df = read_iceberg_stream(
        spark,
        table,
        event_time_column="ts",
        catalog=props,
        end="2024-03-06",
        watermark_delay="30 minutes",
        manifest_dir=f"{work}/manifests",
        targetRowsPerTrigger="250",
    )
    agg = df.groupBy(F.window("ts", "10 minutes")).agg(
        F.count("*").alias("n"), F.sum("v").alias("s")
    )
    writer = (
        agg.writeStream.format("parquet")
        .outputMode("append")
        .option("path", f"{work}/out")
        .option("checkpointLocation", f"{work}/cp")
    )
    if trigger == "processing":
        writer = writer.trigger(processingTime="0 seconds")
    else:
        writer = writer.trigger(availableNow=True)
    writer.start().awaitTermination()


if __name__ == "__main__":
    main()
