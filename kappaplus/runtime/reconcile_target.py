"""What ``kappa reconcile`` compares for one output of a job: its production and backfill
tables, the declared keys, and the production run's watermark read from that run's
checkpoint (:mod:`kappaplus.audit.reconcile` compares; finding the checkpoint takes the
run's identity, which is the runtime's, hence this module above the audit).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from kappaplus.audit.reconcile import ReconcileTarget, checkpoint_watermark
from kappaplus.config import resolve
from kappaplus.core.errors import ConfigError
from kappaplus.runtime.state.checkpoints import stream_checkpoint

if TYPE_CHECKING:
    from kappaplus.config import JobConfig
    from kappaplus.jobs import Job


def target_of(
    job: Job,
    config: JobConfig,
    output: str | None,
    *,
    start: datetime | None = None,
    end: datetime | None = None,
    checkpoint_root: Path | None = None,
    watermark_micros: int | None = None,
) -> ReconcileTarget:
    """The reconcile target of ``job``'s output (the only one when ``output`` is None):
    its production and backfill tables from ``config``, the keys its ``reconcile`` table
    declares, and (unless given) the production watermark from the stream run's checkpoint
    under ``checkpoint_root`` (None: the config's).

    Example::

        target = target_of(JOB, load_config("job.toml"), "sessions", start=start, end=end)
        result = reconcile(spark, target)
    """

    output = job.chosen_output(output)
    keys = config.outputs[output].reconcile
    if keys is None:
        raise ConfigError(
            f"outputs.{output}.reconcile",
            None,
            'declare the key columns: [outputs.<name>.reconcile] key = ["col", ...] '
            '(and window_end = "col", measure = "col")',
        )
    production = resolve(config, "stream", job).outputs[output].hive
    backfill = resolve(config, "backfill", job).outputs[output].hive
    if production is None or backfill is None:
        raise ConfigError(
            f"outputs.{output}.hive", None, "kappa reconcile compares Hive outputs only"
        )
    if watermark_micros is None and keys.window_end is not None:
        watermark_micros = checkpoint_watermark(
            stream_checkpoint(job, config, output, checkpoint_root)
        )
    spec = job.output(output)
    late = config.outputs[output].late_target()
    return ReconcileTarget(
        job=job.name,
        output=output,
        production=production.table,
        backfill=backfill.table,
        key=tuple(keys.key),
        window_end=keys.window_end,
        measure=keys.measure,
        event_time_column=spec.event_time_column,
        watermark_micros=watermark_micros,
        start=start,
        end=end,
        late_table=None if late is None else late.table,
        late_event_time_column=None if late is None else job.inputs[0].event_time_column,
        late_topic=None if late is None else late.topic,
        late_bootstrap=None if late is None else late.bootstrap_servers,
        late_options={} if late is None else dict(late.options),
    )
