"""Delta table names: ``kappa table register --delta NAME --location PATH`` records NAME ->
PATH in the state directory (``$KAPPA_HOME/delta/tables.json``), so a job configuration or
``kappa table describe --delta`` may name the table instead of spelling its location.
delta-rs has no catalog client; this map is the catalog of the state directory."""

from __future__ import annotations

import json
import re
from pathlib import Path

from kappaplus.core.errors import ConfigError, TableNameTaken
from kappaplus.core.settings import state_dir
from kappaplus.core.temp_names import temporary_name

NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
"""A registered name: ``db.table`` (dotted, like a Hive or Iceberg table name)."""


def _registry(home: Path | None = None) -> Path:
    return (home or state_dir()) / "delta" / "tables.json"


def registered_tables(home: Path | None = None) -> dict[str, str]:
    """Every registered name and its location."""
    path = _registry(home)
    return json.loads(path.read_text()) if path.exists() else {}


def register_delta_name(
    name: str, location: str, *, replace: bool = False, home: Path | None = None
) -> None:
    """Record ``name`` -> ``location``; a name taken at another location needs ``replace``."""
    if not NAME_PATTERN.match(name):
        raise ConfigError("NAME", name, "expected a dotted name such as lake.rides")
    tables = registered_tables(home)
    if tables.get(name, location) != location and not replace:
        raise TableNameTaken(
            f"Delta table name {name!r} is registered at {tables[name]!r}; pass --replace to "
            "point it here"
        )
    tables[name] = location
    path = _registry(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(temporary_name(path.name))
    tmp.write_text(json.dumps(tables, indent=2, sort_keys=True))
    tmp.replace(path)


def resolve_delta_location(path: str, home: Path | None = None) -> tuple[str, str | None]:
    """(location, registered name or None): a registered name is looked up, anything else
    is a location (a path or a URI)."""
    if "/" not in path and "\\" not in path and NAME_PATTERN.match(path):
        tables = registered_tables(home)
        if path in tables:
            return tables[path], path
    return path, None
