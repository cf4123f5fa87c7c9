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


class RegistrySchemas:
    """A Schema Registry client for ``url`` and a cache of what it was asked, by id: the
    part the Avro and Protobuf writer schemas share (the format's ``get`` parses)."""

    def __init__(self, url: str, conf: dict[str, str] | None = None) -> None:
        self.url = url
        self.conf = dict(conf or {})
        self._client: Any = None
        self._cache: dict[int, Any] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({mask_url(self.url)!r})"

    def registry(self) -> Any:
        if self._client is None:
            from confluent_kafka.schema_registry import SchemaRegistryClient

            self._client = SchemaRegistryClient({"url": self.url, **self.conf})
        return self._client

    def _fetch(self, what: str, call: Any) -> Any:
        """``call()`` to the registry: a 404 is :class:`UnknownSchemaId` (the record's
        fault), any other failure a :class:`DataError` naming ``what`` and the registry."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        where = mask_url(self.url)
        try:
            return call()
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                raise UnknownSchemaId(f"{what} is not in the Schema Registry {where}") from None
            raise DataError(
                f"Schema Registry {where}: {what}: {exc}; check schema_registry_url and that "
                "the registry is up"
            ) from None
        except Exception as exc:  # noqa: BLE001 - connection errors of the HTTP client
            raise DataError(
                f"Schema Registry {where} unreachable for {what}: {mask_url(str(exc))}; "
                "check schema_registry_url"
            ) from None


class WriterSchemas(RegistrySchemas):
    """Parsed Avro writer schemas by id, fetched from the registry at ``url`` once each."""

    def get(self, schema_id: int) -> Any:
        """The parsed Avro schema registered under ``schema_id``."""
        cached = self._cache.get(schema_id)
        if cached is not None:
            return cached
        import fastavro

        client = self.registry()
        schema = self._fetch(
            f"Confluent schema id {schema_id}", lambda: client.get_schema(schema_id)
        )
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
