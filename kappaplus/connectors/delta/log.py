"""The Delta log through delta-rs: a table opened at a version, and its ``add`` actions (the
data files with their statistics and partition values). Below the lister and the table
helpers, which both read it."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from kappaplus.core.errors import TableError, TableNotFound


def open_delta(
    location: str, storage_options: dict[str, str] | None, version: int | None = None
) -> Any:
    """The ``deltalake.DeltaTable`` at ``location`` (at ``version``); one-line errors."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(location, version=version, storage_options=storage_options or None)
    except TableNotFoundError as exc:
        raise TableNotFound(
            f"no Delta table at {location!r} ({exc}); check the path ([inputs.<name>.delta] "
            "path) or register the name with kappa table register --delta"
        ) from exc
    except Exception as exc:  # a version the log no longer has, an unreachable store
        what = f" version {version}" if version is not None else ""
        raise TableError(f"Delta table {location!r}{what} cannot be opened: {exc}") from exc


def add_actions(table: Any) -> pa.Table:
    """The table's ``add`` actions, flattened (``path``, ``size_bytes``,
    ``modification_time``, ``num_records``, ``min.<col>``, ``max.<col>``,
    ``null_count.<col>``, ``partition.<col>``) as a pyarrow table."""
    return pa.table(table.get_add_actions(flatten=True))
