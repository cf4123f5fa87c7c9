"""The one list of secret settings, and masking of their values wherever kappaplus prints or
writes (reprs, logs, errors, run records, ``kappa status``).

A setting is secret when its name is, or ends with ``.`` plus, one of :data:`SECRET_SETTINGS`:
the settings librdkafka and the Kafka (Java) clients document as sensitive, the Schema Registry
client's credentials, and the Hadoop/Hive settings that carry passwords or keys. The prefixes
kappaplus and Spark put in front (``kafka.``, ``spark.kafka.``, ``spark.hadoop.``) therefore
change nothing. Names are compared case-insensitively. No guessing from words like ``token``:
a list that can be read is a list that can be checked.

>>> is_secret("kafka.sasl.password"), is_secret("kafka.sasl.mechanism")
(True, False)
>>> redact({"kafka.ssl.key.pem": "-----BEGIN", "topic": "rides"})
{'kafka.ssl.key.pem': '***', 'topic': 'rides'}
>>> mask_url("http://reader:s3cr3t@registry:8081/schemas")
'http://reader:***@registry:8081/schemas'
>>> Secret("s3cr3t")
Secret('***')
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

MASK = "***"

SECRET_SETTINGS: tuple[str, ...] = (
    # librdkafka (CONFIGURATION.md, properties marked sensitive)
    "sasl.password",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.config",
    "sasl.oauthbearer.assertion.private.key.passphrase",
    "sasl.oauthbearer.assertion.private.key.pem",
    "ssl.key.password",
    "ssl.key.pem",
    "ssl_key",
    "ssl.keystore.password",
    # Kafka Java clients (the names Spark's Kafka options use)
    "sasl.jaas.config",
    "ssl.keystore.key",
    "ssl.truststore.password",
    "sasl.login.callback.handler.secret",
    # Schema Registry clients
    "basic.auth.user.info",
    "bearer.auth.token",
    "bearer.auth.client.secret",
    # Hadoop / Hive (``spark.hadoop.*``)
    "javax.jdo.option.connectionpassword",
    "fs.s3a.secret.key",
    "fs.s3a.session.token",
    "fs.azure.account.key",
    "fs.gs.auth.service.account.private.key",
)
"""Settings whose values are secret, by their canonical (lower-case) name."""

_URL_USERINFO = re.compile(r"(?P<user>[^\s/@:'\",=]*):(?P<secret>[^\s/@'\",]+)@")
"""``user:password@`` with or without a scheme before it: URLs, and the entries of an address
list such as ``bootstrap_servers`` (``SASL_SSL://bob:pw@h1:9092,alice:pw@h2:9092``)."""


def is_secret(key: str) -> bool:
    """Whether the setting ``key`` (any prefix, any case) carries a secret value."""
    lowered = key.strip().lower()
    return any(lowered == name or lowered.endswith("." + name) for name in SECRET_SETTINGS)


def mask_url(text: str) -> str:
    """``text`` with the password of every ``[scheme://]user:password@host`` replaced by ``***``.

    >>> mask_url("SASL_SSL://bob:s3cret@host:9092,alice:pw@h2:9092")
    'SASL_SSL://bob:***@host:9092,alice:***@h2:9092'
    >>> mask_url("thrift://metastore:9083")
    'thrift://metastore:9083'
    """
    return _URL_USERINFO.sub(lambda m: f"{m['user']}:{MASK}@", text)


def redact(value: Any) -> Any:
    """A copy of ``value`` fit to print: secret settings' values masked at any depth, and the
    password of any URL masked in every string.

    Mappings and lists are copied; other values are returned as they are.
    """
    if isinstance(value, Secret):
        return MASK
    if isinstance(value, Mapping):
        return {
            key: (MASK if isinstance(key, str) and is_secret(key) else redact(item))
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return type(value)(redact(item) for item in value)
    if isinstance(value, str):
        return mask_url(value)
    return value


class Secret:
    """A secret string: masked in ``repr``, ``str`` and formatting; :meth:`reveal` gives the
    value to the one place that needs it (a client configuration)."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret itself."""
        return self._value

    def __repr__(self) -> str:
        return f"Secret({MASK!r})"

    def __str__(self) -> str:
        return MASK

    def __format__(self, spec: str) -> str:
        return MASK

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def reveal(value: Any) -> Any:
    """The plain value of a :class:`Secret`; any other value unchanged."""
    return value.reveal() if isinstance(value, Secret) else value


def secret_values(options: Mapping[str, Any]) -> list[str]:
    """The plain values of the secret settings in ``options`` (to scrub them from text)."""
    return [str(reveal(v)) for k, v in options.items() if is_secret(k) and reveal(v)]


def scrub(text: str, secrets: list[str]) -> str:
    """``text`` with every occurrence of each of ``secrets`` replaced by ``***`` and URL
    passwords masked (for messages from clients that echo their configuration)."""
    for secret in sorted(secrets, key=len, reverse=True):
        if secret:
            text = text.replace(secret, MASK)
    return mask_url(text)
