"""Run identity: what makes a checkpoint's offsets (and a table's committed batches) mean
something.

A checkpoint holds offsets of *some* inputs, read for *some* outputs over *some* event-time
range. Resuming it with another table, topic, event-time column or output would silently
skip or repeat rows, so every checkpoint directory records the identity of the run that
created it (``_kappa_identity.json``) and a run whose identity differs refuses, naming each
difference and the way out.

The identity has two parts:

- the *binding*: job, mode, each input binding (topic and servers, or table, partition
  scheme and event-time column) and each output target. Its hash names the default
  checkpoint directory ``<root>/<job>/<mode>/<hash>``, so two configs of one job never
  share a checkpoint by accident;
- the *range*: ``start``/``end`` of a backfill, ``start``/``cutoff`` of a bootstrap. A
  run over another range of the same binding finds the checkpoint and refuses (resume
  with the recorded range, or ``--fresh``).

Everything here is pure Python: the check runs before Spark starts. What a run's Hive
targets already hold (rows another run, or this one from a lost checkpoint, committed over
the same event times) is checked once Spark is up: :mod:`kappaplus.runtime.state.target_claims`.

>>> a = RunIdentity("j", "backfill", {"in": {"hive.table": "t"}}, {"out": ["hive o"]}, {})
>>> b = RunIdentity("j", "backfill", {"in": {"hive.table": "u"}}, {"out": ["hive o"]}, {})
>>> a.key() == b.key(), differences(a.as_json(), b.as_json())
(False, ["inputs.in.hive.table: 't' in the checkpoint, 'u' now"])
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kappaplus.core.errors import StateError
from kappaplus.runtime.options import RunOptions, slug

if TYPE_CHECKING:
    from kappaplus.config import ResolvedConfig
    from kappaplus.config.bindings import MappedLakeInput
    from kappaplus.jobs import Job

IDENTITY_FILE = "_kappa_identity.json"
"""The identity record in a run's checkpoint directory."""


class IdentityError(StateError):
    """A checkpoint (or a table's committed batches) belongs to a run of another identity."""

    def __init__(self, option: str, value: object, problem: str) -> None:
        self.option = option
        self.value = value
        self.problem = problem
        super().__init__(problem)

    def __str__(self) -> str:
        return self.problem


def _mask_servers(servers: str) -> str:
    """Broker addresses without any ``user:password@`` part."""
    return ",".join(part.rsplit("@", 1)[-1].strip() for part in servers.split(","))


