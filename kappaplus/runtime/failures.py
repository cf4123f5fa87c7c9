"""Clean failures: a checkpoint damaged before Spark reads it, and one line (with the way
out) for the failures a run meets most, instead of pages of Java frames.

>>> print(explain("org.apache.spark.SparkException: Python worker failed to connect back."))
a Spark Python worker failed to connect back in time (the machine is overloaded, or the \
Python workers cannot start): run the same command again, it resumes from its checkpoint; \
run fewer jobs at once if it recurs
>>> explain("java.lang.IllegalStateException: boom\\n\\tat org.Foo(Foo.java:1)")
'java.lang.IllegalStateException: boom (run with -v for the stack trace)'
>>> print(explain("AnalysisException: Unable to fetch table t. Could not connect to meta store "
...               "using any of the URIs provided.", metastore_uri="thrift://127.0.0.1:9083"))
the Hive metastore at thrift://127.0.0.1:9083 cannot be reached: check that it runs \
('kappa metastore status'; 'kappa up' starts it), then run the same command again, it \
resumes from its checkpoint
>>> explain("An exception was raised by the Python Proxy. Return Message: Traceback ...\\n"
...         "  File x.py, line 1\\n"
...         "kappaplus.core.errors.DataError: table 't': 2 rows cannot be placed")
"table 't': 2 rows cannot be placed"
>>> explain("Job aborted: Lost task 1.3 (TID 12): java.lang.IllegalStateException: "
...         "kappaplus.core.errors.DataError: table 't': file 'f' was removed\\n"
...         "\\tat org.X(X.java:1)")
"table 't': file 'f' was removed"
>>> explain("[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data "
...         "source perform latestOffset: Traceback (most recent call last):\\n"
...         '  File "o.py", line 9, in end_offsets\\n'
...         "ValueError: no end for t-0\\n\\tat org.X(X.java:1)")
'[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source \
perform latestOffset: ValueError: no end for t-0 (run with -v for the stack trace)'
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from kappaplus.core.errors import StateError

_KNOWN = (
    (
        "Python worker failed to connect back",
        "a Spark Python worker failed to connect back in time (the machine is overloaded, "
        "or the Python workers cannot start): run the same command again, it resumes from "
        "its checkpoint; run fewer jobs at once if it recurs",
    ),
    (
        "Python worker exited unexpectedly",
        "a Spark Python worker died (out of memory, or killed): run the same command again, "
        "it resumes from its checkpoint",
    ),
)


_KAPPA_ERROR = re.compile(
    r"(?:^|Exception: |Error: )kappaplus\.core\.errors\.\w+: (?P<message>.+)$", re.MULTILINE
)
"""A kappaplus error raised in a Python worker or in ``foreachBatch``: Spark passes on its
traceback; the error's own message (it names the option, table or file) is the line to show.
The JVM reader's errors carry the same prefix inside a Java exception's message (``...
IllegalStateException: kappaplus.core.errors.DataError: ...``)."""


_METASTORE_DOWN = "Could not connect to meta store"
"""Hive's client gave up reaching the metastore server (after the retries of
:data:`kappaplus.session.METASTORE_RETRIES`)."""


_TRACEBACK = "Traceback (most recent call last):"


def python_raised(text: str) -> str | None:
    r"""The exception line of the last Python traceback in ``text`` (a Python data source or
    UDF failed in a worker and Spark passed its traceback on); None without one.

    >>> python_raised("Failed when ... perform latestOffset: Traceback (most recent call last):\n"
    ...               '  File "x.py", line 3, in latestOffset\n'
    ...               "    raise KafkaException(e)\n"
    ...               "cimpl.KafkaException: KafkaError{code=_TIMED_OUT}\n"
    ...               "\tat org.apache.spark.X(X.scala:1)")
    'cimpl.KafkaException: KafkaError{code=_TIMED_OUT}'
    """
    start = text.rfind(_TRACEBACK)
    if start < 0:
        return None
    for line in text[start + len(_TRACEBACK) :].splitlines():
        if line.strip() and not line[0].isspace():
            return line.strip()  # explain() shortens the line it shows
    return None


def metastore_uri(spark: Any) -> str | None:
    """The metastore server a session uses (``hive.metastore.uris``); None: embedded."""
    try:
        uri = spark.sparkContext.getConf().get("spark.hadoop.hive.metastore.uris")
    except Exception:  # noqa: BLE001 - only used to word an error
        return None
    return str(uri) if uri else None


def explain(text: str, *, metastore_uri: str | None = None) -> str:
    """One line saying what failed: a kappaplus error raised inside Spark as its own message,
    a known cause with its way out, else the first line. ``metastore_uri``: the session's
    metastore server, named when it could not be reached."""
    found = _KAPPA_ERROR.findall(str(text))
    if found:
        return found[-1].strip()
    if _METASTORE_DOWN in text:
        where = f"at {metastore_uri} " if metastore_uri else ""
        return (
            f"the Hive metastore {where}cannot be reached: check that it runs ('kappa "
            "metastore status'; 'kappa up' starts it), then run the same command again, it "
            "resumes from its checkpoint"
        )
    for needle, message in _KNOWN:
        if needle in text:
            return message
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    first = lines[0] if lines else str(text)
    raised = python_raised(str(text))
    if raised is not None:
        # Spark's message ends its first line with "Traceback (most recent call last):"
        first = f"{first.split(_TRACEBACK)[0].strip()} {raised}".strip()
    if len(first) > 400:
        first = first[:400] + "..."
    return f"{first} (run with -v for the stack trace)" if len(lines) > 1 else first


class CheckpointError(StateError):
    """A checkpoint file is damaged or not a Spark checkpoint file.

    ``uncommitted``: the file is the plan of a batch that never committed (``offsets/N``
    with no ``commits/N``). Spark writes that plan before the batch runs, so no sink has
    committed it; removing the file (and its ``.crc``) makes Spark plan that batch again
    from the last commit, which recovers exactly. Starting over (``--fresh``) would not:
    the targets already hold the committed batches and refuse a second copy."""

    def __init__(
        self, file: Path, problem: str, directory: Path, *, uncommitted: bool = False
    ) -> None:
        self.file = file
        self.problem = problem
        super().__init__()
        if uncommitted:
            crc = file.parent / f".{file.name}.crc"
            self.args = (
                f"checkpoint file {file} is {problem}; its batch never committed: remove it "
                f"and its checksum (rm {file} {crc}) and run the same command again, it "
                "plans that batch again from the last commit",
            )
        else:
            self.args = (
                f"checkpoint file {file} is {problem}: restore it from a backup, or remove "
                f"the checkpoint {directory} (or pass --fresh) to start that query over",
            )

    def __str__(self) -> str:
        return str(self.args[0])


def _latest(directory: Path) -> Path | None:
    if not directory.is_dir():
        return None
    numbered = [p for p in directory.iterdir() if p.name.isdigit()]
    return max(numbered, key=lambda p: int(p.name)) if numbered else None


def _check_log_file(
    file: Path, query_dir: Path, *, json_lines_from: int, uncommitted: bool = False
) -> None:
    try:
        lines = file.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(
            file, f"unreadable ({exc})", query_dir, uncommitted=uncommitted
        ) from None
    if not lines or not lines[0].startswith("v"):
        raise CheckpointError(
            file, "empty or truncated (no version line)", query_dir, uncommitted=uncommitted
        )
    for number, line in enumerate(lines[json_lines_from:], start=json_lines_from + 1):
        if line.strip() in ("", "-"):
            continue
        try:
            json.loads(line)
        except ValueError:
            raise CheckpointError(
                file,
                f"truncated or corrupt (line {number} is not JSON)",
                query_dir,
                uncommitted=uncommitted,
            ) from None


def check_checkpoint_files(run_dir: Path) -> None:
    """Check the files Spark reads first when it resumes each query checkpoint under
    ``run_dir`` (``metadata``, the latest ``offsets/N`` and ``commits/N``), before Spark
    starts: a damaged one is a :class:`CheckpointError` naming the file and the way out
    instead of a Jackson ``Unexpected end-of-input`` naming none."""
    if not run_dir.is_dir():
        return
    for query_dir in sorted(p for p in run_dir.iterdir() if p.is_dir()):
        metadata = query_dir / "metadata"
        if metadata.is_file():
            try:
                json.loads(metadata.read_text().splitlines()[0])
            except (OSError, ValueError, IndexError, UnicodeDecodeError):
                raise CheckpointError(metadata, "truncated or corrupt", query_dir) from None
        offsets = _latest(query_dir / "offsets")
        commits = _latest(query_dir / "commits")
        if offsets is not None:
            committed = commits is not None and int(commits.name) >= int(offsets.name)
            _check_log_file(offsets, query_dir, json_lines_from=1, uncommitted=not committed)
        if commits is not None:
            _check_log_file(commits, query_dir, json_lines_from=1)
