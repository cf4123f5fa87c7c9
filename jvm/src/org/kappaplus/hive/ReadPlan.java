package org.kappaplus.hive;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.BoundReference;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.Literal$;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.types.BooleanType$;
import org.apache.spark.sql.types.ByteType$;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType$;
import org.apache.spark.sql.types.FloatType$;
import org.apache.spark.sql.types.IntegerType$;
import org.apache.spark.sql.types.DateType$;
import org.apache.spark.sql.types.ShortType$;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import scala.jdk.javaapi.CollectionConverters;

/**
 * How a slice's rows become the source's output rows: which columns are read from the files,
 * which come from the file's partition values, where the marker flag goes.
 *
 * <p>An output row is projected from the row the Parquet reader gives (the read columns),
 * joined with a row of constants per file (its partition values) when the output has
 * partition columns; the marker flag is a literal of the projection.
 */
final class ReadPlan implements Serializable {
  private static final long serialVersionUID = 1L;

  final String table;
  final String eventTimeColumn;
  final StructType outputSchema;
  final StructType readSchema;
  final int eventTimeIndex;
  final List<String> partitionColumns;
  final DataType[] partitionTypes;
  final String advice;
  final boolean columnar;

  ReadPlan(Map<String, String> options, StructType outputSchema, StructType readSchema,
      boolean columnar) {
    this.table = options.getOrDefault("table", options.get("location"));
    this.eventTimeColumn = options.get("eventTimeColumn");
    this.outputSchema = outputSchema;
    this.readSchema = readSchema;
    this.eventTimeIndex = readSchema.fieldIndex(eventTimeColumn);
    Set<String> declared = new HashSet<>(Arrays.asList(outputSchema.fieldNames()));
    this.partitionColumns = new ArrayList<>();
    for (String c : options.getOrDefault("partitionColumns", "").split(",")) {
      if (!c.isBlank() && declared.contains(c.trim())) {
        partitionColumns.add(c.trim());
      }
    }
    this.partitionTypes = partitionColumns.stream()
        .map(c -> outputSchema.apply(c).dataType()).toArray(DataType[]::new);
    this.advice = options.getOrDefault("unplaceableAdvice", "");
    this.columnar = columnar;
  }

  /** Whether output rows take values from a file's constants row (its partition values):
   * the projection then reads (read row ++ constants row), else the read row alone. */
  boolean joinsConstants() {
    return !partitionColumns.isEmpty();
  }

  /** The projection to the output row from the read row, joined with the constants row when
   * {@link #joinsConstants}; the end-of-input marker flag is the constant {@code marker}
   * (a literal: no per-row read of a boxed flag through the joined row). */
  UnsafeProjection projection(boolean marker) {
    int read = readSchema.size();
    List<Expression> columns = new ArrayList<>();
    for (StructField f : outputSchema.fields()) {
      if (readSchema.getFieldIndex(f.name()).isDefined()) {
        columns.add(new BoundReference(readSchema.fieldIndex(f.name()), f.dataType(), true));
      } else if (partitionColumns.contains(f.name())) {
        int ordinal = read + partitionColumns.indexOf(f.name());
        columns.add(new BoundReference(ordinal, f.dataType(), true));
      } else {
        columns.add(Literal$.MODULE$.create(marker, BooleanType$.MODULE$)); // the marker flag
      }
    }
    return UnsafeProjection.create(CollectionConverters.asScala(columns).toList());
  }

  /** The constants of one file's rows: its partition values (all null for the marker). */
  GenericInternalRow constants(SliceFile file) {
    Object[] values = new Object[partitionColumns.size()];
    for (int i = 0; i < partitionColumns.size(); i++) {
      Object v = file == null ? null : file.partitionValues.get(i);
      values[i] = v == null ? null : internal(v, partitionTypes[i]);
    }
    return new GenericInternalRow(values);
  }

  /** The one-row end-of-input marker: every column null but the event time. */
  InternalRow markerRow(long micros) {
    Object[] values = new Object[readSchema.size()];
    values[eventTimeIndex] = micros;
    return new GenericInternalRow(values);
  }

  /** A partition value as the planner sent it (already checked and converted) in Spark's
   * internal form: strings as UTF8String, dates as days, timestamps as microseconds. */
  private static Object internal(Object v, DataType type) {
    if (type instanceof StringType) {
      return UTF8String.fromString(v.toString());
    } else if (type instanceof DecimalType) {
      return Decimal.apply(new java.math.BigDecimal(v.toString()));
    } else if (type == IntegerType$.MODULE$ || type == DateType$.MODULE$) {
      return ((Number) v).intValue();
    } else if (type == ShortType$.MODULE$) {
      return ((Number) v).shortValue();
    } else if (type == ByteType$.MODULE$) {
      return ((Number) v).byteValue();
    } else if (type == DoubleType$.MODULE$) {
      return ((Number) v).doubleValue();
    } else if (type == FloatType$.MODULE$) {
      return ((Number) v).floatValue();
    } else if (type == BooleanType$.MODULE$) {
      return v;
    }
    return ((Number) v).longValue(); // bigint, timestamps
  }
}
