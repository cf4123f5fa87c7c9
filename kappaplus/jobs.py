"""Job definition: what a Kappa+ job reads, computes and writes -- and nothing about how.

A job declares its logical inputs (name, schema, event-time column), its watermark delay,
its transformation and its logical outputs. It never learns whether it runs from Kafka
(``stream``), from Hive (``backfill``) or both (``bootstrap``): the runtime binds each
input to a streaming DataFrame, applies ``withWatermark`` per input the same way in every
mode (principle 3), calls :meth:`Job.run` and writes the outputs where the configuration
says. Only the watermark delay, the window/slice-size params the job names in
``window_params``, trigger and per-trigger budgets may differ per mode (principle 2).

>>> from pyspark.sql import functions as F
>>> def counts(inputs, params):
...     rides = inputs["rides"]
...     per_window = rides.groupBy(F.window("event_time", params.window), "city").count()
...     return {"counts": per_window.select("window.start", "city", "count")}
>>> JOB = Job(
...     name="ride-counts",
...     inputs=[InputSpec("rides", "ride_id string, city string, event_time timestamp",
...                       "event_time")],
...     outputs=[OutputSpec("counts", event_time_column="start")],
...     transform=counts,
...     watermark_delay="10 seconds",
...     params={"window": "10 seconds"},
...     window_params=["window"],
... )
>>> JOB.output("counts").partition_by
'dt'

Jobs are found by a dotted path ``package.module:ATTRIBUTE`` (see :func:`load_job`).
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from kappaplus.core.errors import ConfigError
from kappaplus.core.late_rules import LateRule
from kappaplus.core.table import DEFAULT_PARTITION_COLUMN
from kappaplus.core.timeutil import parse_duration

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

OutputMode = Literal["append", "update"]
Transform = Callable[[Mapping[str, "DataFrame"], "Params"], Mapping[str, "DataFrame"]]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _check_name(kind: str, name: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(
            f"{kind}.name", name, "expected an identifier like 'rides' or 'ride_events'"
        )


def ddl_field_names(ddl: str) -> list[str]:
    """Top-level field names of a DDL schema string, without needing a SparkSession.

    >>> ddl_field_names("id string, `event time` timestamp, tags map<string, int>")
    ['id', 'event time', 'tags']
    """
    names: list[str] = []
    depth, start = 0, 0
    pieces: list[str] = []
    for pos, char in enumerate(ddl):
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        elif char == "," and depth == 0:
            pieces.append(ddl[start:pos])
            start = pos + 1
    pieces.append(ddl[start:])
    for piece in pieces:
        text = piece.strip()
        if not text:
            continue
        if text.startswith("`"):
            end = text.find("`", 1)
            names.append(text[1:end] if end > 0 else text[1:])
        else:
            names.append(re.split(r"[\s:]", text, maxsplit=1)[0])
    return names


@dataclass(frozen=True)
class InputSpec:
    """A logical input: a name the transform uses, its schema and its event-time column.

    ``schema`` is a DDL string (``"id string, event_time timestamp"``) or a ``StructType``.
    The event-time column must be a top-level field; the runtime watermarks on it.

    ``kafka_metadata``: the job also receives :data:`KAFKA_METADATA_DDL` (topic,
    partition, offset and timestamp of each record): from the Kafka record in ``stream``
    mode, from the Hive table's columns of those names otherwise (an archive written by
    ``kappa archive`` has them). The archiver uses it; most jobs should not.
    """

    name: str
    schema: str | StructType
    event_time_column: str
    kafka_metadata: bool = False

    def __post_init__(self) -> None:
        _check_name("input", self.name)
        names = self.field_names()
        if not names:
            raise ConfigError(f"inputs.{self.name}.schema", self.schema, "the schema has no fields")
        if self.event_time_column not in names:
            raise ConfigError(
                f"inputs.{self.name}.event_time_column",
                self.event_time_column,
                f"not a top-level field of the schema (fields: {', '.join(names)})",
            )

    def field_names(self) -> list[str]:
        """Top-level field names of the declared schema."""
        if isinstance(self.schema, str):
            return ddl_field_names(self.schema)
        return list(self.schema.fieldNames())

    def struct_type(self) -> StructType:
        """The schema as a ``StructType`` (parsing DDL needs an active SparkSession)."""
        from pyspark.sql.types import DataType, StructType, TimestampType

        schema = self.schema
        if isinstance(schema, str):
            parsed = DataType.fromDDL(schema)
            if not isinstance(parsed, StructType):
                raise ConfigError(f"inputs.{self.name}.schema", schema, "expected a struct schema")
            schema = parsed
        event_type = schema[self.event_time_column].dataType
        if not isinstance(event_type, TimestampType):
            raise ConfigError(
                f"inputs.{self.name}.event_time_column",
                self.event_time_column,
                f"must be a timestamp column, the schema says {event_type.simpleString()}",
            )
        return schema

    def job_struct_type(self) -> StructType:
        """What the job receives: the declared schema, plus the Kafka metadata columns
        when ``kafka_metadata`` is set."""
        from pyspark.sql.types import DataType, StructType

        schema = self.struct_type()
        if not self.kafka_metadata:
            return schema
        extra = DataType.fromDDL(KAFKA_METADATA_DDL)
        assert isinstance(extra, StructType)
        clash = [f.name for f in extra.fields if f.name in schema.fieldNames()]
        if clash:
            raise ConfigError(
                f"inputs.{self.name}.schema",
                clash,
                "these names are reserved for the Kafka metadata (kafka_metadata=True)",
            )
        return StructType([*schema.fields, *extra.fields])


KAFKA_METADATA_DDL = (
    "kafka_topic STRING, kafka_partition INT, kafka_offset BIGINT, kafka_timestamp TIMESTAMP"
)
"""The Kafka record metadata an input with ``kafka_metadata=True`` carries."""


@dataclass(frozen=True)
class OutputSpec:
    """A logical output of the transform.

    - ``output_mode``: ``append`` (final rows after the watermark passes) or ``update``.
    - ``event_time_column``: the column whose date partitions the Hive output.
    - ``partition_by``: the partition column, ``dt`` (the event date) by default; a sink
      derives it from ``event_time_column`` when the output does not carry it itself.
    - ``late_by``: how the output's stateful operator keys input rows in event time
      (``event_time``, ``window:<param>[/<param>]``, ``session:<param>``; see
      :mod:`kappaplus.core.late_rules`): what lets a stream run keep the rows the watermark
      drops in a late-rows table or topic (``[outputs.<name>.late]`` in the job config).
    """

    name: str
    output_mode: OutputMode = "append"
    event_time_column: str | None = None
    partition_by: str = DEFAULT_PARTITION_COLUMN
    late_by: str | None = None

    def __post_init__(self) -> None:
        _check_name("output", self.name)
        if self.output_mode not in ("append", "update"):
            raise ConfigError(
                f"outputs.{self.name}.output_mode",
                self.output_mode,
                "expected 'append' or 'update'",
            )
        if not self.partition_by:
            raise ConfigError(f"outputs.{self.name}.partition_by", self.partition_by, "empty")


class Params(Mapping[str, Any]):
    """Read-only job tunables (window sizes, thresholds). Attribute or key access.

    >>> p = Params({"window": "10 seconds"})
    >>> p.window, p["window"], p.duration_micros("window")
    ('10 seconds', '10 seconds', 10000000)
    """

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        object.__setattr__(self, "_values", MappingProxyType(dict(values or {})))

    def __getitem__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            raise KeyError(
                f"no job param {key!r} (params: {', '.join(self._values) or '-'})"
            ) from None

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):
            raise AttributeError(key)
        try:
            return self._values[key]
        except KeyError:
            raise AttributeError(
                f"no job param {key!r} (params: {', '.join(self._values) or '-'})"
            ) from None

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("job params are read-only")

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Params({dict(self._values)!r})"

    def duration_micros(self, key: str) -> int:
        """The param ``key`` parsed as a duration, in microseconds."""
        return parse_duration(self[key], key)


@dataclass(frozen=True)
class Job:
    """A Kappa+ job: inputs, watermark delay, transform, outputs and default params.

    ``window_params`` names the params that are window or slice sizes; only those may be
    overridden per mode. ``watermark_delay`` is the default delay of every input.
    """

    name: str
    inputs: tuple[InputSpec, ...] | list[InputSpec]
    outputs: tuple[OutputSpec, ...] | list[OutputSpec]
    transform: Transform
    watermark_delay: str = "0 seconds"
    params: Mapping[str, Any] = field(default_factory=dict)
    window_params: tuple[str, ...] | list[str] | frozenset[str] = ()
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigError("job.name", self.name, "a job needs a non-empty name")
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))
        object.__setattr__(self, "window_params", tuple(self.window_params))
        if not self.inputs:
            raise ConfigError(f"job {self.name}.inputs", [], "a job needs at least one input")
        if not self.outputs:
            raise ConfigError(f"job {self.name}.outputs", [], "a job needs at least one output")
        _unique("inputs", [spec.name for spec in self.inputs])
        _unique("outputs", [spec.name for spec in self.outputs])
        if not callable(self.transform):
            raise ConfigError(f"job {self.name}.transform", self.transform, "must be callable")
        parse_duration(self.watermark_delay, f"job {self.name}.watermark_delay")
        for key in self.window_params:
            if key not in self.params:
                raise ConfigError(
                    f"job {self.name}.window_params", key, "names a param without a default"
                )
            parse_duration(self.params[key], f"job {self.name}.params.{key}")
        for out in self.outputs:
            if out.late_by is not None:
                LateRule.parse(out.late_by, self.params, f"job {self.name}.{out.name}.late_by")

    @property
    def input_names(self) -> list[str]:
        return [spec.name for spec in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [spec.name for spec in self.outputs]

    def input(self, name: str) -> InputSpec:
        """The input spec called ``name``."""
        for spec in self.inputs:
            if spec.name == name:
                return spec
        raise ConfigError(f"job {self.name}.inputs", name, f"no such input ({self.input_names})")

    def output(self, name: str) -> OutputSpec:
        """The output spec called ``name``."""
        for spec in self.outputs:
            if spec.name == name:
                return spec
        raise ConfigError(f"job {self.name}.outputs", name, f"no such output ({self.output_names})")

    def chosen_output(self, name: str | None, option: str = "--output") -> str:
        """The output a command names with ``option`` (``name``), or the job's only one when
        it names none; :class:`ConfigError` on ``option`` otherwise.

        >>> job = Job("j", [InputSpec("e", "ts timestamp", "ts")],
        ...           [OutputSpec("o", event_time_column="ts")], lambda inputs, params: inputs)
        >>> job.chosen_output(None), job.chosen_input("e")
        ('o', 'e')
        >>> job.chosen_output("x")
        Traceback (most recent call last):
        ...
        kappaplus.core.errors.ConfigError: option '--output' = 'x': the job's outputs are ['o']
        """
        return _chosen("output", self.output_names, name, option)

    def chosen_input(self, name: str | None, option: str = "--input") -> str:
        """The input a command names with ``option`` (``name``), or the job's only one (as
        :meth:`chosen_output`)."""
        return _chosen("input", self.input_names, name, option)

    def make_params(self, overrides: Mapping[str, Any] | None = None) -> Params:
        """The job's default params updated with ``overrides`` (unknown keys are an error)."""
        values = dict(self.params)
        for key, value in (overrides or {}).items():
            if key not in values:
                raise ConfigError(
                    f"params.{key}",
                    value,
                    f"job {self.name!r} has no such param (params: {', '.join(values) or '-'})",
                )
            values[key] = value
        return Params(values)

    def run(
        self, inputs: Mapping[str, DataFrame], params: Params | None = None
    ) -> dict[str, DataFrame]:
        """Apply the transform and check it returned exactly the declared outputs."""
        missing = [name for name in self.input_names if name not in inputs]
        if missing:
            raise ConfigError(f"job {self.name}.inputs", missing, "inputs not bound")
        result = self.transform(
            MappingProxyType(dict(inputs)), params if params is not None else self.make_params()
        )
        if not isinstance(result, Mapping):
            raise ConfigError(
                f"job {self.name}.transform",
                type(result).__name__,
                "must return a mapping {output_name: DataFrame}",
            )
        got, declared = set(result), set(self.output_names)
        if got != declared:
            raise ConfigError(
                f"job {self.name}.transform",
                sorted(got),
                f"returned outputs {sorted(got)} but the job declares {sorted(declared)}",
            )
        return dict(result)


