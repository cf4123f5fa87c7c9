"""``kappa promote``: a finished backfill's table becomes the production table.

A backfill writes ``<table>_backfill`` and leaves production untouched; once it finished and
``kappa reconcile`` explains every difference, ``kappa promote JOB --output O`` puts its
rows in front of readers under the production name and keeps the previous production table
as ``<table>_previous``; ``kappa promote JOB --output O --undo`` puts it back.

- :mod:`kappaplus.promote.plan`: which tables and which backfill run (from the job config
  and the run's checkpoint), checked before Spark starts;
- :mod:`kappaplus.promote.checks`: the checks that need the catalog (tables, reconcile);
- :mod:`kappaplus.promote.swap`: the journaled catalog steps, resumable after a crash;
- :mod:`kappaplus.promote.command`: the step asked for, carried out, and its outcome;
- :mod:`kappaplus.cli.promote`: the command (options, session, printing).
"""
