"""The run: one job, bound to its sources and sinks for a mode, run as streaming queries.

The entry is :func:`kappaplus.runtime.runner.run_job`. Its rooms:

- the run loop (this folder): :mod:`.runner` (bind, start, wait, finish),
  :mod:`.options` (what was asked: mode, range, trigger), :mod:`.waiting`,
  :mod:`.stopping`, :mod:`.catch_up`, :mod:`.failures` (one line per failure);
- :mod:`.binding`: inputs and outputs bound per mode (:mod:`.binding.inputs`,
  :mod:`.binding.outputs`), schema unification, event-time bounds, outliers;
- :mod:`.side_outputs`: dead letters and late rows, one mechanism;
- :mod:`.state`: what survives a run: checkpoints, run identity, locks, run records, the
  claims on targets (the doubling refusal) and range replacement;
- :mod:`.observe`: progress, metrics, lag and the audit hook.
"""
