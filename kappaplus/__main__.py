"""``python -m kappaplus ...`` is the ``kappa`` command, for where no console script is on the
``PATH`` (a cluster node, a container with the wheel unpacked on ``PYTHONPATH``).

>>> import subprocess, sys
>>> done = subprocess.run([sys.executable, "-m", "kappaplus", "--help"], capture_output=True,
...                       text=True)
>>> done.returncode, "Usage: kappa" in done.stdout
(0, True)
"""

from __future__ import annotations

from kappaplus.cli import app

if __name__ == "__main__":
    app(prog_name="kappa")
