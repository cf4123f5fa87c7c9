"""``kappa table register --iceberg``: an Iceberg table another engine wrote, named in a
catalog a backfill reads (the embedded SQL one by default), by its metadata file.

An Iceberg table is its metadata file: registering records that file under a name
(pyiceberg's ``register_table``), no data file is read or copied. ``--location`` is the
metadata file itself or the table's directory (its newest ``metadata/*.metadata.json``).

>>> newest_metadata(["m/00001-a.metadata.json", "m/00003-c.metadata.json",
...                  "m/00002-b.metadata.json", "m/version-hint.text"])
'm/00003-c.metadata.json'
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kappaplus.core.errors import ConfigError, TableError

_VERSION = re.compile(r"(?:^|/)(?:v)?(\d+)(?:-[^/]*)?\.metadata\.json$")


@dataclass(frozen=True)
class RegisteredIceberg:
    """What :func:`register_iceberg` did."""

    table: str
    metadata_location: str
    snapshot_id: int | None
    replaced: bool


def newest_metadata(paths: Iterable[str]) -> str | None:
    """The metadata file with the highest version among ``paths`` (``00003-<uuid>`` or
    ``v3`` names), None if there is none."""
    found = [(int(m.group(1)), p) for p in paths if (m := _VERSION.search(p))]
    return max(found)[1] if found else None


def metadata_location(location: str, io_properties: dict[str, str]) -> str:
    """``location`` when it is a metadata file, else the newest one under its
    ``metadata/`` directory; a :class:`ConfigError` naming ``--location`` otherwise."""
    import pyarrow.fs as pafs

    if location.endswith(".metadata.json"):
        return location
    from pyiceberg.io.pyarrow import PyArrowFileIO

    root = location.rstrip("/")
    scheme, netloc, path = PyArrowFileIO.parse_location(root)
    fs = PyArrowFileIO(io_properties)._initialize_fs(scheme, netloc or None)  # its own FS
    try:
        infos = fs.get_file_info(pafs.FileSelector(f"{path}/metadata", allow_not_found=True))
    except OSError as exc:
        raise ConfigError("--location", location, f"cannot list its metadata/: {exc}") from None
    newest = newest_metadata(i.path for i in infos if i.type == pafs.FileType.File)
    if newest is None:
        raise ConfigError(
            "--location",
            location,
            "holds no metadata/*.metadata.json: give the table's directory or its metadata file",
        )
    return f"{scheme}://{newest}" if "://" in root else newest


def register_iceberg(
    name: str,
    location: str,
    properties: dict[str, str] | None = None,
    *,
    replace: bool = False,
) -> RegisteredIceberg:
    """Register the Iceberg table at ``location`` as ``name`` (``namespace.table``) in the
    catalog of ``properties`` (default: the embedded SQL catalog); ``replace`` points an
    existing name at it (the old table's files are kept)."""
    from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError

    from kappaplus.connectors.iceberg.catalog import default_catalog, load_catalog

    props = dict(properties or default_catalog())
    if "." not in name:
        raise ConfigError("NAME", name, "expected namespace.table, e.g. lake.rides")
    namespace, table = name.rsplit(".", 1)
    catalog = load_catalog(props)
    metadata = metadata_location(location, props)
    replaced = False
    try:
        catalog.create_namespace_if_not_exists(namespace)
        if replace:
            try:
                catalog.drop_table((namespace, table))  # the catalog entry only, no files
                replaced = True
            except NoSuchTableError:
                pass
        registered: Any = catalog.register_table((namespace, table), metadata)
    except TableAlreadyExistsError:
        raise TableError(
            f"Iceberg table {name!r} already exists in the catalog at {props.get('uri')!r}: "
            "pass --replace to point it at this metadata file, or choose another name"
        ) from None
    except (FileNotFoundError, OSError) as exc:
        raise ConfigError("--location", metadata, f"cannot be read: {exc}") from None
    snapshot = registered.current_snapshot()
    return RegisteredIceberg(
        name, metadata, snapshot.snapshot_id if snapshot is not None else None, replaced
    )
