"""Binding: a job's logical inputs and outputs made into streaming DataFrames and sinks for
one run mode: which source reads an input (Kafka, a lake table, the hybrid source), how its
fields map to the job's columns, its event-time bounds, and where each output writes."""
