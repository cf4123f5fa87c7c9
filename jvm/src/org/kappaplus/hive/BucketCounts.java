package org.kappaplus.hive;

import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;

/**
 * Rows per audit bucket ({@code floor(event time / bucket)}) that one reader task delivered,
 * counted as the rows pass: the audit's lake-stage counts without an observed histogram over
 * every row. Dense (an array from the first bucket seen) while the buckets span at most
 * {@link #MAX_DENSE}, a map beyond.
 *
 * <p>A task's counts travel to the driver as one line of an accumulator,
 * {@code bucket:count,bucket:count}; {@link #sumInto} adds lines up there.
 */
final class BucketCounts {
  static final int MAX_DENSE = 1 << 16;

  private final long bucketMicros;
  private long base;
  private long[] dense;
  private Map<Long, Long> sparse;

  BucketCounts(long bucketSeconds) {
    this.bucketMicros = bucketSeconds * 1_000_000L;
  }

  void add(long micros) {
    long bucket = Math.floorDiv(micros, bucketMicros);
    if (sparse != null) {
      sparse.merge(bucket, 1L, Long::sum);
      return;
    }
    if (dense == null) {
      base = bucket;
      dense = new long[16];
    }
    long index = bucket - base;
    if (index < 0 || index >= dense.length) {
      if (!grow(bucket)) {
        sparse.merge(bucket, 1L, Long::sum);
        return;
      }
      index = bucket - base;
    }
    dense[(int) index]++;
  }

  /** Room for {@code bucket} in the array (false: the counts moved to the map). */
  private boolean grow(long bucket) {
    long lo = Math.min(base, bucket);
    long hi = Math.max(base + dense.length, bucket + 1);
    if (hi - lo > MAX_DENSE) {
      sparse = new HashMap<>();
      forEach(sparse);
      dense = null;
      return false;
    }
    int size = (int) Math.min(MAX_DENSE, Math.max(hi - lo, 2L * dense.length));
    // room to grow on the side the new bucket came from
    long grownBase = bucket < base ? hi - size : lo;
    long[] grown = new long[size];
    System.arraycopy(dense, 0, grown, (int) (base - grownBase), dense.length);
    dense = grown;
    base = grownBase;
    return true;
  }

  private void forEach(Map<Long, Long> into) {
    for (int i = 0; i < dense.length; i++) {
      if (dense[i] != 0) {
        into.merge(base + i, dense[i], Long::sum);
      }
    }
  }

  boolean isEmpty() {
    return dense == null && (sparse == null || sparse.isEmpty());
  }

  /** {@code bucket:count,...}, in bucket order. */
  String encode() {
    Map<Long, Long> all = new TreeMap<>();
    if (sparse != null) {
      all.putAll(sparse);
    } else if (dense != null) {
      forEach(all);
    }
    StringBuilder out = new StringBuilder();
    for (Map.Entry<Long, Long> e : all.entrySet()) {
      if (out.length() > 0) {
        out.append(',');
      }
      out.append(e.getKey()).append(':').append(e.getValue());
    }
    return out.toString();
  }

  /** Adds one {@link #encode}d line to {@code into}. */
  static void sumInto(String line, Map<Long, Long> into) {
    if (line.isEmpty()) {
      return;
    }
    for (String pair : line.split(",")) {
      int colon = pair.indexOf(':');
      into.merge(Long.parseLong(pair.substring(0, colon)),
          Long.parseLong(pair.substring(colon + 1)), Long::sum);
    }
  }
}
