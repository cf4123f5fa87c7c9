package org.kappaplus.fs;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system without a process per file.
 *
 * <p>Without Hadoop's native library (pyspark ships none) {@link RawLocalFileSystem} runs
 * {@code chmod} for every file and directory it creates with a permission, and
 * {@code readlink} for every {@code getFileLinkStatus} (which {@code FileContext.rename}
 * asks): three to four processes for each checkpoint file Spark writes atomically, about
 * 25 ms of the micro-batch's thread on two cores. This class does both through
 * {@code java.nio} and leaves everything else, and any symbolic link or special mode bit,
 * to Hadoop's own code.
 */
public class SpawnFreeRawLocalFileSystem extends RawLocalFileSystem {

  private static final PosixFilePermission[] BITS = {
    PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE,
    PosixFilePermission.OTHERS_READ, PosixFilePermission.GROUP_EXECUTE,
    PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
    PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE,
    PosixFilePermission.OWNER_READ,
  };

  static Set<PosixFilePermission> posix(short mode) {
    Set<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
    for (int bit = 0; bit < BITS.length; bit++) {
      if ((mode & (1 << bit)) != 0) {
        set.add(BITS[bit]);
      }
    }
    return set;
  }

  @Override
  public void setPermission(Path p, FsPermission permission) throws IOException {
    short mode = permission.toShort();
    if ((mode & 07000) != 0) { // sticky, setuid, setgid: java.nio cannot set them
      super.setPermission(p, permission);
      return;
    }
    java.nio.file.Path path = pathToFile(p).toPath();
    try {
      Files.setPosixFilePermissions(path, posix(mode));
    } catch (NoSuchFileException e) {
      throw new FileNotFoundException("File " + p + " does not exist");
    } catch (UnsupportedOperationException e) { // not a POSIX file system
      super.setPermission(p, permission);
    }
  }

  @Override
  public FileStatus getFileLinkStatus(Path f) throws IOException {
    if (Files.isSymbolicLink(pathToFile(f).toPath())) {
      return super.getFileLinkStatus(f);
    }
    return getFileStatus(f); // what Hadoop returns for anything but a link
  }
}
