"""The local file system a local session uses (``org.kappaplus.fs``) behaves as Hadoop's.

Hadoop's own runs ``chmod`` and ``readlink`` processes for each file (no native library in
pyspark); the project's does both through ``java.nio`` (``kappaplus.session.
SPAWN_FREE_LOCAL_FS``). What it writes must be what Hadoop's would: the same modes on files,
checksum files and directories, the same errors, symbolic links as Hadoop reports them.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from kappaplus.jars import jvm_jar

# Without javac there is no jar and local sessions keep Hadoop's file system; in CI set-up
# installs the JDK, so a missing jar fails these tests there (as the JVM reader's do).
pytestmark = pytest.mark.skipif(
    jvm_jar() is None and not os.environ.get("CI"),
    reason="the project's jar is not built (no javac)",
)


def _jvm(spark: Any) -> Any:
    return spark._jvm


def _hadoop_fs(spark: Any, ours: bool) -> Any:
    """A fresh checksummed local file system: the project's or Hadoop's own."""
    jvm = _jvm(spark)
    conf = spark._jsc.hadoopConfiguration()
    if ours:
        fs = jvm.org.kappaplus.fs.SpawnFreeLocalFileSystem()
    else:
        fs = jvm.org.apache.hadoop.fs.LocalFileSystem()
    fs.initialize(jvm.java.net.URI("file:///"), conf)
    return fs


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_the_session_opens_local_paths_with_the_spawn_free_file_system(spark: Any) -> None:
    jvm = _jvm(spark)
    conf = spark._jsc.hadoopConfiguration()
    fs = jvm.org.apache.hadoop.fs.FileSystem.getLocal(conf)
    assert fs.getClass().getName() == "org.kappaplus.fs.SpawnFreeLocalFileSystem"
    assert fs.getRaw().getClass().getName() == "org.kappaplus.fs.SpawnFreeRawLocalFileSystem"
    context = jvm.org.apache.hadoop.fs.FileContext.getLocalFSFileContext(conf)
    default = context.getDefaultFileSystem()  # Spark's checkpoint files go through it
    assert default.getClass().getName() == "org.kappaplus.fs.SpawnFreeLocalFs"


@pytest.mark.parametrize("mode", [0o644, 0o600, 0o750, 0o705, 0o070])
def test_files_and_directories_get_the_modes_hadoops_own_gives(
    spark: Any, tmp_path: Path, mode: int
) -> None:
    jvm = _jvm(spark)
    permission = jvm.org.apache.hadoop.fs.permission.FsPermission(mode)
    modes = {}
    for ours in (True, False):
        fs = _hadoop_fs(spark, ours)
        root = tmp_path / ("ours" if ours else "hadoop")
        directory = jvm.org.apache.hadoop.fs.Path(str(root / "d" / "e"))
        assert fs.mkdirs(directory, permission)
        data = jvm.org.apache.hadoop.fs.Path(str(root / "f"))
        out = fs.create(data, permission, True, 4096, 1, 1 << 20, None)
        out.write(bytearray(b"x" * 10))
        out.close()
        fs.setPermission(data, permission)
        modes[ours] = [_mode(root / "d" / "e"), _mode(root / "f"), _mode(root / ".f.crc")]
    assert modes[True] == modes[False]
    assert modes[True][1] == mode  # setPermission is not masked


def test_checkpoint_writes_through_file_context_land_with_their_checksums(
    spark: Any, tmp_path: Path
) -> None:
    jvm = _jvm(spark)
    hadoop = jvm.org.apache.hadoop.fs
    context = hadoop.FileContext.getLocalFSFileContext(spark._jsc.hadoopConfiguration())
    flags = jvm.java.util.EnumSet.of(hadoop.CreateFlag.CREATE, hadoop.CreateFlag.OVERWRITE)
    gateway = spark.sparkContext._gateway
    no_options = gateway.new_array(hadoop.Options.CreateOpts, 0)
    overwrite = gateway.new_array(hadoop.Options.Rename, 1)
    overwrite[0] = hadoop.Options.Rename.OVERWRITE
    written = []
    for n in range(5):  # as Spark writes an offset or commit file: a temporary, renamed
        temp, final = hadoop.Path(str(tmp_path / f".{n}.tmp")), hadoop.Path(str(tmp_path / str(n)))
        out = context.create(temp, flags, no_options)
        out.write(bytearray(f"v1\n{n}".encode()))
        out.close()
        context.rename(temp, final, overwrite)
        written.append(n)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted([*map(str, written), *(f".{n}.crc" for n in written)])
    assert [(tmp_path / str(n)).read_text() for n in written] == [f"v1\n{n}" for n in written]


def test_a_missing_path_and_a_symbolic_link_read_as_hadoop_reports_them(
    spark: Any, tmp_path: Path
) -> None:
    jvm = _jvm(spark)
    hadoop = jvm.org.apache.hadoop.fs
    target = tmp_path / "target"
    target.write_text("x")
    (tmp_path / "link").symlink_to(target)
    for ours in (True, False):
        fs = _hadoop_fs(spark, ours)
        raw = fs.getRaw()
        # both an IOException naming the path (Hadoop's: chmod's exit code; the project's:
        # FileNotFoundException)
        with pytest.raises(Exception, match="(FileNotFoundException|ExitCodeException).*gone"):
            raw.setPermission(
                hadoop.Path(str(tmp_path / "gone")), hadoop.permission.FsPermission(0o644)
            )
        with pytest.raises(Exception, match="FileNotFoundException"):
            raw.getFileLinkStatus(hadoop.Path(str(tmp_path / "gone")))
        link = raw.getFileLinkStatus(hadoop.Path(str(tmp_path / "link")))
        assert link.isSymlink() and link.getSymlink().toUri().getPath() == str(target)
        plain = raw.getFileLinkStatus(hadoop.Path(str(target)))
        assert not plain.isSymlink() and plain.getLen() == 1 and plain.isFile()


def test_a_sticky_directory_keeps_its_sticky_bit(spark: Any, tmp_path: Path) -> None:
    jvm = _jvm(spark)
    fs = _hadoop_fs(spark, True)
    directory = tmp_path / "shared"
    directory.mkdir()
    fs.setPermission(
        jvm.org.apache.hadoop.fs.Path(str(directory)),
        jvm.org.apache.hadoop.fs.permission.FsPermission(0o1777),
    )
    assert _mode(directory) == 0o1777
