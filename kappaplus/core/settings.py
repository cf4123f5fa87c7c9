"""Where kappaplus keeps local state (warehouse, metastore, checkpoints, broker files).

The state directory defaults to ``./.kappa`` and can be moved with ``KAPPA_HOME``.
"""

from __future__ import annotations

import os
from pathlib import Path

STATE_DIR_ENV = "KAPPA_HOME"


def state_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The project state directory: ``explicit``, else ``$KAPPA_HOME``, else ``./.kappa``."""
    chosen = explicit or os.environ.get(STATE_DIR_ENV) or ".kappa"
    path = Path(chosen).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


CACHE_ENV = "KAPPA_CACHE_DIR"


def cache_dir() -> Path:
    """The per-user cache of kappaplus: ``$KAPPA_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/kappaplus``, else ``~/.cache/kappaplus``. Holds what is costly to make
    and the same for every state directory (the metastore's template database, the driver
    JVM's class archive)."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kappaplus"
