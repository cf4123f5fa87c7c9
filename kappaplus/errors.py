"""The exception hierarchy: every error kappaplus raises derives from :class:`KappaError`.

Errors name what is at fault (option, table, file, topic, offset) so a user can act on
them without reading a stack trace.
"""

from __future__ import annotations


class KappaError(Exception):
    """Root of every error raised by kappaplus."""


class ConfigError(KappaError, ValueError):
    """An option or configuration key has a bad value.

    >>> str(ConfigError("maxEventTimePerTrigger", "soon", "expected a duration like '2 hours'"))
    "option 'maxEventTimePerTrigger' = 'soon': expected a duration like '2 hours'"
    """

    def __init__(self, option: str, value: object, problem: str) -> None:
        self.option = option
        self.value = value
        self.problem = problem
        super().__init__(f"option {option!r} = {value!r}: {problem}")


class TableError(KappaError):
    """A table is missing, of an unsupported format, or does not fit what the job declared."""


class DataError(KappaError):
    """Input data cannot be read or does not satisfy the declared contract."""


class ReplayError(KappaError):
    """A batch cannot be replayed exactly as it was first delivered."""


class KafkaError(KappaError):
    """A Kafka topic, partition or offset cannot be served as asked."""


class BrokerError(KappaError):
    """The embedded broker cannot be started, reached or stopped."""


class MetastoreError(KappaError):
    """The local Hive metastore server cannot be started, reached or stopped."""
