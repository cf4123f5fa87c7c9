"""Where a lake table's files live: the pyarrow filesystem of a location, so local disks,
HDFS and object stores are read alike by every format's Python reader."""

from __future__ import annotations

import pyarrow.fs as pafs


def filesystem_for(location: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem and root path for a table location as Spark's catalog gives it."""
    uri = location
    if uri.startswith("file:") and not uri.startswith("file://"):
        uri = "file://" + uri[len("file:") :]
    if "://" not in uri:
        return pafs.LocalFileSystem(), uri.rstrip("/")
    fs, path = pafs.FileSystem.from_uri(uri)
    return fs, path.rstrip("/")
