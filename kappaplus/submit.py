"""The ``kappa`` command as a script for ``spark-submit``, which runs a file, not a module.

Ship the project as its wheel (installed on the driver and the executors, or unpacked on
their ``PYTHONPATH``), the job package with ``--py-files``, and name the config with
``--config`` (a config beside a module inside a zip cannot be read)::

    spark-submit --master spark://master:7077 --py-files myjobs.zip \\
        "$(python -m kappaplus.submit --where)" \\
        run myjobs.rides:JOB --config rides.toml --mode backfill --start 2024-03-01 --end 2024-03-08

Under ``spark-submit`` the session uses the JVM ``spark-submit`` started and its master
(``--master`` of ``spark-submit``; ``kappa run --master`` still wins where given).

>>> import subprocess, sys
>>> where = subprocess.run([sys.executable, "-m", "kappaplus.submit", "--where"],
...                        capture_output=True, text=True).stdout.strip()
>>> where.endswith("kappaplus/submit.py")
True
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    """Run the ``kappa`` command line with ``argv`` (default: this process's arguments)."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["--where"]:
        print(__file__)
        return
    from kappaplus.cli import app

    app(args=args, prog_name="kappa")


if __name__ == "__main__":
    main()
