"""Avro writer schemas by Confluent schema id, from a Schema Registry.

A value in the Confluent wire format is ``0x00``, a 4-byte schema id, then Avro binary written
with that id's schema: the *writer* schema. With a registry configured, the decoder reads each
value with its writer schema and resolves it to the job's declared schema (the *reader*
schema, Avro's schema resolution), so a producer's compatible change (a field added or
removed, with defaults) keeps decoding. Each id is fetched once per process
(``GET /schemas/ids/{id}`` through confluent-kafka's ``SchemaRegistryClient``).

An id the registry does not know is the record's fault (dead letter, with the id); a registry
that cannot be reached is not, and fails the query (:class:`~kappaplus.core.errors.DataError`).
"""

from __future__ import annotations

import json
from typing import Any

from kappaplus.core.errors import DataError
from kappaplus.core.secrets import mask_url


class UnknownSchemaId(DataError):
    """The registry has no (Avro) schema under this id: the record goes to the dead letters."""


class WriterSchemas:
    """Parsed writer schemas by id, fetched from the registry at ``url`` once each."""

    def __init__(self, url: str, conf: dict[str, str] | None = None) -> None:
        self.url = url
        self.conf = dict(conf or {})
        self._client: Any = None
        self._cache: dict[int, Any] = {}

    def __repr__(self) -> str:
        return f"WriterSchemas({mask_url(self.url)!r})"

    def _registry(self) -> Any:
        if self._client is None:
            from confluent_kafka.schema_registry import SchemaRegistryClient

            self._client = SchemaRegistryClient({"url": self.url, **self.conf})
        return self._client

    def get(self, schema_id: int) -> Any:
        """The parsed Avro schema registered under ``schema_id``."""
        cached = self._cache.get(schema_id)
        if cached is not None:
            return cached
        import fastavro
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        where = mask_url(self.url)
        try:
            schema = self._registry().get_schema(schema_id)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                raise UnknownSchemaId(
                    f"Confluent schema id {schema_id} is not in the Schema Registry {where}"
                ) from None
            raise DataError(
                f"Schema Registry {where}: schema id {schema_id}: {exc}; check "
                "schema_registry_url and that the registry is up"
            ) from None
        except Exception as exc:  # noqa: BLE001 - connection errors of the HTTP client
            raise DataError(
                f"Schema Registry {where} unreachable for schema id {schema_id}: "
                f"{mask_url(str(exc))}; check schema_registry_url"
            ) from None
        kind = (getattr(schema, "schema_type", None) or "AVRO").upper()
        if kind != "AVRO":
            raise UnknownSchemaId(f"Confluent schema id {schema_id} is a {kind} schema, not Avro")
        try:
            parsed = fastavro.parse_schema(json.loads(schema.schema_str))
        except Exception as exc:  # noqa: BLE001 - any malformed schema text
            raise UnknownSchemaId(
                f"Confluent schema id {schema_id}: the registry's schema is not valid Avro: {exc}"
            ) from None
        self._cache[schema_id] = parsed
        return parsed
