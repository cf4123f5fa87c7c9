"""Names for the temporary file a write goes to before it is moved into place.

A name unique to the process *and the thread*: two queries of one run work in one driver
process, and a name keyed by the process id alone let two threads storing the same file at
once (the same slice manifest of a shared input) write one temporary file, the second move
then finding it gone. With a name of its own, each writer moves its own file; the last move
wins, with the same content.

>>> name = temporary_name("abc.json")
>>> name.startswith(".abc.json.") and name.endswith(".tmp")
True
>>> temporary_name("abc.json") != name
True
"""

from __future__ import annotations

import os
import threading
import uuid


def temporary_name(name: str) -> str:
    """A hidden name, next to ``name``, that no other writer in any process uses."""
    return f".{name}.{os.getpid()}-{threading.get_ident()}-{uuid.uuid4().hex[:8]}.tmp"
