"""Tables users already have: register them in the catalog the runs use, and describe what
a backfill will see (:mod:`kappaplus.table.register`, :mod:`kappaplus.table.describe`)."""
