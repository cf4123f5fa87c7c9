package org.kappaplus.hive;

import java.util.Collections;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code kappa_hive_jvm}: the Kappa+ Hive streaming source with its read path in the JVM.
 *
 * <p>The event-time slices are planned by the same Python planner as the Python data source
 * {@code kappa_hive} (a long-lived planner process, see {@link PlannerProcess}), so offsets,
 * slice manifests and end-of-input markers are identical; only the reading of a slice's
 * Parquet files runs here, through Spark's own vectorized Parquet reader. The Python runtime
 * passes the options (those of {@code kappa_hive} plus {@code outputSchema},
 * {@code readSchema} and {@code pythonExec}).
 */
public final class KappaHiveSource implements TableProvider, DataSourceRegister {

  @Override
  public String shortName() {
    return "kappa_hive_jvm";
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return outputSchema(options);
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true;
  }

  static StructType outputSchema(Map<String, String> options) {
    String json = options.get("outputSchema");
    if (json == null) {
      throw new IllegalArgumentException("kappa_hive_jvm: option 'outputSchema' is required");
    }
    return (StructType) DataType.fromJson(json);
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> props) {
    return new HiveTable(schema);
  }

  private static final class HiveTable implements Table, SupportsRead {
    private final StructType schema;

    HiveTable(StructType schema) {
      this.schema = schema;
    }

    @Override
    public String name() {
      return "kappa_hive_jvm";
    }

    @Override
    public StructType schema() {
      return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return Collections.singleton(TableCapability.MICRO_BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return () -> new HiveScan(schema, options);
    }
  }

  private static final class HiveScan implements Scan {
    private final StructType schema;
    private final CaseInsensitiveStringMap options;

    HiveScan(StructType schema, CaseInsensitiveStringMap options) {
      this.schema = schema;
      this.options = options;
    }

    @Override
    public StructType readSchema() {
      return schema;
    }

    @Override
    public String description() {
      return "kappa_hive_jvm[" + options.get("table") + "]";
    }

    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
      return new SliceStream(schema, options.asCaseSensitiveMap());
    }
  }
}
