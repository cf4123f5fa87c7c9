"""Codecs of Kafka record values: Avro writer schemas from a Schema Registry (:mod:`.registry`).

The JSON and Avro decoders and the DataFrame API are in :mod:`kappaplus.decode`.
"""
