"""Typed, validated options of the Iceberg streaming source (``kappa_iceberg``).

Every option of the Hive source applies (slicing targets and caps, bounds, the watermark,
dead letters, manifests: :class:`~kappaplus.connectors.lake.options.LakeSourceOptions`),
plus where the pinned snapshot is: the metadata file and snapshot id resolved in the
caller's process (:func:`~kappaplus.connectors.iceberg.catalog.read_iceberg_stream`), so
the source's workers read the table without a catalog.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kappaplus.connectors.lake.options import LakeSourceOptions
from kappaplus.core.options import TEXT, integer, json_value, option, options_class


def _props(value: Any) -> dict[str, str]:
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object")
    return {str(k): str(v) for k, v in value.items()}


IO_PROPERTIES = json_value(_props, lambda props: props, "a JSON object of strings", _props)


@options_class(kw_only=True)
class IcebergSourceOptions(LakeSourceOptions):
    """:class:`LakeSourceOptions` plus the pinned snapshot of an Iceberg table."""

    metadata_location: str = option("metadataLocation", TEXT)
    """The table metadata file that holds the pinned snapshot."""
    snapshot_id: int = option("snapshotId", integer())
    """The snapshot every slice of this run reads."""
    io_properties: dict[str, str] = option("ioProperties", IO_PROPERTIES, default_factory=dict)
    """FileIO properties (``s3.endpoint``, credentials...) to open the table's files."""

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> IcebergSourceOptions:
        parsed = super().parse(options)
        assert isinstance(parsed, IcebergSourceOptions)
        return parsed
