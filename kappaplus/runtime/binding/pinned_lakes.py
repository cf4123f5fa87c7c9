"""The lake formats a run reads at a pinned version: Iceberg (a snapshot) and Delta (a
table version), as data: what one binding differs from the other in.

A backfill or bootstrap of either is the same steps (``pinned_backfill`` and
``pinned_bootstrap`` in :mod:`kappaplus.runtime.binding.pinned_inputs`); only the binding's
section, the field that locates the table, the two settings that pin what is read, how
its schema is resolved and which stream opens it differ. Hive is not one of them: it has
no version to pin and its own options (unplaceable rows, the planner's file listing).

>>> [f.key for f in PINNED_LAKES], ICEBERG.pin, DELTA.locator
(['delta', 'iceberg'], ('catalog', 'snapshot'), 'path')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from kappaplus.config import DeltaInput, IcebergInput, ResolvedInput
    from kappaplus.connectors.lake.jvm_reader import LakeStream
    from kappaplus.jobs import InputSpec
    from kappaplus.mapping import Resolution


PinnedBinding = Union["IcebergInput", "DeltaInput"]
"""A binding of a lake read at a pinned version."""


@dataclass(frozen=True)
class PinnedLake:
    """One lake format read at a pinned version.

    - ``key``: the binding's section (``inputs.<name>.<key>``), the hybrid source's option
      carrying the pin, and the word that starts a run's source line;
    - ``title``: the format in a message (``"an Iceberg table"``);
    - ``locator``: the binding's field naming the table (``table``, ``path``);
    - ``pin``: the binding's fields that say where the table is kept and which version is
      read (``catalog`` + ``snapshot``, ``storage_options`` + ``version``).
    """

    key: str
    title: str
    locator: str
    pin: tuple[str, str]

    def binding(self, resolved: ResolvedInput) -> PinnedBinding | None:
        """The input's binding of this format, if it has one."""
        lake: PinnedBinding | None = getattr(resolved, self.key)
        return lake

    def where(self, lake: PinnedBinding) -> str:
        """The table's name or path, as the binding gives it."""
        return str(getattr(lake, self.locator))

    def resolution(self, spark: SparkSession, spec: InputSpec, lake: PinnedBinding) -> Resolution:
        """The binding's mapping checked against the table's current schema."""
        from kappaplus.config import IcebergInput
        from kappaplus.runtime.binding import unify

        if isinstance(lake, IcebergInput):
            return unify.iceberg_resolution(spark, spec, lake)
        return unify.delta_resolution(spark, spec, lake)

    def open_stream(self, spark: SparkSession, lake: PinnedBinding, **options: Any) -> LakeStream:
        """The table as an event-time-sliced stream (``options``: the stream's keywords)."""
        from kappaplus.config import IcebergInput

        if isinstance(lake, IcebergInput):
            from kappaplus.connectors.iceberg.catalog import open_iceberg_stream

            return open_iceberg_stream(spark, self.where(lake), **options)
        from kappaplus.connectors.delta.table import open_delta_stream

        return open_delta_stream(spark, self.where(lake), **options)


ICEBERG = PinnedLake("iceberg", "an Iceberg table", "table", ("catalog", "snapshot"))
DELTA = PinnedLake("delta", "a Delta table", "path", ("storage_options", "version"))
PINNED_LAKES = (DELTA, ICEBERG)
"""In the order a binding is asked for them (a binding has at most one lake)."""


def pinned_lake_of(resolved: ResolvedInput) -> tuple[PinnedLake, PinnedBinding] | None:
    """The input's Iceberg or Delta binding and its format; None for a Hive or Kafka one."""
    for lake_format in PINNED_LAKES:
        lake = lake_format.binding(resolved)
        if lake is not None:
            return lake_format, lake
    return None
