package org.kappaplus.hive;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;

/** One file of a slice, as the planner's manifest names it. */
final class SliceFile implements Serializable {
  private static final long serialVersionUID = 1L;

  final String uri;
  final String path;
  final long size;
  final long mtimeMs;
  final boolean owner;
  final long admissibleLo;
  final long admissibleHi;
  /** Partition column values (JSON scalars), in the order of the plan's partition columns. */
  final List<Object> partitionValues;

  private SliceFile(String uri, String path, long size, long mtimeMs, boolean owner,
      long admissibleLo, long admissibleHi, List<Object> partitionValues) {
    this.uri = uri;
    this.path = path;
    this.size = size;
    this.mtimeMs = mtimeMs;
    this.owner = owner;
    this.admissibleLo = admissibleLo;
    this.admissibleHi = admissibleHi;
    this.partitionValues = partitionValues;
  }

  static SliceFile fromJson(JsonNode f) {
    List<Object> values = new ArrayList<>();
    for (JsonNode v : f.path("partitionValues")) {
      if (v.isNull()) {
        values.add(null);
      } else if (v.isBoolean()) {
        values.add(v.asBoolean());
      } else if (v.isIntegralNumber()) {
        values.add(v.asLong());
      } else if (v.isNumber()) {
        values.add(v.asDouble());
      } else {
        values.add(v.asText());
      }
    }
    return new SliceFile(f.path("uri").asText(), f.path("path").asText(), f.path("size").asLong(),
        f.path("mtimeMs").asLong(), f.path("owner").asBoolean(), f.path("admissibleLo").asLong(),
        f.path("admissibleHi").asLong(), values);
  }
}
