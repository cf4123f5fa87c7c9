"""The exception hierarchy: every error kappaplus raises derives from :class:`KappaError`.

Errors name what is at fault (option, table, file, topic, offset) so a user can act on
them without reading a stack trace. They are grouped by what the caller can do:

- the caller must change what it asked: :class:`ConfigError` (an option or key), and
  :class:`StateError` (the saved state of runs, a checkpoint, an identity record, a lock,
  does not allow it: resume, choose other targets or start over, as the message says);
  a ``kappa`` command exits 2 for both (:attr:`KappaError.exit_code`);
- the data or a system is at fault: :class:`TableError`, :class:`DataError`,
  :class:`ReplayError`, :class:`KafkaError`, :class:`BrokerError`, :class:`MetastoreError`;
  exit 1; except a table or topic name the caller got wrong (:class:`TableNotFound`,
  :class:`TableNameTaken`, :class:`TopicNotFound`): exit 2.

>>> ConfigError("x", 1, "bad").exit_code, StateError("locked").exit_code, TableError().exit_code
(2, 2, 1)
"""

from __future__ import annotations


class KappaError(Exception):
    """Root of every error raised by kappaplus."""

    exit_code: int = 1
    """What a ``kappa`` command exits with when this error ends it."""


class ConfigError(KappaError, ValueError):
    """An option or configuration key has a bad value.

    >>> str(ConfigError("maxEventTimePerTrigger", "soon", "expected a duration like '2 hours'"))
    "option 'maxEventTimePerTrigger' = 'soon': expected a duration like '2 hours'"
    """

    exit_code = 2

    def __init__(self, option: str, value: object, problem: str) -> None:
        self.option = option
        self.value = value
        self.problem = problem
        super().__init__(f"option {option!r} = {value!r}: {problem}")


class OptionNeeded(ConfigError):
    """A choice the command cannot make by itself: the message says what is ambiguous and
    which option makes the choice (no ``= None``: nothing was given).

    >>> str(OptionNeeded("--event-time", "2 timestamp columns: name one with --event-time"))
    '2 timestamp columns: name one with --event-time'
    """

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(option, None, problem)
        self.args = (problem,)


class StateError(KappaError):
    """The saved state of runs (a checkpoint, an identity record, a lock, a target's
    committed batches) does not allow what was asked; the message says the way out."""

    exit_code = 2


class TableError(KappaError):
    """A table is missing, of an unsupported format, or does not fit what the job declared."""


class TableNotFound(TableError):
    """A table named in a config or on the command line is not in the catalog: the caller
    must fix the name or register the table (exit 2, like a bad option).

    >>> TableNotFound("table 'x' not found").exit_code
    2
    """

    exit_code = 2


class TableNameTaken(TableError):
    """A table name asked for is already taken (another location, a managed table): the
    caller must choose another name or say to replace it (exit 2)."""

    exit_code = 2


class DataError(KappaError):
    """Input data cannot be read or does not satisfy the declared contract."""


class ReplayError(KappaError):
    """A batch cannot be replayed exactly as it was first delivered."""


class KafkaError(KappaError):
    """A Kafka topic, partition or offset cannot be served as asked."""


class TopicNotFound(KafkaError):
    """A topic named in a config or on the command line has no partitions on the brokers:
    the caller must fix the name (or create the topic), exit 2 like a bad option.

    >>> TopicNotFound("topic 'x' has no partitions").exit_code
    2
    """

    exit_code = 2


class BrokerError(KappaError):
    """The embedded broker cannot be started, reached or stopped."""


class MetastoreError(KappaError):
    """The local Hive metastore server cannot be started, reached or stopped."""


class ObjectStoreError(KappaError):
    """The local S3-compatible object store cannot be started, reached or stopped."""
