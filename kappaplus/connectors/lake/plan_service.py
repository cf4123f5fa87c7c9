"""The slice planner as a child process of the JVM reader (``kappa_hive_jvm``), for any lake
format.

The JVM source (``jvm/src/org/kappaplus/hive``) starts ``python -m
kappaplus.connectors.lake.plan_service`` once per query and asks it, one JSON line at a time,
what the format's Python data source (``kappa_hive``, ``kappa_iceberg``, ``kappa_delta``)
would answer: offsets (as the same JSON text, so checkpoints are interchangeable), admission
control, available-now, and for each micro-batch the slice's files (:func:`jvm_partitions`).
The first line is the source's options. Answers are ``{"ok": value}`` or
``{"error": {"type", "message"}}``; logs go to stderr.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
from typing import Any, TextIO

import pyarrow as pa

from kappaplus.connectors.lake.delivery import partition_scalar
from kappaplus.connectors.lake.options import HIVE_PLANNER_SOURCE, PLANNER_SOURCE, LakeSourceOptions
from kappaplus.connectors.lake.source import ListedFilesDataSource, ListedFilesStreamReader
from kappaplus.core.errors import ConfigError, KappaError
from kappaplus.core.table import HIVE_DEFAULT_PARTITION
from kappaplus.slicing.files import UNBOUNDED_HI
from kappaplus.slicing.manifest import ManifestStore
from kappaplus.slicing.offsets import PHASE_DATA, Position, marker_times

log = logging.getLogger(__name__)


def make_reader(options: dict[str, str]) -> ListedFilesStreamReader:
    """The stream reader whose planner answers: that of the data source class named by
    ``plannerSource`` (``module:Class``, a
    :class:`~kappaplus.connectors.lake.source.ListedFilesDataSource` of kappaplus: a lake
    format's lister, e.g. Iceberg's manifests), the Hive source's when absent."""
    named = options.get(PLANNER_SOURCE) or HIVE_PLANNER_SOURCE
    module, _, name = named.partition(":")
    source = None
    if module.startswith("kappaplus.connectors."):
        source = getattr(importlib.import_module(module), name, None)
    if not (isinstance(source, type) and issubclass(source, ListedFilesDataSource)):
        raise ConfigError(PLANNER_SOURCE, named, "expected a kappaplus lake data source class")
    return source.reader_class(source.options_class.parse(options))


def partition_value(value: str | None, kind: pa.DataType, path: str, column: str) -> Any:
    """A partition directory's value in the JSON form the JVM reader turns into Spark's
    internal one (dates as days, timestamps as microseconds, decimals as text)."""
    if value is None or value == HIVE_DEFAULT_PARTITION:
        return None
    scalar = partition_scalar(value, kind, path, column)
    if pa.types.is_date32(kind):
        return scalar.cast(pa.int32()).as_py()
    if pa.types.is_timestamp(kind):
        return scalar.cast(pa.int64()).as_py()
    if pa.types.is_decimal(kind):
        return str(scalar.as_py())
    return scalar.as_py()


def jvm_partitions(reader: ListedFilesStreamReader, start: dict, end: dict) -> dict[str, Any]:
    """What the micro-batch ``(start, end]`` reads: the slice bounds, its files (one entry
    per file, owner when it routes rows of the file) and the end-of-input marker times."""
    options = reader.options
    first, last = Position.parse(start), Position.parse(end)
    plan: dict[str, Any] = {
        "lo": 0,
        "hi": 0,
        "origin": last.origin or 0,
        "end": options.ending_timestamp if options.ending_timestamp is not None else UNBOUNDED_HI,
        "files": [],
        "markers": [],
    }
    plan["markers"] = marker_times(first, last, options.watermark_delay)
    if last.phase != PHASE_DATA or last.manifest is None or last.evict or start == end:
        return plan
    manifest = ManifestStore(options.manifest_dir).get(last.manifest)
    plan["lo"], plan["hi"] = manifest.lo, manifest.hi
    arrow = {f.name: f.type for f in _arrow_fields(options)}
    partition_columns = [c for c in options.partition_columns if c in arrow]
    by_path: dict[str, dict[str, Any]] = {}
    for entry in manifest.entries:
        known = by_path.get(entry.path)
        if known is not None:
            known["owner"] = known["owner"] or bool(entry.route_row_groups)
            continue
        by_path[entry.path] = {
            "uri": reader.data_file_uri(entry.path),
            "path": entry.path,
            "size": entry.size,
            "mtimeMs": entry.mtime_ns // 1_000_000,
            "owner": bool(entry.route_row_groups),
            "admissibleLo": entry.admissible_lo,
            "admissibleHi": entry.admissible_hi,
            "partitionValues": [
                partition_value(entry.partition_values.get(c), arrow[c], entry.path, c)
                for c in partition_columns
            ],
        }
    plan["files"] = list(by_path.values())
    return plan


def _arrow_fields(options: LakeSourceOptions) -> list[pa.Field]:
    from pyspark.sql.pandas.types import to_arrow_schema

    return list(to_arrow_schema(options.output_schema, timezone="UTC"))


def _offset(value: dict | None) -> str | None:
    # the same text as the Python data source's offsets (pyspark sends json.dumps(offset))
    return None if value is None else json.dumps(value)


def handle(reader: ListedFilesStreamReader, request: dict[str, Any]) -> Any:
    """One request's answer."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    op = request["op"]
    if op == "initialOffset":
        return _offset(reader.initialOffset())
    if op == "defaultReadLimit":
        limit = reader.getDefaultReadLimit()
        return limit.max_rows if isinstance(limit, ReadMaxRows) else None
    if op == "latestOffset":
        rows = request.get("maxRows")
        limit = ReadMaxRows(int(rows)) if rows is not None else ReadAllAvailable()
        return _offset(reader.latestOffset(json.loads(request["start"]), limit))
    if op == "reportLatestOffset":
        return _offset(reader.reportLatestOffset())
    if op == "prepareForTriggerAvailableNow":
        reader.prepareForTriggerAvailableNow()
        return None
    if op == "partitions":
        return jvm_partitions(reader, json.loads(request["start"]), json.loads(request["end"]))
    if op == "commit":
        reader.commit(json.loads(request["end"]))
        return None
    raise ValueError(f"unknown planner request {op!r}")


def serve(requests: TextIO, answers: TextIO) -> None:
    """Answer requests until ``requests`` ends."""
    first = requests.readline()
    reader: ListedFilesStreamReader | None = None
    setup_error: dict[str, str] | None = None
    try:
        reader = make_reader(json.loads(first))
    except KappaError as exc:
        setup_error = _error(exc)
    for line in requests:
        if not line.strip():
            continue
        try:
            if reader is None:
                answer: dict[str, Any] = {"error": setup_error}
            else:
                answer = {"ok": handle(reader, json.loads(line))}
        except KappaError as exc:
            answer = {"error": _error(exc)}
        except Exception as exc:  # the JVM shows the message; the traceback goes to the log
            log.exception("slice planner request failed")
            answer = {"error": {"type": type(exc).__name__, "message": str(exc)}}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


def _error(exc: KappaError) -> dict[str, str]:
    return {"type": f"kappaplus.core.errors.{type(exc).__name__}", "message": str(exc)}


def main() -> None:
    logging.basicConfig(
        level=os.environ.get("KAPPA_PLANNER_LOG", "WARNING"),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # stdout carries answers only: anything else printed goes to stderr
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    sys.stdout = sys.stderr
    serve(sys.stdin, answers)


if __name__ == "__main__":
    main()
