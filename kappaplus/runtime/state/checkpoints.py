"""A run's checkpoint directory, and everything about a run that can be checked before Spark
starts: the bindings resolve, event-time columns are declared, and the checkpoint belongs to
this run (its identity; no checkpoint of the earlier layout left behind; no other live run;
Spark's files readable).

``kappa run`` calls :func:`check_before_spark` before it starts a session, so these errors
come in a second, not after a JVM start."""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from kappaplus.config import JobConfig, resolve
from kappaplus.core.errors import ConfigError
from kappaplus.core.modes import Mode
from kappaplus.core.settings import state_dir
from kappaplus.runtime.failures import check_checkpoint_files
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.state.identity import (
    RunIdentity,
    check_identity,
    check_unclaimed,
    run_dir,
    run_identity,
)
from kappaplus.runtime.state.locks import check_free

if TYPE_CHECKING:
    from kappaplus.jobs import Job

log = logging.getLogger(__name__)
LOCK_FILE = "_kappa.lock"
"""The lock a run holds in its checkpoint directory (:mod:`kappaplus.runtime.state.locks`)."""


def checkpoint_root(config: JobConfig, run: RunOptions) -> Path:
    """Where checkpoints of this run live (see :class:`RunOptions`)."""
    if run.checkpoint_root is not None:
        return Path(run.checkpoint_root)
    if config.checkpoint_dir is not None:
        return Path(config.checkpoint_dir)
    return state_dir() / "checkpoints"


def check_shared_checkpoint(config: JobConfig, run: RunOptions, master: str) -> None:
    """Refuse the default checkpoint root (under the driver's state directory) on a cluster.

    Executors write the state store, staged dead letters and late rows, and read the slice
    manifests and a stream query's offset log (its batch's timestamp, for ``max_future``)
    under a run's checkpoint directory, so on any master but ``local[...]`` it must be a path
    every executor sees (a shared mount); ``$KAPPA_HOME`` is the driver's own.
    """
    from kappaplus.session import is_local_master

    if is_local_master(master) or run.checkpoint_root is not None:
        return
    if config.checkpoint_dir is None:
        raise ConfigError(
            "checkpoint_dir",
            None,
            f"must be on a filesystem the executors see when the master is not local ({master});"
            f" the default {state_dir() / 'checkpoints'} is the driver's: set checkpoint_dir in"
            " the job config or pass --checkpoint",
        )


def prepare_checkpoint(config: JobConfig, run: RunOptions, identity: RunIdentity) -> Path:
    """The run's checkpoint directory (derived from its identity), emptied by ``--fresh``;
    :class:`~kappaplus.runtime.state.identity.IdentityError` if it belongs to another run.

    ``--fresh`` sets the old checkpoint aside (:func:`set_aside_path`) rather than deleting
    it: the run's checks on its targets come later, with Spark, and a run they refuse puts
    it back (:func:`restore_set_aside`), so a refusal that says "resume that checkpoint"
    never finds it deleted. It is deleted once the run passed them
    (:func:`discard_set_aside`). A run without ``--fresh`` that finds one set aside by an
    attempt that never passed its checks puts it back first.

    Pure Python: ``kappa run`` calls it before Spark starts (and :func:`run_job` again)."""
    directory = run_dir(checkpoint_root(config, run), identity)
    check_free(directory / LOCK_FILE, f"the checkpoint {directory}")
    aside = set_aside_path(directory)
    if run.fresh and aside.exists():
        # set aside by this run before Spark started, or by an attempt that never passed
        # its checks: what is in the directory now was never a run's, what is aside was
        if directory.exists():
            shutil.rmtree(directory)
    elif run.fresh and directory.exists():
        log.warning(
            "--fresh: checkpoints %s set aside (deleted once the run's checks pass)", directory
        )
        directory.rename(aside)
    if not run.fresh:
        restore_set_aside(directory)
        check_unclaimed(directory)
    check_identity(directory, identity)
    check_checkpoint_files(directory)
    return directory


def set_aside_path(directory: Path) -> Path:
    """Where ``--fresh`` keeps a run's old checkpoint until the run passed its checks."""
    return directory.with_name(f".{directory.name}.before-fresh")


def restore_set_aside(directory: Path) -> bool:
    """Put back the checkpoint ``--fresh`` set aside, if any (the directory in its place
    holds nothing a run committed: no query started from it); True if it did."""
    aside = set_aside_path(directory)
    if not aside.exists():
        return False
    if directory.exists():
        shutil.rmtree(directory)
    aside.rename(directory)
    log.warning("checkpoints %s put back as they were before --fresh", directory)
    return True


def discard_set_aside(directory: Path) -> None:
    """Delete the checkpoint ``--fresh`` set aside: the run passed its checks."""
    aside = set_aside_path(directory)
    if aside.exists():
        log.warning("--fresh: deleting the checkpoints set aside, %s", aside)
        shutil.rmtree(aside)


@contextlib.contextmanager
def fresh_start_checked(directory: Path, fresh: bool) -> Iterator[None]:
    """The run's checks on its targets happen in this block: with ``fresh``, the
    checkpoint set aside goes back if the block raises (a refusal), else it is deleted."""
    try:
        yield
    except BaseException:
        if fresh:
            restore_set_aside(directory)
        raise
    if fresh:
        discard_set_aside(directory)


def check_before_spark(job: Job, config: JobConfig, run: RunOptions) -> Path:
    """Everything about a run that can be checked without Spark: bindings resolve, the
    checkpoint belongs to this run, and the Kafka brokers of the inputs it reads answer.
    Returns the run's checkpoint directory."""
    from kappaplus.runtime.binding.inputs import check_event_time
    from kappaplus.runtime.binding.kafka_inputs import check_kafka_inputs

    resolved = resolve(config, run.mode, job)
    for spec in job.inputs:
        hive = resolved.inputs[spec.name].hive
        # a backfill maps the binding's event time (any name, a unit or a format) to the
        # job's column; a bootstrap's lake and topic must carry the job's column as it is
        if hive is not None and run.mode.hands_over:
            check_event_time(spec, hive)
    directory = prepare_checkpoint(config, run, run_identity(job, resolved, run))
    check_kafka_inputs(job, resolved)  # reachable, and the topics exist
    return directory


def mode_checkpoint(
    job: Job, config: JobConfig, mode: Mode, root: Path | None
) -> tuple[Path, RunIdentity]:
    """The checkpoint directory of the job's run in ``mode`` under ``root`` (None: the
    config's checkpoint root), as :func:`prepare_checkpoint` derives it, and the run's
    identity; nothing is created or checked."""
    run = RunOptions(mode, checkpoint_root=root)
    identity = run_identity(job, resolve(config, mode, job), run)
    return run_dir(checkpoint_root(config, run), identity), identity


def stream_checkpoint(job: Job, config: JobConfig, output: str, root: Path | None) -> Path:
    """The checkpoint of ``output``'s query in the job's production (stream) run under
    ``root`` (:func:`mode_checkpoint`)."""
    return mode_checkpoint(job, config, Mode.STREAM, root)[0] / output
