"""A table noted as registered in another catalog (``state_dir()/tables.json``), for the
tests of what a command says when the catalog it uses does not have the table."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

from kappaplus.core.settings import state_dir


@contextlib.contextmanager
def noted_elsewhere(
    name: str, catalog: str = "thrift://127.0.0.1:1", location: str = "/data/x"
) -> Iterator[None]:
    """``name`` noted as registered in ``catalog`` while the block runs; the notes file
    as it was afterwards."""
    notes = state_dir() / "tables.json"
    before = notes.read_text() if notes.is_file() else None
    known = json.loads(before) if before else {}
    known[name] = {"catalog": catalog, "location": location}
    notes.write_text(json.dumps(known))
    try:
        yield
    finally:
        if before is None:
            notes.unlink()
        else:
            notes.write_text(before)
