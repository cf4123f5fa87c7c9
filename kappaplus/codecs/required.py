"""Required fields: which of a record's fields must be present and non-null, and the dead
letter's reason when one is not.

A field is required when the event schema declares it ``NOT NULL`` (the job's
``InputSpec`` DDL, or a binding's ``fields``) or the binding lists it (``required``); the
event time is checked on its own. Every codec (JSON, Avro, others) decodes a record into a
mapping of its top-level fields and asks :func:`required_problems` of it, so the reasons
read alike whatever the format; a nullable field a record lacks stays null.

>>> required_problems({"id": "1", "city": None}, ("id", "city", "zone"))
["required field 'city' is null", "missing required field 'zone'"]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.types import StructType


def required_names(
    schema: StructType, listed: Iterable[str] = (), *, event_time: str | None = None
) -> tuple[str, ...]:
    """The required fields of ``schema``, in its order: its ``NOT NULL`` fields and those
    ``listed``, without ``event_time`` (checked on its own).

    >>> from pyspark.sql.types import StringType, StructField, StructType
    >>> schema = StructType([StructField("a", StringType(), False), StructField("b", StringType())])
    >>> required_names(schema), required_names(schema, ["b"])
    (('a',), ('a', 'b'))
    """
    wanted = set(listed) | {f.name for f in schema.fields if not f.nullable}
    wanted.discard(event_time or "")
    return tuple(n for n in schema.fieldNames() if n in wanted)


def required_problems(record: Mapping[str, Any], names: Iterable[str]) -> list[str]:
    """One reason per required field of ``names`` that ``record`` lacks or has null."""
    problems: list[str] = []
    for name in names:
        if name not in record:
            problems.append(f"missing required field {name!r}")
        elif record[name] is None:
            problems.append(f"required field {name!r} is null")
    return problems
