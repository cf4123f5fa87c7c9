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
