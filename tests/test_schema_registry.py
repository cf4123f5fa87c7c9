"""Avro with writer schemas from a Schema Registry: a producer's compatible schema change
keeps decoding. The registry is a minimal HTTP endpoint started here, serving
``/schemas/ids/{id}`` as Confluent's does; the decoder is the one the jobs use."""

from __future__ import annotations

import io
import json
import struct
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import fastavro
import pytest

from kappaplus.codecs import DecoderSpec, decode_values
from kappaplus.core.errors import ConfigError, DataError

READER = {  # the job's declared schema
    "type": "record",
    "name": "Trip",
    "namespace": "kappa.test",
    "fields": [
        {"name": "rider_id", "type": "string"},
        {"name": "fare", "type": "double"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "city", "type": "string", "default": "unknown"},
    ],
}
V1 = {**READER, "fields": READER["fields"][:3]}  # before 'city' existed
V2 = {  # a later producer: 'city' added, 'app' added (the job does not know it), reordered
    **READER,
    "fields": [
        {"name": "app", "type": "string", "default": ""},
        READER["fields"][2],
        READER["fields"][0],
        READER["fields"][3],
        READER["fields"][1],
    ],
}
SCHEMAS = {1: V1, 2: V2, 3: READER}


@pytest.fixture()
def registry() -> Iterator[str]:
    """``http://127.0.0.1:<port>`` serving ``GET /schemas/ids/{id}``; 404 for other ids."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            parts = self.path.split("?")[0].strip("/").split("/")
            found = None
            if len(parts) == 3 and parts[:2] == ["schemas", "ids"] and parts[2].isdigit():
                found = SCHEMAS.get(int(parts[2]))
            if found is None:
                body = json.dumps({"error_code": 40403, "message": "Schema not found"})
                self.send_response(404)
            else:
                body = json.dumps({"schema": json.dumps(found)})
                self.send_response(200)
            data = body.encode()
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def framed(schema: dict[str, Any], schema_id: int, record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return b"\x00" + struct.pack(">I", schema_id) + out.getvalue()


T = datetime(2024, 3, 1, 12, 30, tzinfo=UTC)


def spec(tmp_path: Path, url: str | None) -> DecoderSpec:
    path = tmp_path / "trip.avsc"
    path.write_text(json.dumps(READER))
    return DecoderSpec(format="avro", avro_schema=path, event_time="ts", schema_registry_url=url)


def test_compatible_producer_change_keeps_decoding(registry: str, tmp_path: Path) -> None:
    values = [
        framed(V1, 1, {"rider_id": "a", "fare": 1.5, "ts": T}),
        framed(V2, 2, {"app": "ios-9", "ts": T, "rider_id": "b", "city": "Seoul", "fare": 2.0}),
        framed(READER, 3, {"rider_id": "c", "fare": 3.0, "ts": T, "city": "Oslo"}),
        framed(READER, 99, {"rider_id": "d", "fare": 4.0, "ts": T, "city": "Rome"}),
    ]
    got = decode_values(spec(tmp_path, registry), values)
    assert [(r["rider_id"], r["fare"], r["city"]) for r in got[:3]] == [  # type: ignore[index]
        ("a", 1.5, "unknown"),  # the reader's default for a field the writer lacked
        ("b", 2.0, "Seoul"),  # reordered, with a field the job does not know
        ("c", 3.0, "Oslo"),
    ]
    assert got[3] == f"Confluent schema id 99 is not in the Schema Registry {registry}"

    # without the registry every value is read with the job's schema: the evolved ones fail
    plain = decode_values(spec(tmp_path, None), values)
    assert isinstance(plain[1], str) and "Confluent schema id 2" in plain[1]
    assert not isinstance(plain[2], str)


def test_unreachable_registry_fails_the_query_not_the_record(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://reader:pw-123@127.0.0.1:{port}"
    value = framed(READER, 3, {"rider_id": "c", "fare": 3.0, "ts": T, "city": "Oslo"})
    with pytest.raises(DataError) as caught:
        decode_values(spec(tmp_path, url), [value])
    assert "unreachable" in str(caught.value) and "pw-123" not in str(caught.value)
    assert "pw-123" not in repr(spec(tmp_path, url))


def test_registry_only_for_avro_with_confluent_framing(tmp_path: Path) -> None:
    path = tmp_path / "trip.avsc"
    path.write_text(json.dumps(READER))
    with pytest.raises(ConfigError, match="schema_registry_url"):
        DecoderSpec(
            format="avro",
            avro_schema=path,
            event_time="ts",
            wire_format="plain",
            schema_registry_url="http://h:8081",
        )
