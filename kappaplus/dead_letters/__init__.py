"""Dead letters: records a job could not take, kept with their reason, never dropped.

- :mod:`.targets`: the one target type (:class:`~.targets.DeadLetterTarget`: a Kafka topic
  and/or a Hive table), the record layout, keys, and the writer every dead letter goes
  through;
- :mod:`.replay`: after the decoder or the job is fixed, ``kappa dlq replay`` runs the
  dead letters of a range through the job again, exactly once (a ledger), and
  ``kappa dlq trail`` shows what became of each.

Where they are set aside during a run: :mod:`kappaplus.runtime.side_outputs` (a stream's
tap, a backfill's or bootstrap's staged files). The command lines are in
:mod:`kappaplus.cli.dlq`. ``targets`` sits below the runtime; ``replay`` above it (it runs
the job).
"""
