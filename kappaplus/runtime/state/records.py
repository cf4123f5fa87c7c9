"""Run records and checkpoint inspection: what ``kappa status`` shows.

Every run writes a JSON record under ``state_dir()/runs/<run_id>.json`` when it starts,
refreshes it while it runs and finalizes it when it ends (``finished``, ``stopped`` or
``failed``). The record says what ran (job, mode, range, trigger), where it reads and
writes, where its checkpoints are and the latest statistics. A ``running`` record whose
process is gone is reported as ``interrupted``: its checkpoints are intact and the same
command resumes it.

Where a run stands is read from the checkpoints themselves as well (Spark's offset and
commit logs), so status is right even when a run died before updating its record.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kappaplus.core.modes import Mode
from kappaplus.core.procs import pid_alive
from kappaplus.core.settings import state_dir

RUNNING, FINISHED, STOPPED, FAILED, INTERRUPTED = (
    "running",
    "finished",
    "stopped",
    "failed",
    "interrupted",
)


def runs_dir(home: str | os.PathLike[str] | None = None) -> Path:
    """Where run records live: ``state_dir()/runs``."""
    path = state_dir(home) / "runs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def new_run_id(job: str, mode: str) -> str:
    """``<job>-<mode>-<UTC time>-<pid>``: sortable by start time, unique per process."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return f"{job}-{mode}-{stamp}-{os.getpid()}"


@dataclass
class RunRecord:
    """The JSON record of one run (all fields plain JSON values)."""

    run_id: str
    job: str
    job_path: str | None
    mode: str
    status: str
    trigger: str
    started_at: float
    updated_at: float
    pid: int
    host_user: str | None = None
    config_file: str | None = None
    start: str | None = None
    end: str | None = None
    cutoff: str | None = None
    watermark_delay: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    targets: dict[str, list[str]] = field(default_factory=dict)
    checkpoints: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    rows_dropped_late: int = 0
    done: float | None = None
    ended_at: float | None = None
    error: str | None = None
    stopped_by: str | None = None
    """Why a ``stopped`` run stopped: ``ctrl-c``, ``sigterm`` or ``timeout``."""
    identity: dict[str, Any] = field(default_factory=dict)
    """The run identity (:mod:`kappaplus.runtime.state.identity`): bindings, targets, range."""

    def path(self, home: str | os.PathLike[str] | None = None) -> Path:
        return runs_dir(home) / f"{self.run_id}.json"

    def save(self, home: str | os.PathLike[str] | None = None) -> Path:
        """Write the record atomically (temporary file renamed into place)."""
        self.updated_at = time.time()
        target = self.path(home)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2, sort_keys=True, default=str))
        os.replace(tmp, target)
        return target

    @classmethod
    def load(cls, path: Path) -> RunRecord:
        data = json.loads(path.read_text())
        known = {name for name in cls.__dataclass_fields__}
        return cls(**{key: value for key, value in data.items() if key in known})

    def effective_status(self) -> str:
        """``interrupted`` for a ``running`` record whose process no longer exists."""
        if self.status == RUNNING and not pid_alive(self.pid):
            return INTERRUPTED
        return self.status


def exit_code(record: RunRecord) -> int:
    """The exit status of ``kappa run`` for a run that ended as ``record`` says.

    0 when the run did what was asked: it finished, or a stream/bootstrap (which never
    finishes by itself) or a backfill that had covered its whole range stopped at
    ``--timeout``. 1 when it failed. A run stopped before its work was done says so, so a
    scheduler does not take a partial backfill for a complete one: 130 after Ctrl-C and
    143 after SIGTERM (128 + the signal, the shell's and the JVM's convention), 124 for a
    backfill that ``--timeout`` stopped part way, or a bootstrap it stopped before the end
    of its lake phase (GNU ``timeout``'s code). Running the same
    command again resumes from the checkpoints.

    >>> exit_code(replace(record, status="stopped", stopped_by="ctrl-c"))   # doctest: +SKIP
    130
    """
    if record.status == FINISHED:
        return 0
    if record.status != STOPPED:
        return 1
    if record.stopped_by == "ctrl-c":
        return 130
    if record.stopped_by == "sigterm":
        return 143
    if Mode(record.mode).reads_lake and (record.done is None or record.done < 1.0):
        return 124  # a bootstrap still in its lake phase has not reached the live stream
    return 0


