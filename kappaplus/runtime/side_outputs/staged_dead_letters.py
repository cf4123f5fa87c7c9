"""A job's dead letters, from every source, through one writer
(:mod:`kappaplus.dead_letters.targets`), in one layout (:data:`kappaplus.codecs.DLQ_ARROW_SCHEMA`;
:data:`kappaplus.dead_letters.targets.HIVE_COLUMNS`).

**Stream** (a Kafka input with a ``dlq`` topic or table): written by the output queries in
the micro-batch that reads them (:mod:`kappaplus.runtime.side_outputs.dead_letter_tap`).

**Backfill** (a Hive input with ``unplaceable = "dead_letter"``): the Hive source stages
the rows no event-time slice can place, with their reason, as Parquet under a directory
beside the run's checkpoints (one file per source file and row groups, so a replayed slice
overwrites rather than duplicates; see :mod:`kappaplus.connectors.lake.delivery`). When the
run ends, :func:`publish_staged` moves them into the binding's dead-letter Hive table with
:func:`kappaplus.dead_letters.targets.write_dead_letters`, in the same layout as a Kafka
input's dead letters (:data:`kappaplus.dead_letters.targets.HIVE_COLUMNS`): ``value`` is
the row as JSON, ``reason`` says why (and which file), ``topic``/``partition``/``offset``
are filled when the table archives Kafka records (``kafka_topic``, ``kafka_partition``,
``kafka_offset``). Publishing replaces the rows of one batch key per job, input and range,
so a resumed or repeated run publishes every staged row exactly once.

**Bootstrap** (a Kafka input with a ``dlq``, read by the hybrid source): the source stages
the records it cannot decode, in the dead-letter schema, one Parquet file per offset range
(a replayed range rewrites its file; :mod:`kappaplus.connectors.hybrid.reader`). When the
run ends, :func:`publish_bootstrap_dead_letters` writes them to the input's ``dlq`` with
:func:`kappaplus.dead_letters.targets.dead_letter_writer`: a table replaces all of them under one
batch key per job and input (exactly once); a topic receives the files not produced before (at least
once, keyed ``topic/partition/offset`` like a stream's).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from kappaplus.jobs import Job
    from kappaplus.runtime.options import RunOptions

log = logging.getLogger(__name__)


def as_dead_letters(staging: str | Path, job: str) -> pa.Table:
    """The dead letters staged under ``staging`` (:mod:`kappaplus.dead_letters.staging`),
    named after ``job``."""
    from kappaplus.dead_letters.staging import read_staged

    staged = read_staged(str(staging))
    index = staged.schema.get_field_index("job")
    jobs = pa.array([job] * staged.num_rows, pa.string())
    return staged.set_column(index, staged.schema.field(index), jobs)


def batch_key(job: str, input_name: str, start: str | None, end: str | None) -> str:
    """The dead-letter table's batch key of one job, input and range (stable across runs)."""
    from kappaplus.runtime.options import slug

    digest = hashlib.sha256(f"{start}|{end}".encode()).hexdigest()[:12]
    return f"{slug(job)}-backfill-{slug(input_name)}-{digest}"[-100:]


def publish_staged(
    spark: SparkSession,
    *,
    job: str,
    input_name: str,
    staging: str | Path,
    table: str,
    start: str | None,
    end: str | None,
) -> int:
    """Write every row staged under ``staging`` into the dead-letter table ``table``
    (replacing what an earlier run of the same range published); the number of rows."""
    from kappaplus.dead_letters.targets import DeadLetterTarget, write_dead_letters

    dead = as_dead_letters(staging, job)
    if not dead.num_rows and not spark.catalog.tableExists(table):
        return 0
    counts = write_dead_letters(
        dead,
        DeadLetterTarget(hive_table=table),
        spark=spark,
        batch_key=batch_key(job, input_name, start, end),
    )
    if counts.hive:
        log.warning(
            "input %s: %d rows no event-time slice could place are in the dead-letter table %s",
            input_name,
            counts.hive,
            table,
        )
    return counts.hive


