"""Dead letters after the run: replaying them through the fixed job
(:mod:`kappaplus.dead_letters.replay`, ``kappa dlq replay``).

Where they are written during a run: :mod:`kappaplus.dlq` (the targets),
:mod:`kappaplus.runtime.dead_letters` and :mod:`kappaplus.runtime.dead_letter_tap`.
"""
