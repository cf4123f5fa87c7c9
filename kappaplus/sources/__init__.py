"""The reading halves of the Spark Python data sources: Hive event-time slices, Kafka, and the
hybrid lambda source. :mod:`kappaplus.connectors` registers them."""
