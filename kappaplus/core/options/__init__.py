"""One typed options layer: how every option object of kappaplus names, types, defaults and
reads its options.

An option object is a frozen dataclass decorated with :func:`options_class`; each option is
a field declared once with :func:`option`:

- its **key**, Spark's camelCase name (what ``.option(...)`` takes). The field name is
  accepted too, and both are case-insensitive, as Spark treats option names;
- its **kind**: how the text becomes the typed value (and is written back, for
  :func:`to_options`), with the error when it cannot (:data:`TEXT`, :func:`integer`,
  :data:`POSITIVE_INT`, :data:`POSITIVE_NUMBER`, :data:`BOOL`, :func:`duration`,
  :data:`DURATION_TEXT`, :data:`TIMESTAMP`, :data:`TIMESTAMP_TEXT`, :func:`choice`,
  :func:`json_value`, :func:`names`, :func:`matching`, :data:`PATH`, or a :class:`Kind` of
  one's own);
- its **default**, declared there only: it is the dataclass default and the value when the
  option is not given. Without a default the option is required.

:func:`read_options` reads Spark's ``Mapping[str, str]`` (a blank value counts as not
given) into typed values, which the class's parser checks against each other before it
builds the object; :func:`check_fields` applies the same kinds to the arguments of an
object built in Python (its ``__post_init__`` calls it); :func:`to_options` writes an
object back as the options that read as the same object.

Keys no option claims are ignored, as Spark's own sources do (Spark, the JVM reader and
the planner process pass keys a Python source does not read, ``kafka.*`` client settings
are read by prefix, and the hybrid source routes one map to two sources); they are left
in :attr:`Read.rest`. Every error is a :class:`~kappaplus.core.errors.ConfigError` naming the
option as the user spelled it and the bad value.

>>> @options_class
... class Example:
...     max_rows_per_trigger: int | None = option("maxRowsPerTrigger", POSITIVE_INT, default=None)
...     max_lateness: int = option("maxLateness", duration(), default=0)
>>> from_options(Example, {"maxrowspertrigger": "10", "max_lateness": "1 min"})
Example(max_rows_per_trigger=10, max_lateness=60000000)
>>> to_options(Example(max_rows_per_trigger=10))
{'maxRowsPerTrigger': '10', 'maxLateness': '0 seconds'}
>>> from_options(Example, {"maxRowsPerTrigger": "ten"})  # doctest: +IGNORE_EXCEPTION_DETAIL
Traceback (most recent call last):
kappaplus.core.errors.ConfigError: option 'maxRowsPerTrigger' = 'ten': expected a whole number
"""

from kappaplus.core.options.declared import (
    Option,
    Read,
    check_fields,
    from_options,
    option,
    option_keys,
    options_class,
    options_of,
    read_options,
    to_options,
)
from kappaplus.core.options.kinds import (
    BOOL,
    DURATION_TEXT,
    MICROS,
    NAME,
    PATH,
    POSITIVE_INT,
    POSITIVE_MICROS,
    POSITIVE_NUMBER,
    TEXT,
    TIMESTAMP,
    TIMESTAMP_TEXT,
    Kind,
    choice,
    duration,
    duration_text,
    integer,
    json_value,
    matching,
    names,
    positive_number,
)

__all__ = [
    "BOOL",
    "DURATION_TEXT",
    "Kind",
    "MICROS",
    "NAME",
    "Option",
    "PATH",
    "POSITIVE_INT",
    "POSITIVE_MICROS",
    "POSITIVE_NUMBER",
    "Read",
    "TEXT",
    "TIMESTAMP",
    "TIMESTAMP_TEXT",
    "check_fields",
    "choice",
    "duration",
    "duration_text",
    "from_options",
    "integer",
    "json_value",
    "matching",
    "names",
    "option",
    "option_keys",
    "options_class",
    "options_of",
    "positive_number",
    "read_options",
    "to_options",
]
