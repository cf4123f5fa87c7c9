"""Typed, validated options of the Delta streaming source (``kappa_delta``).

Every option of the Hive source applies (slicing targets and caps, bounds, the watermark,
dead letters, manifests: :class:`~kappaplus.connectors.lake.options.LakeSourceOptions`;
``partitionColumns`` are the Delta table's partition columns, filled from the log's
partition values), plus the pinned version of the table, resolved in the caller's process
(:func:`~kappaplus.connectors.delta.table.read_delta_stream`), and the storage options
its files are opened with.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kappaplus.connectors.lake.options import LakeSourceOptions
from kappaplus.core.options import BOOL, integer, json_value, option, options_class


def _props(value: Any) -> dict[str, str]:
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object")
    return {str(k): str(v) for k, v in value.items()}


STORAGE_OPTIONS = json_value(_props, lambda props: props, "a JSON object of strings", _props)


@options_class(kw_only=True)
class DeltaSourceOptions(LakeSourceOptions):
    """:class:`LakeSourceOptions` plus the pinned version of a Delta table (``location``
    is the table's URI: a local path or ``s3://...``)."""

    delta_version: int = option("deltaVersion", integer())
    """The table version every slice of this run reads."""
    storage_options: dict[str, str] = option(
        "storageOptions", STORAGE_OPTIONS, default_factory=dict
    )
    """delta-rs storage options (``AWS_ENDPOINT_URL``, credentials...) for ``s3://`` tables."""
    deletion_vectors: bool = option("deletionVectors", BOOL, default=False)
    """The table's protocol has deletion vectors: a file's deleted rows are dropped by row
    position (the selection vectors delta-rs reads from the log)."""

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> DeltaSourceOptions:
        parsed = super().parse(options)
        assert isinstance(parsed, DeltaSourceOptions)
        return parsed
