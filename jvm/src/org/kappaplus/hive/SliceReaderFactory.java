package org.kappaplus.hive;

import java.io.IOException;
import java.time.Instant;
import java.util.Iterator;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.TaskContext;
import org.apache.spark.TaskContext$;
import org.apache.spark.paths.SparkPath;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.JoinedRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.execution.datasources.PartitionedFile;
import org.apache.spark.sql.execution.datasources.v2.parquet.ParquetPartitionReaderFactory;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.util.CollectionAccumulator;
import org.apache.spark.util.SerializableConfiguration;

/** Reads a slice's files with Spark's Parquet reader and keeps the rows the slice delivers. */
final class SliceReaderFactory implements PartitionReaderFactory {
  private static final long serialVersionUID = 1L;
  static final String DATA_ERROR = "kappaplus.core.errors.DataError: ";

  private final ParquetPartitionReaderFactory parquet;
  private final ReadPlan plan;
  private final Broadcast<SerializableConfiguration> hadoop;
  /** Where each task adds the rows it delivered per audit bucket (null: not counted). */
  private final CollectionAccumulator<String> delivered;
  private final long bucketSeconds;

  SliceReaderFactory(ParquetPartitionReaderFactory parquet, ReadPlan plan,
      Broadcast<SerializableConfiguration> hadoop, CollectionAccumulator<String> delivered,
      long bucketSeconds) {
    this.parquet = parquet;
    this.plan = plan;
    this.hadoop = hadoop;
    this.delivered = delivered;
    this.bucketSeconds = bucketSeconds;
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    SliceInputPartition part = (SliceInputPartition) partition;
    if (part.markerTime != null) {
      return new MarkerReader(plan, part.markerTime);
    }
    return new SliceReader(parquet, plan, part, hadoop.value().value(), delivered,
        bucketSeconds);
  }

  static String iso(long micros) {
    if (micros <= -(1L << 61)) {
      return "-inf";
    }
    if (micros >= (1L << 61)) {
      return "+inf";
    }
    return Instant.ofEpochSecond(Math.floorDiv(micros, 1_000_000L),
        Math.floorMod(micros, 1_000_000L) * 1000L).toString();
  }

  private static final class MarkerReader implements PartitionReader<InternalRow> {
    private final InternalRow row;
    private boolean done;

    MarkerReader(ReadPlan plan, long micros) {
      InternalRow read = plan.markerRow(micros);
      row = plan.projection(true).apply(
          plan.joinsConstants() ? new JoinedRow(read, plan.constants(null)) : read);
    }

    @Override
    public boolean next() {
      boolean first = !done;
      done = true;
      return first;
    }

    @Override
    public InternalRow get() {
      return row;
    }

    @Override
    public void close() {}
  }

  /** The rows of one input partition's files whose event time is in the slice and in the
   * range their partition admits; the owner of a file also checks it for rows no slice can
   * place (null event time, outside the admissible range) and fails naming the file. */
  private static final class SliceReader implements PartitionReader<InternalRow> {
    private final ParquetPartitionReaderFactory parquet;
    private final ReadPlan plan;
    private final SliceInputPartition part;
    private final UnsafeProjection projection;
    private final JoinedRow joined = new JoinedRow();
    private final boolean joinsConstants;
    private final Iterator<SliceFile> files;
    private final Configuration hadoop;
    private final CollectionAccumulator<String> delivered;
    private BucketCounts counts;

    private SliceFile file;
    private long lo;
    private long hi;
    private long unplaceable;
    private long nullTimes;
    private long firstOutside = Long.MIN_VALUE;
    private PartitionReader<ColumnarBatch> batches;
    private PartitionReader<InternalRow> rows;
    private ColumnarBatch batch;
    private int index;
    private InternalRow current;

    SliceReader(ParquetPartitionReaderFactory parquet, ReadPlan plan, SliceInputPartition part,
        Configuration hadoop, CollectionAccumulator<String> delivered, long bucketSeconds) {
      this.parquet = parquet;
      this.delivered = delivered;
      this.counts = delivered == null ? null : new BucketCounts(bucketSeconds);
      this.hadoop = hadoop;
      this.plan = plan;
      this.part = part;
      this.projection = plan.projection(false);
      this.joinsConstants = plan.joinsConstants();
      this.files = part.files.iterator();
    }