def publish_run_dead_letters(
    spark: SparkSession, job: Job, resolved: Any, run: RunOptions, mode_dir: Path
) -> dict[str, dict[str, Any]]:
    """Move the rows a backfill's sources could not place into each input's dead-letter
    table (``unplaceable = "dead_letter"``); their counts per input for the run record."""
    from kappaplus.runtime.binding.inputs import dead_letter_staging
    from kappaplus.runtime.side_outputs.staged_dead_letters import publish_staged

    out: dict[str, dict[str, Any]] = {}
    for spec in job.inputs:
        hive = resolved.inputs[spec.name].hive
        table = None if hive is None else hive.dead_letter_table
        if table is None:
            continue
        try:
            count = publish_staged(
                spark,
                job=job.name,
                input_name=spec.name,
                staging=dead_letter_staging(mode_dir, spec.name),
                table=table,
                start=run.start if run.start is not None else hive.start,
                end=run.end if run.end is not None else hive.end,
            )
        except Exception as exc:  # noqa: BLE001 - must not hide the run's outcome
            log.error("publishing the dead letters of input %s to %s: %s", spec.name, table, exc)
            out[spec.name] = {"dead_letter_table": table, "dead_letter_error": str(exc)}
            continue
        out[spec.name] = {"dead_letters": count, "dead_letter_table": table}
    return out


# --------------------------------------------------------------------------------------
# Bootstrap: what the hybrid source staged, written when the run ends
# --------------------------------------------------------------------------------------

PUBLISHED_DIR = "_published"


def _unpublished(files: list[Path], published: Path) -> list[Path]:
    """The staged files not produced yet in the version they have now (a replayed range
    rewrites its file: it is produced again, under the same keys)."""
    out = []
    for file in files:
        stat = file.stat()
        mark = published / f"{file.name}.json"
        try:
            seen = json.loads(mark.read_text())
        except (OSError, ValueError):
            seen = None
        if seen != {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}:
            out.append(file)
    return out


def _mark_published(files: list[Path], published: Path) -> None:
    published.mkdir(parents=True, exist_ok=True)
    for file in files:
        stat = file.stat()
        mark = published / f"{file.name}.json"
        tmp = mark.with_name(f".{mark.name}.tmp")
        tmp.write_text(json.dumps({"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}))
        tmp.replace(mark)


def publish_bootstrap_dead_letters(
    spark: SparkSession, job: Job, resolved: Any, mode_dir: Path
) -> dict[str, dict[str, Any]]:
    """Write the Kafka records a bootstrap could not decode into each Kafka input's ``dlq``
    with :func:`kappaplus.dead_letters.targets.dead_letter_writer`; counts per input for the run
    record.

    The hybrid source stages them in the dead-letter schema, one Parquet file per offset
    range (a replayed range rewrites its file), under
    :func:`~kappaplus.runtime.binding.inputs.bootstrap_dead_letter_path`. A ``dlq`` table receives
    all of them under one batch key per job and input, replaced by each run (exactly once);
    a ``dlq`` topic the files not produced before (at least once, keyed
    ``topic/partition/offset``)."""
    from kappaplus.codecs import DLQ_DDL
    from kappaplus.dead_letters.targets import DeadLetterTarget, dead_letter_writer
    from kappaplus.runtime.binding.inputs import bootstrap_dead_letter_path
    from kappaplus.runtime.options import slug

    out: dict[str, dict[str, Any]] = {}
    for spec in job.inputs:
        kafka = resolved.inputs[spec.name].kafka
        target = None if kafka is None else DeadLetterTarget.of_kafka_input(kafka)
        if target is None:
            continue
        root = Path(bootstrap_dead_letter_path(mode_dir, spec.name))
        files = sorted(root.glob("*.parquet")) if root.is_dir() else []
        if target.kafka_topic:
            files = _unpublished(files, root / PUBLISHED_DIR)
        where = target.kafka_topic or target.hive_table
        try:
            count = 0
            if files or target.hive_table:
                dead = (
                    spark.read.parquet(*[str(f) for f in files])
                    if files
                    else spark.createDataFrame([], DLQ_DDL.replace(" NOT NULL", ""))
                )
                sink_id = f"{slug(job.name)[:40]}-bootstrap-{slug(spec.name)[:40]}"
                counts = dead_letter_writer(target, sink_id=sink_id)(dead, 0)
                count = max(counts.kafka, counts.hive)
            if target.kafka_topic:
                _mark_published(files, root / PUBLISHED_DIR)
        except Exception as exc:  # noqa: BLE001 - must not hide the run's outcome
            log.error("writing the dead letters of input %s to %s: %s", spec.name, where, exc)
            out[spec.name] = {"dead_letter_error": str(exc)}
            continue
        out[spec.name] = {"dead_letters_written": count, "dead_letter_target": where}
    return out
