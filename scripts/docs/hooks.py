"""mkdocs hooks of the documentation site (``mkdocs.yml``: ``hooks``).

``on_files`` adds the generated reference pages (``reference.py`` beside this file: the
configuration keys, the ``kappa`` commands, the Python API) to the site's files before the
navigation is built, so ``mkdocs build --strict`` fails when one cannot be generated or a
link to one breaks. They are never written to ``docs/``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

sys.path.insert(0, str(Path(__file__).resolve().parent))

import reference  # noqa: E402

PAGES = {
    "reference/configuration.md": reference.configuration_page,
    "reference/cli.md": reference.cli_page,
    "reference/api.md": reference.api_page,
}


def on_files(files: Files, config: Any) -> Files:
    for uri, make in PAGES.items():
        files.append(File.generated(config, uri, content=make()))
    return files
