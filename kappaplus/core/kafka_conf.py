"""Kafka client settings shared by the ``kappa_kafka`` source and sink.

Both take Spark-style options (strings, ``kafka.``-prefixed client settings; the other
options are declared on their option objects, :mod:`kappaplus.core.options`); this module is what
they share, so that neither imports the other.

>>> client_conf({"kafka.bootstrap.servers": "h:9092", "subscribe": "a"})
{'bootstrap.servers': 'h:9092'}
"""

from __future__ import annotations

from collections.abc import Mapping

from kappaplus.core.errors import ConfigError
from kappaplus.core.secrets import MASK, is_secret

JAVA_ONLY_SETTINGS: dict[str, str] = {
    "sasl.jaas.config": (
        "librdkafka has no JAAS; use kafka.sasl.mechanism, kafka.sasl.username and "
        "kafka.sasl.password (or kafka.sasl.oauthbearer.*)"
    ),
    "ssl.truststore.location": "librdkafka reads no Java truststore; use kafka.ssl.ca.location",
    "ssl.truststore.password": "librdkafka reads no Java truststore; use kafka.ssl.ca.location",
    "ssl.truststore.type": "librdkafka reads no Java truststore; use kafka.ssl.ca.location",
    "ssl.keystore.key": "use kafka.ssl.key.pem (and kafka.ssl.certificate.pem)",
    "ssl.keystore.type": "librdkafka reads PKCS#12 keystores only (kafka.ssl.keystore.location)",
}
"""Kafka Java client settings librdkafka does not have, with the librdkafka way to say them.
Refused before any client starts (librdkafka would refuse them later, less clearly)."""


def check_client_setting(name: str, value: object) -> None:
    """Raise :class:`ConfigError` for a Java-only client setting ``name`` (value masked when
    secret)."""
    way_out = JAVA_ONLY_SETTINGS.get(name.lower().removeprefix("kafka."))
    if way_out is not None:
        raise ConfigError(name, MASK if is_secret(name) else value, way_out)


def client_conf(
    options: Mapping[str, str], *, forbidden: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The ``kafka.*`` options without their prefix, for the confluent-kafka client."""
    conf: dict[str, str] = {}
    for key, value in options.items():
        if not key.lower().startswith("kafka."):
            continue
        name = key[len("kafka.") :]
        check_client_setting(key, value)
        if forbidden and name.lower() in forbidden:
            raise ConfigError(key, MASK if is_secret(name) else value, forbidden[name.lower()])
        conf[name] = value
    if not conf.get("bootstrap.servers", "").strip():
        raise ConfigError(
            "kafka.bootstrap.servers",
            conf.get("bootstrap.servers"),
            "required: a comma-separated list of host:port",
        )
    return conf