    private boolean openNext() throws IOException {
      closeFile();
      if (!files.hasNext()) {
        return false;
      }
      file = files.next();
      Path path = new Path(file.uri);
      FileSystem fs = path.getFileSystem(hadoop);
      FileStatus status;
      try {
        status = fs.getFileStatus(path);
      } catch (java.io.FileNotFoundException e) {
        status = null;
      }
      if (status == null || !status.isFile() || status.getLen() != file.size) {
        throw new IllegalStateException(DATA_ERROR + "table '" + plan.table + "': file '"
            + file.path + "' of slice [" + iso(part.lo) + ", " + iso(part.hi) + ") was removed or"
            + " rewritten after the slice was planned; the batch cannot be replayed exactly");
      }
      lo = Math.max(part.lo, file.admissibleLo);
      hi = Math.min(part.hi, file.admissibleHi);
      unplaceable = 0;
      nullTimes = 0;
      firstOutside = Long.MIN_VALUE;
      PartitionedFile split = new PartitionedFile(InternalRow.empty(),
          SparkPath.fromUrlString(file.uri), 0L, file.size, new String[0], file.mtimeMs,
          file.size, scala.collection.immutable.Map$.MODULE$.empty());
      if (joinsConstants) {
        joined.withRight(plan.constants(file));
      }
      // Spark builds a file's reader with TaskContext.createResourceUninterruptibly, which
      // keeps the reader for a listener that closes it when the task ends: a task reading a
      // slice of 100 files held 100 closed readers (each with its copy of the Hadoop
      // configuration, its footer), ~100 MB of live heap mid-slice at 7 days. This reader
      // closes each file itself when it is done with it (closeFile) and when Spark closes
      // the partition reader at the task's end, failed or not (close), so the file's
      // reader is built outside the task's context and nothing keeps it.
      TaskContext task = TaskContext.get();
      if (task != null) {
        TaskContext$.MODULE$.unset();
      }
      try {
        if (plan.columnar) {
          batches = parquet.buildColumnarReader(split);
        } else {
          rows = parquet.buildReader(split);
        }
      } finally {
        if (task != null) {
          TaskContext$.MODULE$.setTaskContext(task);
        }
      }
      return true;
    }

    private InternalRow nextRead() throws IOException {
      if (rows != null) {
        return rows.next() ? rows.get() : null;
      }
      while (batch == null || index >= batch.numRows()) {
        if (!batches.next()) {
          return null;
        }
        batch = batches.get();
        index = 0;
      }
      return batch.getRow(index++);
    }

    @Override
    public boolean next() throws IOException {
      while (true) {
        if (file == null && !openNext()) {
          return false;
        }
        InternalRow row = nextRead();
        if (row == null) {
          checkUnplaceable();
          file = null;
          continue;
        }
        int ts = plan.eventTimeIndex;
        if (row.isNullAt(ts)) {
          if (file.owner) {
            nullTimes++;
          }
          continue;
        }
        long micros = row.getLong(ts);
        if (micros >= lo && micros < hi) {
          if (counts != null) {
            counts.add(micros);
          }
          current = projection.apply(joinsConstants ? joined.withLeft(row) : row);
          return true;
        }
        if (file.owner && (micros < file.admissibleLo || micros >= file.admissibleHi)
            && micros >= part.origin && micros < part.end) {
          if (unplaceable == 0) {
            firstOutside = micros;
          }
          unplaceable++;
        }
      }
    }

    private void checkUnplaceable() {
      if (unplaceable + nullTimes == 0) {
        return;
      }
      StringBuilder reasons = new StringBuilder();
      if (nullTimes > 0) {
        reasons.append("event time is null");
      }
      if (unplaceable > 0) {
        if (reasons.length() > 0) {
          reasons.append("; ");
        }
        reasons.append("event time ").append(iso(firstOutside))
            .append(" is outside the range its partition admits [")
            .append(iso(file.admissibleLo)).append(", ").append(iso(file.admissibleHi)).append(")");
      }
      throw new IllegalStateException(DATA_ERROR + "table '" + plan.table + "': "
          + (unplaceable + nullTimes) + " rows of file '" + file.path + "' cannot be placed in any"
          + " event-time slice (" + reasons + "). " + plan.advice);
    }

    @Override
    public InternalRow get() {
      return current;
    }

    private void closeFile() throws IOException {
      if (batches != null) {
        batches.close();
        batches = null;
      }
      if (rows != null) {
        rows.close();
        rows = null;
      }
      batch = null;
      index = 0;
    }

    /** Closed when the task completes, before Spark collects its accumulator updates: the
     * task's counts are added once, and only a successful task's reach the driver. */
    @Override
    public void close() throws IOException {
      if (counts != null && !counts.isEmpty()) {
        delivered.add(counts.encode());
      }
      counts = null;
      closeFile();
    }
  }
}