@dataclass(frozen=True)
class RunIdentity:
    """Job, mode, input bindings, output targets and range of one run."""

    job: str
    mode: str
    inputs: dict[str, dict[str, Any]]
    outputs: dict[str, list[str]]
    range: dict[str, str | None] = field(default_factory=dict)

    def binding(self) -> dict[str, Any]:
        """Everything but the range."""
        return {"job": self.job, "mode": self.mode, "inputs": self.inputs, "outputs": self.outputs}

    def key(self) -> str:
        """A short stable hash of :meth:`binding` (names the checkpoint directory)."""
        text = json.dumps(self.binding(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def as_json(self) -> dict[str, Any]:
        return {**self.binding(), "range": self.range, "key": self.key()}


def _stored_event_time(kind: str, lake: MappedLakeInput) -> dict[str, str]:
    """How a lake binding stores its event time, when not as a timestamp (epoch unit,
    format): another storage reads other rows into the same slices, so it is another run.
    Nothing for a timestamp column (the identities of such runs stay as they were)."""
    stored = lake.event_time
    if stored is None or (stored.unit is None and stored.format is None):
        return {}
    return {
        f"{kind}.event_time": f"unit {stored.unit}" if stored.unit else f"format {stored.format}"
    }


def run_identity(job: Job, resolved: ResolvedConfig, run: RunOptions) -> RunIdentity:
    """The identity of running ``job`` with ``resolved`` bindings as ``run`` says."""
    inputs: dict[str, dict[str, Any]] = {}
    start: str | None = run.start
    last: str | None = None
    for spec in job.inputs:
        binding = resolved.inputs[spec.name]
        entry: dict[str, Any] = {}
        if run.mode.reads_kafka and binding.kafka is not None:
            entry["kafka.topic"] = binding.kafka.topic
            entry["kafka.servers"] = _mask_servers(binding.kafka.bootstrap_servers)
        if run.mode.reads_lake and binding.hive is not None:
            hive = binding.hive
            entry["hive.table"] = hive.table
            entry["hive.event_time_column"] = hive.event_time_column
            entry.update(_stored_event_time("hive", hive))
            entry["hive.partition_format"] = hive.partition_format
            entry["hive.partition_time"] = hive.partition_time
            start = start if start is not None else hive.start
            bound = run.lake_bound()
            last = bound if bound is not None else (last or hive.end)
        iceberg = binding.iceberg
        if run.mode.reads_lake and iceberg is not None:
            # the snapshot a new run pins: the one given, else the current one at the first
            # start, kept beside the checkpoint (connectors.iceberg.catalog.pin_snapshot)
            entry["iceberg.table"] = iceberg.table
            entry["iceberg.event_time_column"] = iceberg.event_time_column
            entry.update(_stored_event_time("iceberg", iceberg))
            entry["iceberg.snapshot"] = iceberg.snapshot if iceberg.snapshot else "pinned"
            start = start if start is not None else iceberg.start
            bound = run.lake_bound()
            last = bound if bound is not None else (last or iceberg.end)
        delta = binding.delta
        if run.mode.reads_lake and delta is not None:
            # the version a new run pins: the one given, else the current one at the first
            # start, kept beside the checkpoint (connectors.delta.table.pin_version)
            entry["delta.path"] = delta.path
            entry["delta.event_time_column"] = delta.event_time_column
            entry.update(_stored_event_time("delta", delta))
            entry["delta.version"] = delta.version if delta.version is not None else "pinned"
            start = start if start is not None else delta.start
            bound = run.lake_bound()
            last = bound if bound is not None else (last or delta.end)
        entry["event_time_column"] = spec.event_time_column
        inputs[spec.name] = entry
    outputs: dict[str, list[str]] = {}
    for output in job.outputs:
        out = resolved.outputs[output.name]
        targets = []
        if out.hive is not None:
            targets.append(f"hive {out.hive.table}")
        if out.iceberg is not None:
            targets.append(f"iceberg {out.iceberg.table}")
        if out.delta is not None:
            targets.append(f"delta {out.delta.path}")
        if out.kafka is not None:
            targets.append(f"kafka {out.kafka.topic}")
        outputs[output.name] = targets
    span: dict[str, str | None] = {}
    if run.mode.lake_bound is not None:
        span = {"start": start, run.mode.lake_bound: last}
    return RunIdentity(job.name, run.mode, inputs, outputs, span)


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def differences(recorded: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """One line per field where ``wanted`` differs from ``recorded`` (``key`` ignored)."""
    had = _flatten({k: v for k, v in recorded.items() if k != "key"})
    now = _flatten({k: v for k, v in wanted.items() if k != "key"})
    return [
        f"{name}: {had.get(name)!r} in the checkpoint, {now.get(name)!r} now"
        for name in sorted(set(had) | set(now))
        if had.get(name) != now.get(name)
    ]


def run_dir(root: Path, identity: RunIdentity) -> Path:
    """The default checkpoint directory of a run: ``<root>/<job>/<mode>/<binding hash>``."""
    return Path(root) / slug(identity.job) / identity.mode / identity.key()


def unclaimed_checkpoints(directory: Path) -> list[Path]:
    """Spark checkpoints written beside ``directory`` by a version that kept one checkpoint
    per job and mode (``<root>/<job>/<mode>/<output>``), before checkpoints were keyed by run
    identity: directories with Spark's ``metadata`` file and ``offsets/`` log and no identity."""
    mode_root = directory.parent
    if not mode_root.is_dir():
        return []
    return sorted(
        child
        for child in mode_root.iterdir()
        if child.is_dir()
        and child != directory
        and (child / "metadata").is_file()
        and (child / "offsets").is_dir()
        and not (child / IDENTITY_FILE).exists()
    )


def check_unclaimed(directory: Path) -> None:
    """Refuse a first run in ``directory`` while a checkpoint of the old layout sits beside
    it: starting from the configured offsets instead would silently re-read (duplicates) or
    skip (a gap) what that checkpoint had already processed."""
    if (directory / IDENTITY_FILE).exists():
        return
    old = unclaimed_checkpoints(directory)
    if not old:
        return
    names = ", ".join(str(path) for path in old)
    raise IdentityError(
        "checkpoint",
        names,
        f"checkpoints of an earlier layout exist ({names}) and record no run identity: to "
        f"resume from them, move each into {directory}/ (only if this config wrote them); to "
        "start over, delete them or pass --fresh",
    )


def check_identity(directory: Path, identity: RunIdentity, *, create: bool = True) -> None:
    """Refuse (:class:`IdentityError`) if ``directory`` holds a checkpoint of another
    identity; record ``identity`` there if it holds none yet (and ``create``)."""
    marker = directory / IDENTITY_FILE
    wanted = identity.as_json()
    if marker.is_file():
        try:
            recorded = json.loads(marker.read_text())
            if not isinstance(recorded, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as exc:
            raise IdentityError(
                "checkpoint",
                str(marker),
                f"the checkpoint identity file {marker} is unreadable ({exc}); it is not a "
                f"kappaplus checkpoint or it is damaged: remove {directory} (or pass --fresh) "
                "to start over",
            ) from None
        diff = differences(recorded, wanted)
        if diff:
            only_range = all(line.startswith("range.") for line in diff)
            way_out = (
                "resume with the recorded range, or pass --fresh to start over (with "
                "--replace-range where that run's rows are in the outputs already)"
                if only_range
                else "use another --checkpoint root, or pass --fresh to start over"
            )
            raise IdentityError(
                "checkpoint",
                str(directory),
                f"the checkpoint {directory} belongs to another run ("
                + "; ".join(diff)
                + f"): {way_out}",
            )
        return
    if not create:
        return
    directory.mkdir(parents=True, exist_ok=True)
    tmp = marker.with_name(f".{marker.name}.tmp")
    tmp.write_text(json.dumps(wanted, sort_keys=True))
    tmp.replace(marker)
