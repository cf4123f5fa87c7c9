package org.kappaplus.hive;

import java.util.List;

import org.apache.spark.sql.connector.read.InputPartition;

/** Some files of a slice {@code [lo, hi)}, or the one end-of-input marker row. */
final class SliceInputPartition implements InputPartition {
  private static final long serialVersionUID = 1L;

  final long lo;
  final long hi;
  final long origin;
  final long end;
  final Long markerTime;
  final List<SliceFile> files;

  SliceInputPartition(long lo, long hi, long origin, long end, Long markerTime,
      List<SliceFile> files) {
    this.lo = lo;
    this.hi = hi;
    this.origin = origin;
    this.end = end;
    this.markerTime = markerTime;
    this.files = List.copyOf(files);
  }
}
