package org.kappaplus.fs;

import org.apache.hadoop.fs.LocalFileSystem;

/**
 * {@code fs.file.impl}: Hadoop's checksummed local file system over {@link
 * SpawnFreeRawLocalFileSystem}.
 */
public class SpawnFreeLocalFileSystem extends LocalFileSystem {
  public SpawnFreeLocalFileSystem() {
    super(new SpawnFreeRawLocalFileSystem());
  }
}
