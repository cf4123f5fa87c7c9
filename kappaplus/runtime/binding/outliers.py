"""A watermark one outlier cannot move: ``max_ahead`` of an input's event-time bounds.

Spark's watermark follows the largest event time seen, less the delay. One plausible record
dated three days ahead of its peers (inside ``max_future``, which is measured against the
clock) moves it three days ahead: most later rows are late. With
``[inputs.<name>.event_time_bounds] max_ahead = "1 day"`` a decoded Kafka record whose event
time is more than that ahead of its *peers* -- the median event time of the records read
with it from the same Kafka partition in the same micro-batch (a robust estimate: one
outlier does not move a median) -- fails like an out-of-bounds record: it goes to the
input's dead letters with its reason (``event time ... is more than max_ahead = 1 day ahead
of its peers in partition t-0 (median ...)``), is counted as ``out_of_bounds`` and never
reaches the watermark.

The rule itself is :func:`kappaplus.core.event_time.far_ahead_reasons` (pure Arrow, shared
with a bootstrap's Kafka phase, :mod:`kappaplus.connectors.hybrid.reader`). In a stream, the
check runs in the output queries' decoding (:func:`mark_far_ahead`, a ``mapInArrow``
over each task: a task reads one offset range of one partition). The peers of a record are
exactly the records of its offset range, so a replayed micro-batch judges every record the
same way. A record has peers only if its range has others: a partition that delivers one
record per batch is not judged (the median is the record itself), nor records whose event
time is null or that already failed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from kappaplus.core.event_time import PEERS, far_ahead_reasons

__all__ = ["PEERS", "far_ahead_reasons", "mark_far_ahead"]

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from kappaplus.core.timeutil import Duration


def mark_far_ahead(decoded: DataFrame, column: str, max_ahead: Duration | None) -> DataFrame:
    """A :func:`~kappaplus.codecs.decode_kafka` result where a decoded record more than
    ``max_ahead`` ahead of its partition's median in its task has failed (its reason in the
    error column), as :func:`~kappaplus.runtime.binding.bounds.mark_out_of_bounds` fails an
    out-of-bounds record; unchanged when ``max_ahead`` is None."""
    from pyspark.sql import functions as F

    from kappaplus.codecs import ERROR_COL
    from kappaplus.codecs.schema import RECORD_COL

    if max_ahead is None or column not in decoded.columns:
        return decoded
    schema = decoded.schema
    metadata = schema[ERROR_COL].metadata
    names = schema.names

    def judge(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        import pyarrow.compute as pc

        held = list(batches)
        if not held:
            return
        table = pa.Table.from_batches(held)
        errors = table.column(ERROR_COL).combine_chunks()
        record = table.column(RECORD_COL).combine_chunks()
        reasons = far_ahead_reasons(
            table.column(column).combine_chunks(),
            record.field("partition"),
            pc.is_valid(errors),
            column,
            max_ahead,
        )
        marked = pc.coalesce(errors, pa.array(reasons, errors.type))
        index = names.index(ERROR_COL)
        yield from table.set_column(index, table.field(index), marked).to_batches()

    judged = decoded.mapInArrow(judge, schema)
    error = F.col(ERROR_COL).alias(ERROR_COL, metadata=metadata)
    return judged.select(*[error if c == ERROR_COL else F.col(f"`{c}`") for c in names])
