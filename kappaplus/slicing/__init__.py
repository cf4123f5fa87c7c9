"""The slicing core: event-time slices planned from file statistics, whatever the lake.

A table is seen as "data files with per-file (per row group where the format gives it)
event-time min/max, row counts and bytes, and the event-time range each file admits"
(:mod:`~kappaplus.slicing.files`), produced by a file lister per format (Hive partitions in
:mod:`kappaplus.connectors.hive.planner`, Iceberg manifests in
:mod:`kappaplus.connectors.iceberg.lister`). From it the planner
(:class:`~kappaplus.slicing.planner.SlicePlanner`)
picks bounded ``[lo, hi)`` slices in event-time order, sized from the statistics
(:mod:`~kappaplus.slicing.sizing`, :mod:`~kappaplus.slicing.pacing`), and stores each
slice's exact files in a content-addressed manifest (:mod:`~kappaplus.slicing.manifest`)
named by its offset (:mod:`~kappaplus.slicing.offsets`), so a replay reads the same slices.

No Spark, no connector, no runtime here (``tests/unit/test_import_contracts.py``).
"""
