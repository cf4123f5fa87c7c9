"""``python -m kappaplus.cli``: the ``kappa`` command."""

from kappaplus.cli import app

app(prog_name="kappa")
