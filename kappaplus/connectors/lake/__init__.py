"""The lake layer every lake format shares: a table's listed data files read as an
event-time-ordered stream, one slice per micro-batch.

- :mod:`~kappaplus.connectors.lake.options`: the source options, parsed once;
- :mod:`~kappaplus.connectors.lake.source`: the Python data source and stream reader a
  format subclasses with its file lister and ``read_file``;
- :mod:`~kappaplus.connectors.lake.delivery`: the slice filter, the conforming of columns
  and the routing of rows no slice can place (executor side);
- :mod:`~kappaplus.connectors.lake.jvm_reader`: the JVM or Python reader choice, and
  :mod:`~kappaplus.connectors.lake.plan_service` / ``planner_server``, the planner the JVM
  reader asks;
- :mod:`~kappaplus.connectors.lake.stream`: :func:`open_lake_stream`, a format given as
  data (:class:`LakeFormat`).

A format package (``hive``, ``iceberg``, ``delta``) imports this layer and never another
format; this layer imports no format.
"""

from kappaplus.connectors.lake.jvm_reader import CountDelivered, LakeStream, lake_file_uri
from kappaplus.connectors.lake.options import LakeSourceOptions, range_options
from kappaplus.connectors.lake.source import ListedFilesDataSource, ListedFilesStreamReader
from kappaplus.connectors.lake.stream import LakeFormat, open_lake_stream

__all__ = [
    "CountDelivered",
    "LakeFormat",
    "LakeSourceOptions",
    "LakeStream",
    "ListedFilesDataSource",
    "ListedFilesStreamReader",
    "lake_file_uri",
    "open_lake_stream",
    "range_options",
]
