"""Completeness audit: row counts per event-time bucket at every stage of a pipeline.

Like Uber's Chaperone, every stage counts the rows it handled per tumbling bucket of event
time (10 minutes by default) and an auditor compares the stages bucket by bucket:

====================  =========================================================  ==========
stage                 what is counted                                            ``io``
====================  =========================================================  ==========
``kafka``             Kafka records of an input (stream mode, archiver)          ``read``,
                                                                                 ``decoded``,
                                                                                 ``dead``
``lake``              rows the Hive source delivered (backfill)                  ``delivered``
``job``               rows the job received per input (every mode)               ``input``
``late``              rows the watermark dropped (per batch, Spark's count)      ``dropped``
``late_kept``         input rows the watermark dropped and the output kept       ``kept``
                      (``[outputs.<o>.late]``; rows, not Spark's groups)
``output``            rows an output query wrote (``archive`` for the archiver)  ``written``
====================  =========================================================  ==========

The counts ride on the micro-batches the queries already run: each stage is a
``DataFrame.observe`` of an exact per-bucket histogram (:mod:`kappaplus.audit.counts`), so
no stage reads the data a second time. The runtime writes each query's counts per
micro-batch into the audit table (:mod:`kappaplus.audit.table`), keyed by query name and
batch id: a replayed micro-batch replaces its earlier counts instead of adding to them.
``kappa audit`` (:mod:`kappaplus.audit.report`) compares the stages; ``kappa reconcile``
(:mod:`kappaplus.audit.reconcile`) compares a job's production and backfill outputs.
"""