def _chosen(kind: str, names: list[str], name: str | None, option: str) -> str:
    if name is None:
        if len(names) != 1:
            raise ConfigError(option, None, f"the job has {kind}s {names}: name one")
        return names[0]
    if name not in names:
        raise ConfigError(option, name, f"the job's {kind}s are {names}")
    return name


def _unique(kind: str, names: Iterable[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ConfigError(kind, name, "declared twice")
        seen.add(name)


def import_from_cwd() -> None:
    """Let job modules import from the working directory, as ``python -m`` does.

    The ``kappa`` console script puts its own directory on ``sys.path``, not the working
    directory, so ``kappa reconcile myjobs.rides:JOB`` (like ``kappa run``) run from the
    folder holding ``myjobs/`` would not find the module otherwise. Every command that
    takes a job goes through :func:`load_job`, so all import the same way.
    """
    cwd = os.getcwd()
    if not any(entry in ("", cwd) or os.path.abspath(entry) == cwd for entry in sys.path):
        sys.path.insert(0, cwd)


def load_job(path: str) -> Job:
    """Import the job at the dotted path ``package.module:ATTRIBUTE``.

    The attribute may be a :class:`Job` or a zero-argument callable returning one.

    >>> load_job("kappaplus.jobs:nothing")  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    kappaplus.core.errors.ConfigError: option 'job' = 'kappaplus.jobs:nothing': ...
    """
    if not isinstance(path, str) or path.count(":") != 1:
        raise ConfigError("job", path, "expected a dotted path like 'package.module:JOB'")
    module_name, attribute = path.split(":")
    if not module_name or not attribute:
        raise ConfigError("job", path, "expected a dotted path like 'package.module:JOB'")
    import_from_cwd()
    module = _import_job_module(path, module_name)
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ConfigError("job", path, f"module {module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    if not isinstance(target, Job) and callable(target):
        target = target()
    if not isinstance(target, Job):
        raise ConfigError("job", path, f"is a {type(target).__name__}, not a kappaplus Job")
    return target


def _import_job_module(path: str, module_name: str) -> Any:
    """Import the job's module; a failure names the module that is missing, or, when the
    module was found but failed while importing something else, says so with the error's
    first line (not the other package named as if it were the job's)."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise ConfigError(
                "job",
                path,
                f"cannot import module {missing!r} (run from the folder that holds it, or "
                "add that folder to PYTHONPATH)",
            ) from exc
        raise ConfigError(
            "job",
            path,
            f"module {module_name!r} failed while importing {missing!r}: "
            f"{_first_line(exc)} (install it in this Python environment, or fix the import)",
        ) from exc
    except Exception as exc:  # any error the job module raises while being imported
        raise ConfigError(
            "job",
            path,
            f"module {module_name!r} failed while being imported: "
            f"{type(exc).__name__}: {_first_line(exc)}",
        ) from exc


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
