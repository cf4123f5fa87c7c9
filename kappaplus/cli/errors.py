"""How a ``kappa`` command reports a failure: ``error: <message>``, then (mostly) exits.

The message is printed as written. ``rich`` reads ``[outputs.counts.late]`` in a message
as a style tag and drops it, and the names in brackets are what such a message is for
("keep them ([outputs.counts.late])"). A URL's password is masked, as in the logs
(:func:`kappaplus.core.secrets.mask_url`).
"""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape

from kappaplus.core.errors import KappaError
from kappaplus.core.secrets import mask_url


def print_error(console: Console, problem: BaseException | str, *, wrap: bool = True) -> None:
    """Print ``error: <problem>`` on ``console``, as written and with passwords masked, for a
    command that goes on (``kappa up`` with the next service); ``wrap=False`` keeps a long
    message on one line."""
    console.print(f"[red]error:[/red] {escape(mask_url(str(problem)))}", soft_wrap=not wrap)


def error_exit(
    console: Console, problem: BaseException | str, code: int | None = None, *, wrap: bool = True
) -> typer.Exit:
    """:func:`print_error`, then the :class:`typer.Exit` to raise: with ``code``, else the
    error's own (:attr:`KappaError.exit_code`: 2 for a bad option or state, 1 otherwise),
    else 1.

    >>> import io
    >>> from kappaplus.core.errors import ConfigError
    >>> out = Console(file=io.StringIO(), width=200)
    >>> problem = ConfigError("outputs.counts.late", None, "keep them ([outputs.counts.late])")
    >>> error_exit(out, problem).exit_code
    2
    >>> print(out.file.getvalue().strip())
    error: option 'outputs.counts.late' = None: keep them ([outputs.counts.late])
    >>> error_exit(out, "cannot reach thrift://bob:pw@metastore:9083", 3).exit_code
    3
    >>> print(out.file.getvalue().splitlines()[-1])
    error: cannot reach thrift://bob:***@metastore:9083
    """
    print_error(console, problem, wrap=wrap)
    if code is None:
        code = problem.exit_code if isinstance(problem, KappaError) else 1
    return typer.Exit(code)
