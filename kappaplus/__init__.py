"""kappaplus: the Kappa+ architecture on PySpark.

One streaming job codebase runs against Kafka in production and, unchanged, backfills
history by reading a Hive table as an unbounded stream, one event-time slice per trigger.
"""

from kappaplus.errors import KappaError

__version__ = "0.1.0"
__all__ = ["KappaError", "__version__"]
