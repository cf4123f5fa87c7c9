"""What each committed micro-batch delivered, kept beside its query's checkpoint, so the run
records of an interrupted run and of its resume add up.

A run's record counts the batches whose progress it has seen, and saves itself every few
seconds: a run killed with SIGKILL right after Spark committed a batch never counts that
batch, and the run that resumes the checkpoint does not run it again (it is committed). So
the output writer notes every batch it writes, in the ``foreachBatch`` call itself, before
Spark commits it: ``<checkpoint>/_kappa_counts/<batch id>.json`` holds the run that wrote
it and the batch's observed counts (the rows each input delivered to the job). A batch
replayed after a crash is noted again by the run that replays (and commits) it.

When a run starts on a checkpoint that an interrupted run used, it settles that run's
record (:func:`settle_interrupted`): its rows and batches become those of the notes of the
batches it committed, its fraction done that of the last of them. Each committed batch is
then counted once, by the run that committed it.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from kappaplus.runtime.state.records import (
    INTERRUPTED,
    RUNNING,
    CheckpointState,
    RunRecord,
    list_runs,
    read_checkpoint,
)

log = logging.getLogger(__name__)

COUNTS_DIR = "_kappa_counts"
INPUT_METRIC_PREFIX = "kappa_audit.job."
"""Observed metrics carrying the ``rows`` each input delivered to the job (as the progress
tracker counts them, :attr:`kappaplus.runtime.observe.progress.QueryStats.rows`)."""


def note_batch(
    checkpoint: str | os.PathLike[str],
    batch_id: int,
    run_id: str,
    observed: Mapping[str, Mapping[str, int]],
) -> None:
    """Note that ``run_id`` wrote ``batch_id`` with the ``observed`` counts (atomically:
    a temporary file renamed into place)."""
    folder = Path(checkpoint) / COUNTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{int(batch_id)}.json"
    tmp = folder / f".{int(batch_id)}.json.tmp"
    counts = {name: dict(values) for name, values in observed.items()}
    tmp.write_text(json.dumps({"run_id": run_id, "observed": counts}, sort_keys=True))
    os.replace(tmp, target)


def batch_notes(checkpoint: str | os.PathLike[str]) -> dict[int, dict[str, Any]]:
    """The notes of a checkpoint by batch id (unreadable ones skipped)."""
    folder = Path(checkpoint) / COUNTS_DIR
    notes: dict[int, dict[str, Any]] = {}
    if not folder.is_dir():
        return notes
    for path in folder.glob("*.json"):
        if not path.stem.isdigit():
            continue
        try:
            notes[int(path.stem)] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
    return notes


def rows_of(observed: Mapping[str, Mapping[str, Any]]) -> int:
    """Rows the job received in one batch: the observed ``rows`` of each input.

    >>> rows_of({"kappa_audit.job.flights": {"rows": 7}, "kappa_bounds_x": {"rows": 2}})
    7
    """
    return sum(
        int(counts.get("rows", 0))
        for name, counts in observed.items()
        if name.startswith(INPUT_METRIC_PREFIX)
    )


def settle_interrupted(run_id: str, checkpoints: Iterable[str]) -> list[RunRecord]:
    """Settle and save the records of the interrupted runs that used any of
    ``checkpoints`` (the run ``run_id`` is about to resume them, :func:`settled`); the
    settled records."""
    mine = set(checkpoints)
    done = []
    for record in list_runs():
        if record.run_id == run_id or not mine & set(record.checkpoints.values()):
            continue
        if not unsettled(record):
            continue
        final = settled(record)
        for output, stats in final.outputs.items():
            if "settled_from_batches" in stats:
                log.info(
                    "run %s (interrupted): output %s committed batches %s-%s, %d rows "
                    "(its record said %s)",
                    record.run_id,
                    output,
                    *stats["settled_from_batches"],
                    stats["rows"],
                    record.outputs.get(output, {}).get("rows"),
                )
        final.save()
        done.append(final)
    return done


def unsettled(record: RunRecord) -> bool:
    """Whether ``record`` is of an interrupted run not settled yet (``running``, its
    process gone)."""
    return record.status == RUNNING and record.effective_status() == INTERRUPTED


def settled(record: RunRecord) -> RunRecord:
    """``record`` of an interrupted run as its committed batches say (a copy): each
    output's rows and batches those of the notes of the batches it committed, its fraction
    done that of the last of them, its status ``interrupted``. Outputs without notes keep
    the record's own figures."""
    outputs = {name: dict(stats) for name, stats in record.outputs.items()}
    done: list[float] = []
    for output, checkpoint in record.checkpoints.items():
        committed = read_checkpoint(checkpoint).last_commit_batch
        if committed is None:
            continue
        notes = batch_notes(checkpoint)
        own = sorted(
            batch
            for batch, note in notes.items()
            if note.get("run_id") == record.run_id and batch <= committed
        )
        if not own:
            continue
        stats = outputs.setdefault(output, {})
        stats["rows"] = sum(rows_of(notes[batch].get("observed", {})) for batch in own)
        stats["batches"] = len(own)
        stats["settled_from_batches"] = [own[0], own[-1]]
        reached = read_checkpoint_at(checkpoint, own[-1])
        if reached is not None:
            stats["done"] = reached
            done.append(reached)
    return replace(
        record,
        outputs=outputs,
        done=min(done) if done else record.done,
        status=INTERRUPTED,
    )


def committed_done(state: CheckpointState) -> float | None:
    """The fraction done where a checkpoint's committed batches reached (a batch planned
    and not committed is redone by the next run: not done)."""
    if state.last_commit_batch is None:
        return None
    return read_checkpoint_at(state.path, state.last_commit_batch)


def read_checkpoint_at(checkpoint: str | os.PathLike[str], batch_id: int) -> float | None:
    """The event-time fraction done at the end of ``batch_id`` (its offsets' ``done``,
    or a hybrid source's lake part's; 1.0 once it reads Kafka), or None."""
    path = Path(checkpoint) / "offsets" / str(int(batch_id))
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    fractions = []
    for line in lines[2:]:
        try:
            source = json.loads(line)
        except ValueError:
            continue
        fraction = _done_of(source)
        if fraction is not None:
            fractions.append(fraction)
    return min(fractions) if fractions else None


def _done_of(offset: Any) -> float | None:
    if not isinstance(offset, Mapping):
        return None
    if "done" in offset:
        return float(offset["done"])
    if offset.get("phase") == "lake" and isinstance(offset.get("lake"), Mapping):
        return _done_of(offset["lake"])
    if offset.get("phase") == "kafka":
        return 1.0
    return None
