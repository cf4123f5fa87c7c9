"""The figures blocks of ``docs/benchmarks.md`` that bench scripts rewrite between their markers."""

from __future__ import annotations

from pathlib import Path


def replace_block(doc: Path, start: str, end: str, body: str) -> None:
    """Put ``body`` between the ``start`` and ``end`` markers of ``doc``, in place of what is
    there, or append the marked block when the page has none yet.

    >>> import tempfile
    >>> page = Path(tempfile.mkdtemp()) / "b.md"
    >>> page.write_text("# B\\n<!-- a -->\\nold\\n<!-- /a -->\\ntail\\n")
    36
    >>> replace_block(page, "<!-- a -->", "<!-- /a -->", "new")
    >>> page.read_text()
    '# B\\n<!-- a -->\\nnew\\n<!-- /a -->\\ntail\\n'
    """
    text = doc.read_text() if doc.exists() else "# Benchmarks\n"
    block = f"{start}\n{body.rstrip()}\n{end}"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    doc.write_text(text)
