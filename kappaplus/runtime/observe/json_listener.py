"""A ``StreamingQueryListener`` handed each progress as Spark's JSON text, in one JVM call.

PySpark gives a Python listener every progress as a ``QueryProgressEvent`` built field by
field (``fromJObject``): a Py4J round trip for each field of the progress, of each source,
of the sink and of each state operator. The run's listeners (:mod:`.progress_events`,
:mod:`.metrics`) read the progress as JSON only, so the conversion is waste, and it runs on
the driver's Python process, beside the lake source's slice planner, on the cores the
micro-batches use. :class:`JsonProgressListener` asks the JVM for the progress's JSON
once; its events have ``event.progress.json`` as Spark's own events do, and nothing else.

>>> event = JsonProgressEvent('{"batchId": 3}')
>>> event.progress.json
'{"batchId": 3}'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import JStreamingQueryListener

if TYPE_CHECKING:
    from py4j.java_gateway import JavaObject


class JsonProgress:
    """A progress as Spark's JSON text (``StreamingQueryProgress.json``)."""

    __slots__ = ("json",)

    def __init__(self, text: str) -> None:
        self.json = text


class JsonProgressEvent:
    """A ``QueryProgressEvent`` whose progress is its JSON text only."""

    __slots__ = ("progress",)

    def __init__(self, text: str) -> None:
        self.progress = JsonProgress(text)


class _JsonProgressBridge(JStreamingQueryListener):
    """PySpark's bridge, but for progress events: the JSON text in one call."""

    def onQueryProgress(self, jevent: JavaObject) -> None:  # noqa: N802 - Spark's name
        event: Any = JsonProgressEvent(jevent.progress().json())  # read as Spark's event
        self.pylistener.onQueryProgress(event)


class JsonProgressListener(StreamingQueryListener):
    """A listener whose ``onQueryProgress`` gets a :class:`JsonProgressEvent` (read
    ``json.loads(event.progress.json)``); the other events are PySpark's."""

    @property
    def _jlistener(self) -> Any:  # PySpark's hook: what addListener registers in the JVM
        if not hasattr(self, "_jlistenerobj"):
            from pyspark import SparkContext

            jvm = SparkContext._jvm
            assert jvm is not None, "a listener is registered on a running session"
            wrapper = jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper
            self._jlistenerobj = wrapper(_JsonProgressBridge(self))
        return self._jlistenerobj
