"""The shared layer: what every other part of kappaplus uses, importing nothing above it.

- :mod:`.errors`: the one :class:`~kappaplus.core.errors.KappaError` tree and exit codes;
- :mod:`.options`: typed, validated option models with Spark's option names as aliases;
- :mod:`.timeutil`, :mod:`.event_time`: timestamps, durations, the watermark rule, bounds;
- :mod:`.modes`: the three run modes; :mod:`.late_rules`: how late a row may be;
- :mod:`.secrets`, :mod:`.kafka_conf`: credentials and Kafka client settings;
- :mod:`.settings`, :mod:`.procs`, :mod:`.draining`, :mod:`.jvm`: the state directory,
  processes, stopping a source cleanly, the JVM's output;
- :mod:`.table`: filesystem and catalog helpers shared by the lake connectors.

The import contract (``tests/unit/test_import_contracts.py``) keeps it below everything.
"""
