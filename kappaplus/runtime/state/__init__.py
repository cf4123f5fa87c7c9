"""A run's state that outlives it: checkpoint directories and their identity, the lock
that keeps two runs off one checkpoint, run records (``kappa status``), the claims a run
makes on its targets (no table written twice over the same event times by two runs), and
the journal of a range replacement."""