def list_runs(home: str | os.PathLike[str] | None = None) -> list[RunRecord]:
    """All run records, oldest first (unreadable files are skipped)."""
    records = []
    for path in sorted(runs_dir(home).glob("*.json")):
        try:
            records.append(RunRecord.load(path))
        except (ValueError, TypeError, OSError):
            continue
    records.sort(key=lambda r: r.started_at)
    return records


@dataclass(frozen=True)
class CheckpointState:
    """What a streaming checkpoint says: last planned and last committed batch, the
    watermark and the sources' end offsets of the last planned batch."""

    path: str
    exists: bool
    last_offset_batch: int | None = None
    last_commit_batch: int | None = None
    watermark_ms: int | None = None
    sources: tuple[Any, ...] = ()

    @property
    def pending(self) -> bool:
        """A batch was planned but not committed (it is replayed on restart)."""
        planned, committed = self.last_offset_batch, self.last_commit_batch
        return planned is not None and planned != committed

    def done(self) -> float | None:
        """Fraction of the event-time range done, from the Hive sources' ``done`` fields."""
        fractions = [float(s["done"]) for s in self.sources if isinstance(s, dict) and "done" in s]
        return min(fractions) if fractions else None

    def position(self) -> str | None:
        """A short description of where the sources stand (Hive ranges, Kafka offsets)."""
        parts = []
        for source in self.sources:
            if isinstance(source, dict) and "range" in source:
                parts.append(f"slice {source['range']}")
            elif isinstance(source, dict) and source.get("phase") == "end":
                parts.append("end of input")
            elif isinstance(source, dict):
                total = sum(
                    int(v)
                    for topic in source.values()
                    if isinstance(topic, dict)
                    for v in topic.values()
                    if isinstance(v, int)
                )
                parts.append(f"offsets {total}" if total else json.dumps(source)[:60])
        return "; ".join(parts) or None


def _latest(directory: Path) -> int | None:
    if not directory.is_dir():
        return None
    ids = [int(p.name) for p in directory.iterdir() if p.name.isdigit()]
    return max(ids) if ids else None


def offset_log_metadata(checkpoint: str | os.PathLike[str], batch_id: int) -> dict[str, Any]:
    """The metadata line of batch ``batch_id``'s entry in a query checkpoint's offset log
    (``batchWatermarkMs``, ``batchTimestampMs``, the conf): ``OSError``, ``IndexError`` or
    ``ValueError`` when there is none, for the caller to say what that means.

    >>> import tempfile, pathlib
    >>> cp = pathlib.Path(tempfile.mkdtemp()); (cp / "offsets").mkdir()
    >>> entry = 'v1\\n{"batchWatermarkMs":5,"batchTimestampMs":9}\\n{}'
    >>> _ = (cp / "offsets" / "3").write_text(entry)
    >>> offset_log_metadata(cp, 3)["batchTimestampMs"]
    9
    """
    lines = (Path(checkpoint) / "offsets" / str(int(batch_id))).read_text().splitlines()
    metadata = json.loads(lines[1])
    if not isinstance(metadata, dict):
        raise ValueError(f"not an offset log entry's metadata: {lines[1][:80]}")
    return metadata


def read_checkpoint(path: str | os.PathLike[str]) -> CheckpointState:
    """Read Spark's offset and commit logs of a query checkpoint (no Spark needed)."""
    root = Path(path)
    if not root.is_dir():
        return CheckpointState(str(root), False)
    last_offset = _latest(root / "offsets")
    last_commit = _latest(root / "commits")
    watermark = None
    sources: list[Any] = []
    if last_offset is not None:
        try:
            lines = (root / "offsets" / str(last_offset)).read_text().splitlines()
        except OSError:
            lines = []
        if len(lines) >= 2:
            try:
                watermark = int(json.loads(lines[1]).get("batchWatermarkMs", 0))
            except (ValueError, AttributeError):
                watermark = None
        for line in lines[2:]:
            try:
                sources.append(json.loads(line))
            except ValueError:
                sources.append(line)
    return CheckpointState(str(root), True, last_offset, last_commit, watermark, tuple(sources))
