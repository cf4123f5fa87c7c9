"""Where each recorded run stands, as ``kappa status`` shows it: one row per run from its
run record and the checkpoints it used (a checkpoint stands where the last run over it left
it)."""

from __future__ import annotations

from typing import Any

from kappaplus.runtime.state.batch_counts import committed_done, settled, unsettled
from kappaplus.runtime.state.records import list_runs, read_checkpoint


def status_rows(job: str | None, limit: int) -> list[dict[str, Any]]:
    """The latest ``limit`` runs (of ``job`` when given), oldest first, every field."""
    every = list_runs()
    records = [r for r in every if job is None or r.job == job][-limit:]
    latest_user = _latest_users(every)
    rows: list[dict[str, Any]] = []
    for record in records:
        if unsettled(record):  # killed: what it committed, as a resume will settle it
            record = settled(record)
        checkpoints = {name: read_checkpoint(path) for name, path in record.checkpoints.items()}
        later = sorted(
            {latest_user[path] for path in record.checkpoints.values()} - {record.run_id}
        )
        # the checkpoints stand where the LAST run over them left them: an earlier run's
        # fraction done is its own, as its record last said (an interrupted run resumed
        # later is not 100% done); the latest's is where its committed batches reached
        done = (
            []
            if later
            else [d for d in (committed_done(c) for c in checkpoints.values()) if d is not None]
        )
        rows.append(
            {
                "run_id": record.run_id,
                "job": record.job,
                "mode": record.mode,
                "status": record.effective_status(),
                "stopped_by": record.stopped_by,
                "range": f"[{record.start or '-'}, {record.end or '-'})",
                "done": min(done) if done else record.done,
                "started_at": record.started_at,
                "ended_at": record.ended_at,
                "rows": sum(
                    int(stats.get("rows", stats.get("input_rows", 0)) or 0)
                    for stats in record.outputs.values()
                ),
                "throughput": {
                    name: stats.get("throughput") for name, stats in record.outputs.items()
                },
                "rows_dropped_late": record.rows_dropped_late,
                "dead_letters": _dead_letters(record.inputs),
                "checkpoints": {
                    name: {
                        "path": state.path,
                        "last_batch": state.last_offset_batch,
                        "committed": state.last_commit_batch,
                        "pending": state.pending,
                        "position": state.position(),
                    }
                    for name, state in checkpoints.items()
                },
                "error": record.error,
                "checkpoints_resumed_by": later,
            }
        )
    return rows


def _dead_letters(inputs: dict[str, dict[str, Any]]) -> int:
    """Dead letters of a run over its inputs: Kafka decode failures or unplaceable rows."""
    total = 0
    for counts in inputs.values():
        for key in ("dead_letters", "dead_letters_written", "dead"):
            if isinstance(counts.get(key), int):
                total += counts[key]
                break
    return total


def _latest_users(records: list[Any]) -> dict[str, str]:
    """Checkpoint path -> the run id of the latest run (by start) that used it."""
    users: dict[str, tuple[float, str]] = {}
    for record in records:
        for path in record.checkpoints.values():
            if path not in users or record.started_at >= users[path][0]:
                users[path] = (record.started_at, record.run_id)
    return {path: run_id for path, (_, run_id) in users.items()}
