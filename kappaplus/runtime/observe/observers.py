"""What watches a run besides its progress line: the audit recorder (per-window counts of
every stage, :mod:`kappaplus.audit.table`) and the Prometheus metrics endpoint
(:mod:`kappaplus.runtime.observe.metrics`). Neither may stop the job: their failures are logged."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kappaplus.core.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from kappaplus.jobs import Job
    from kappaplus.runtime.binding.outputs import OutputPlan
    from kappaplus.runtime.options import RunOptions

log = logging.getLogger(__name__)


def audit_recorder(
    spark: SparkSession, job: Job, run: RunOptions, resolved: Any, plans: dict[str, OutputPlan]
) -> Any:
    """The recorder of this run's audit counts (:mod:`kappaplus.audit.table`)."""
    from kappaplus.audit.table import AuditRecorder

    datasets: dict[tuple[str, str], str] = {}
    for spec in job.inputs:
        binding = resolved.inputs[spec.name]
        if binding.kafka is not None:
            datasets[("kafka", spec.name)] = binding.kafka.topic
        # the lake table, whatever its format: what `kappa audit --table` pairs with the
        # archiver that wrote it (an Iceberg archive's output is named by its table too)
        lake = (
            binding.hive.table
            if binding.hive is not None
            else binding.iceberg.table
            if binding.iceberg is not None
            else binding.delta.path
            if binding.delta is not None
            else None
        )
        if lake is not None:
            datasets[("lake", spec.name)] = lake
            datasets[("source", spec.name)] = lake
    for name, plan in plans.items():
        targets = [t.split(" ", 1)[1] for t in plan.targets()]
        datasets[("output", name)] = ",".join(targets)
    return AuditRecorder(
        spark,
        job.name,
        run.mode,
        {name: plan.query_name for name, plan in plans.items()},
        input_stages_from=next(iter(plans), None),
        datasets=datasets,
    )


def serve_metrics(
    spark: SparkSession, run: RunOptions, plans: dict[str, OutputPlan]
) -> tuple[Any, Any] | None:
    """Register the metrics listener and serve ``/metrics`` when ``run.metrics_port`` is
    set (:mod:`kappaplus.runtime.observe.metrics`)."""
    if run.metrics_port is None:
        return None
    from kappaplus.runtime.observe.metrics import MetricsListener, MetricsServer
    from kappaplus.state_store import state_rows_counted

    listener = MetricsListener(
        {plan.query_name: name for name, plan in plans.items()},
        state_rows_counted=state_rows_counted(spark),
    )
    try:
        server = MetricsServer(listener, run.metrics_port)
    except OSError as exc:
        raise ConfigError(
            "--metrics-port", run.metrics_port, f"cannot listen there ({exc.strerror})"
        ) from exc
    spark.streams.addListener(listener)
    server.start()
    return listener, server


def stop_metrics(spark: SparkSession, metrics: tuple[Any, Any] | None) -> None:
    if metrics is None:
        return
    listener, server = metrics
    server.stop()
    try:
        spark.streams.removeListener(listener)
    except Exception as exc:  # noqa: BLE001 - stopping must not hide the run's outcome
        log.warning("removing the metrics listener: %s", exc)


def flush_audit(auditor: Any, *, final: bool = False) -> None:
    """Write the queued audit rows; a failure is logged (and retried), never fatal."""
    if auditor is None:
        return
    try:
        auditor.flush()
    except Exception as exc:  # noqa: BLE001 - the audit must not stop the job
        level = logging.ERROR if final else logging.WARNING
        log.log(level, "writing audit counts to %s: %s", auditor.table, exc)
