"""Watching a run: per-batch progress (the live table), metrics, lag behind the head, and
the observers that feed the audit counts."""
