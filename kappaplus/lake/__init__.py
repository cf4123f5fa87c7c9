"""Tables users already have: register an existing Parquet/ORC directory in the catalog the
runs use, and describe what a backfill will see (:mod:`kappaplus.lake.register`,
:mod:`kappaplus.lake.describe`; the ``kappa table`` commands in :mod:`kappaplus.cli.table`)."""
