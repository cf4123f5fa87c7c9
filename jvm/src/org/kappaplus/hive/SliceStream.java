package org.kappaplus.hive;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.hadoop.conf.Configuration;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.ReportsSourceMetrics;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.execution.datasources.parquet.ParquetOptions;
import org.apache.spark.sql.execution.datasources.parquet.ParquetReadSupport;
import org.apache.spark.sql.execution.datasources.parquet.ParquetWriteSupport;
import org.apache.spark.sql.execution.datasources.v2.parquet.ParquetPartitionReaderFactory;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.CollectionAccumulator;
import org.apache.spark.util.SerializableConfiguration;
import scala.Option;
import scala.reflect.ClassTag$;

/**
 * The micro-batch stream: offsets, admission control and available-now come from the Python
 * slice planner; each slice is read here, its files spread over one input partition per core.
 */
final class SliceStream
    implements MicroBatchStream, SupportsTriggerAvailableNow, ReportsSourceMetrics {
  /** The audit metric the delivered rows are counted under (``kappa_audit.lake.<input>``);
   * absent: not counted here. */
  static final String AUDIT_METRIC = "auditMetric";
  /** The counts' name within the metric (``delivered``). */
  static final String AUDIT_IO = "auditIo";
  /** The audit bucket, in seconds. */
  static final String AUDIT_BUCKET_SECONDS = "auditBucketSeconds";

  private final StructType outputSchema;
  private final Map<String, String> options;
  private PlannerProcess planner;
  private CollectionAccumulator<String> delivered;

  SliceStream(StructType outputSchema, Map<String, String> options) {
    this.outputSchema = outputSchema;
    this.options = new HashMap<>(options);
  }

  private synchronized PlannerProcess planner() {
    if (planner == null) {
      String python = options.getOrDefault("pythonExec", "python3");
      planner = new PlannerProcess(python, options);
    }
    return planner;
  }

  /**
   * One planner call. A failed call fails the query, and Spark stops only the sources it has
   * finished setting up: a failure while it plans the query (in
   * {@code prepareForTriggerAvailableNow}) would leave the planner connection (or process)
   * open for the life of the driver, so it is closed here before the error goes on.
   */
  private JsonNode call(String method, ObjectNode request) {
    try {
      return planner().call(method, request);
    } catch (RuntimeException e) {
      stop();
      throw e;
    }
  }

  private static ObjectNode args() {
    return PlannerProcess.JSON.createObjectNode();
  }

  /** Offsets travel as the planner's own JSON text: Spark compares offsets by their text. */
  private static Offset offset(JsonNode json) {
    return new SliceOffset(json.asText());
  }

  @Override
  public Offset initialOffset() {
    return offset(call("initialOffset", null));
  }

  @Override
  public Offset deserializeOffset(String json) {
    return new SliceOffset(json);
  }

  @Override
  public ReadLimit getDefaultReadLimit() {
    JsonNode rows = call("defaultReadLimit", null);
    return rows == null || rows.isNull() ? ReadLimit.allAvailable() : ReadLimit.maxRows(rows.asLong());
  }

  @Override
  public Offset latestOffset() {
    throw new UnsupportedOperationException("kappa_hive_jvm plans with a read limit");
  }

  @Override
  public Offset latestOffset(Offset start, ReadLimit limit) {
    ObjectNode request = args();
    request.put("start", start.json());
    if (limit instanceof ReadMaxRows) {
      request.put("maxRows", ((ReadMaxRows) limit).maxRows());
    }
    return offset(call("latestOffset", request));
  }

  @Override
  public Offset reportLatestOffset() {
    JsonNode latest = call("reportLatestOffset", null);
    return latest == null || latest.isNull() ? null : offset(latest);
  }

  @Override
  public void prepareForTriggerAvailableNow() {
    call("prepareForTriggerAvailableNow", null);
  }


  @Override
  public InputPartition[] planInputPartitions(Offset start, Offset end) {
    ObjectNode request = args();
    request.put("start", start.json());
    request.put("end", end.json());
    JsonNode plan = call("partitions", request);
    List<InputPartition> parts = new ArrayList<>();
    long lo = plan.path("lo").asLong();
    long hi = plan.path("hi").asLong();
    long origin = plan.path("origin").asLong();
    long endBound = plan.path("end").asLong();
    List<SliceFile> files = new ArrayList<>();
    for (JsonNode f : plan.path("files")) {
      files.add(SliceFile.fromJson(f));
    }
    if (!files.isEmpty()) {
      int cores = Math.max(1, SparkSession.active().sparkContext().defaultParallelism());
      int n = Math.min(files.size(), cores);
      List<List<SliceFile>> bins = new ArrayList<>();
      long[] weight = new long[n];
      for (int i = 0; i < n; i++) {
        bins.add(new ArrayList<>());
      }
      files.sort(Comparator.comparingLong((SliceFile f) -> f.size).reversed());
      for (SliceFile f : files) {
        int lightest = 0;
        for (int i = 1; i < n; i++) {
          if (weight[i] < weight[lightest]) {
            lightest = i;
          }
        }
        bins.get(lightest).add(f);
        weight[lightest] += f.size;
      }
      for (List<SliceFile> bin : bins) {
        bin.sort(Comparator.comparing((SliceFile f) -> f.uri));
        parts.add(new SliceInputPartition(lo, hi, origin, endBound, null, bin));
      }
    }
    for (JsonNode marker : plan.path("markers")) {
      parts.add(new SliceInputPartition(lo, hi, origin, endBound, marker.asLong(), List.of()));
    }
    return parts.toArray(new InputPartition[0]);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    SparkSession spark = SparkSession.active();
    StructType readSchema = (StructType) DataType.fromJson(options.get("readSchema"));
    Configuration hadoop = spark.sessionState().newHadoopConf();
    String readJson = readSchema.json();
    hadoop.set("parquet.read.support.class", ParquetReadSupport.class.getName());
    hadoop.set(ParquetReadSupport.SPARK_ROW_REQUESTED_SCHEMA(), readJson);
    hadoop.set(ParquetWriteSupport.SPARK_ROW_SCHEMA(), readJson);
    SQLConf conf = spark.sessionState().conf();
    hadoop.set(SQLConf.SESSION_LOCAL_TIMEZONE().key(), conf.sessionLocalTimeZone());
    hadoop.setBoolean(SQLConf.NESTED_SCHEMA_PRUNING_ENABLED().key(), conf.nestedSchemaPruningEnabled());
    hadoop.setBoolean(SQLConf.CASE_SENSITIVE().key(), conf.caseSensitiveAnalysis());
    ParquetWriteSupport.setSchema(readSchema, hadoop);
    // what Spark's Parquet schema converter reads from the Hadoop conf, as the session has it
    for (org.apache.spark.internal.config.ConfigEntry<?> entry : java.util.List.of(
        SQLConf.PARQUET_BINARY_AS_STRING(), SQLConf.PARQUET_INT96_AS_TIMESTAMP(),
        SQLConf.PARQUET_INFER_TIMESTAMP_NTZ_ENABLED(), SQLConf.LEGACY_PARQUET_NANOS_AS_LONG(),
        SQLConf.TIMESTAMP_NANOS_TYPES_ENABLED(), SQLConf.PARQUET_FIELD_ID_READ_ENABLED(),
        SQLConf.PARQUET_IGNORE_VARIANT_ANNOTATION(),
        SQLConf.PARQUET_READER_RESPECT_UNKNOWN_TYPE_ANNOTATION())) {
      hadoop.set(entry.key(), conf.getConfString(entry.key(), entry.defaultValueString()));
    }
    // Iceberg tables: columns matched by the Parquet field ids the read schema carries in its
    // fields' metadata (parquet.field.id), as Iceberg does, so renamed columns read right
    if ("true".equals(options.get("parquetFieldIds"))) {
      hadoop.setBoolean(SQLConf.PARQUET_FIELD_ID_READ_ENABLED().key(), true);
      hadoop.setBoolean(SQLConf.IGNORE_MISSING_PARQUET_FIELD_ID().key(), false);
      conf = conf.clone();
      conf.setConfString(SQLConf.PARQUET_FIELD_ID_READ_ENABLED().key(), "true");
      conf.setConfString(SQLConf.IGNORE_MISSING_PARQUET_FIELD_ID().key(), "false");
    }
    Broadcast<SerializableConfiguration> broadcast = spark.sparkContext().broadcast(
        new SerializableConfiguration(hadoop),
        ClassTag$.MODULE$.apply(SerializableConfiguration.class));
    scala.collection.immutable.Map<String, String> none = scala.collection.immutable.Map$.MODULE$.empty();
    ParquetPartitionReaderFactory parquet = ParquetPartitionReaderFactory.apply(
        conf, broadcast, readSchema, readSchema, new StructType(), new Filter[0], Option.empty(),
        new ParquetOptions(none, conf));
    boolean columnar = conf.parquetVectorizedReaderEnabled()
        && org.apache.spark.sql.execution.datasources.parquet.ParquetUtils.isBatchReadSupportedForSchema(conf, readSchema);
    return new SliceReaderFactory(parquet, new ReadPlan(options, outputSchema, readSchema, columnar),
        broadcast, deliveredAccumulator(spark), Long.parseLong(options.getOrDefault(
            AUDIT_BUCKET_SECONDS, "600")));
  }

  /** The accumulator the readers add their delivered rows per bucket to, registered once on
   * the driver; null when the options ask for no counts. */
  private synchronized CollectionAccumulator<String> deliveredAccumulator(SparkSession spark) {
    if (delivered == null && options.get(AUDIT_METRIC) != null) {
      delivered = new CollectionAccumulator<>();
      spark.sparkContext().register(delivered);
    }
    return delivered;
  }

  /**
   * The rows the readers delivered since the last call, per audit bucket, as
   * ``{"<auditMetric>": "{\"<auditIo>\": [[bucket, rows], ...]}"}``. Spark asks once per
   * micro-batch, after its tasks: the counts of that batch's successful tasks (a task that
   * failed and ran again is counted once). Nothing when not counting.
   */
  @Override
  public synchronized Map<String, String> metrics(Optional<Offset> latestConsumedOffset) {
    String metric = options.get(AUDIT_METRIC);
    if (metric == null) {
      return Map.of();
    }
    Map<Long, Long> sums = new TreeMap<>();
    if (delivered != null) {
      List<String> lines = delivered.value();
      delivered.reset();
      for (String line : lines) {
        BucketCounts.sumInto(line, sums);
      }
    }
    ObjectNode value = args();
    com.fasterxml.jackson.databind.node.ArrayNode pairs =
        value.putArray(options.getOrDefault(AUDIT_IO, "delivered"));
    for (Map.Entry<Long, Long> e : sums.entrySet()) {
      pairs.addArray().add(e.getKey()).add(e.getValue());
    }
    return Map.of(metric, value.toString());
  }

  @Override
  public void commit(Offset end) {
    ObjectNode request = args();
    request.put("end", end.json());
    call("commit", request);
  }

  @Override
  public synchronized void stop() {
    if (planner != null) {
      planner.close();
      planner = null;
    }
  }

  @Override
  public String toString() {
    return "kappa_hive_jvm[" + options.getOrDefault("table", options.get("location")) + "]";
  }

  /** An offset as the planner wrote it (the same JSON as the Python source's offsets). */
  static final class SliceOffset extends Offset {
    private final String json;

    SliceOffset(String json) {
      this.json = json;
    }

    @Override
    public String json() {
      return json;
    }
  }
}
