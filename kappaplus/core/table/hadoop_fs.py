"""A table's storage through Hadoop's FileSystem in the driver JVM (any scheme Spark reads:
file, hdfs, s3a, ...): the few operations the exactly-once writers need, rename and
create-if-absent included."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from kappaplus.core.errors import TableError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class HadoopFs:
    """The few Hadoop FileSystem calls the protocol needs (works on HDFS and local)."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        context: Any = spark.sparkContext
        self._jvm: Any = context._jvm
        conf = context._jsc.hadoopConfiguration()
        self._path_cls = self._jvm.org.apache.hadoop.fs.Path
        self.fs = self._path_cls(root).getFileSystem(conf)

    def path(self, location: str) -> Any:
        return self._path_cls(location)

    def exists(self, location: str) -> bool:
        return bool(self.fs.exists(self.path(location)))

    def mkdirs(self, location: str) -> None:
        self.fs.mkdirs(self.path(location))

    def delete(self, location: str) -> None:
        self.fs.delete(self.path(location), True)

    def rename(self, src: str, dst: str) -> None:
        if not self.fs.rename(self.path(src), self.path(dst)):
            raise TableError(f"cannot rename {src} to {dst}")

    def list_dirs(self, location: str) -> list[str]:
        if not self.exists(location):
            return []
        return sorted(
            status.getPath().getName()
            for status in self.fs.listStatus(self.path(location))
            if status.isDirectory()
        )

    def list_files(self, location: str) -> list[str]:
        return sorted(
            status.getPath().getName()
            for status in self.fs.listStatus(self.path(location))
            if status.isFile()
        )

    def write_atomically(self, location: str, text: str) -> None:
        parent, name = location.rsplit("/", 1)
        tmp = f"{parent}/.{name}.{time.time_ns()}.tmp"
        self.write_text(tmp, text)
        if self.exists(location):  # a previous attempt got there first; same content
            self.delete(tmp)
            return
        self.rename(tmp, location)

    def create_new(self, location: str) -> bool:
        """Create an empty file; False if it exists already (atomic on HDFS)."""
        return bool(self.fs.createNewFile(self.path(location)))

    def write_text(self, location: str, text: str) -> None:
        out = self.fs.create(self.path(location), True)
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()

    def read_text(self, location: str) -> str:
        stream = self.fs.open(self.path(location))
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()
