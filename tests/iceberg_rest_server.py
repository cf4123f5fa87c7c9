"""A small Iceberg REST catalog server for the tests: real HTTP on loopback, the endpoints of
the REST spec that pyiceberg's ``RestCatalog`` calls, backed by a pyiceberg ``SqlCatalog``
(SQLite file, local warehouse).

Bodies are parsed and built with pyiceberg's own models (``CreateTableRequest``,
``CommitTableRequest``, ``TableResponse`` = the spec's LoadTableResult, ...), and a commit
(``POST /v1/namespaces/{ns}/tables/{t}`` with requirements + updates) is delegated to
``SqlCatalog.commit_table``, so the requirements are checked and the metadata written by the
same code a SQL catalog uses; a failed requirement is the spec's 409. No PyPI package serves
this in pure Python without a control plane of its own (searched: only MCP servers, CLIs and
a full lakehouse control plane), hence this file.

Endpoints: GET /v1/config; GET/POST /v1/namespaces; GET/HEAD/DELETE
/v1/namespaces/{ns}; GET/POST /v1/namespaces/{ns}/tables; GET/HEAD/POST/DELETE
/v1/namespaces/{ns}/tables/{t}; POST /v1/namespaces/{ns}/register. Errors are the spec's
ErrorModel (``{"error": {"message", "type", "code"}}``). Every request is counted by
method and endpoint (``RestCatalogServer.requests``) so a test can show which calls went
through HTTP.

>>> with RestCatalogServer(tmp_path) as server:        # doctest: +SKIP
...     props = server.catalog_props()                 # {"type": "rest", "uri": ...}
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

SEPARATOR = "\x1f"  # the spec's default namespace separator (pyiceberg's too)


class _HttpError(Exception):
    def __init__(self, code: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.code, self.kind, self.message = code, kind, message


class RestCatalogServer:
    """The server on ``127.0.0.1`` (a free port), serving from a thread until ``stop``."""

    def __init__(self, root: Path, catalog_name: str = "rest-backend") -> None:
        from pyiceberg.catalog.sql import SqlCatalog

        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.warehouse = f"file://{root / 'warehouse'}"
        self.backend = SqlCatalog(
            catalog_name, uri=f"sqlite:///{root / 'backend.db'}", warehouse=self.warehouse
        )
        self.requests: Counter[str] = Counter()
        self._lock = threading.Lock()  # one catalog operation at a time, like a DB txn
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def uri(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def catalog_props(self) -> dict[str, str]:
        """The properties of a pyiceberg RestCatalog (a kappa ``catalog = {...}``)."""
        return {"type": "rest", "uri": self.uri, "warehouse": self.warehouse}

    def start(self) -> RestCatalogServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> RestCatalogServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the endpoints -------------------------------------------------------------------

    def handle(self, method: str, path: str, query: dict[str, list[str]], body: bytes) -> Any:
        """The response body (a pydantic model, a dict, or None for 204) of one request."""
        from pyiceberg.exceptions import (
            CommitFailedException,
            NamespaceAlreadyExistsError,
            NamespaceNotEmptyError,
            NoSuchNamespaceError,
            NoSuchTableError,
            TableAlreadyExistsError,
        )

        parts = [unquote(p) for p in path.strip("/").split("/")]
        if parts[:1] != ["v1"]:
            raise _HttpError(404, "NotFoundException", f"no such endpoint: {path}")
        parts = parts[1:]
        route = self._route(method, parts)
        self.requests[route] += 1
        try:
            with self._lock:
                return self._dispatch(route, parts, query, body)
        except (NoSuchTableError, NoSuchNamespaceError) as exc:
            kind = type(exc).__name__.replace("Error", "Exception")
            raise _HttpError(404, kind, str(exc)) from exc
        except (TableAlreadyExistsError, NamespaceAlreadyExistsError) as exc:
            raise _HttpError(409, "AlreadyExistsException", str(exc)) from exc
        except NamespaceNotEmptyError as exc:
            raise _HttpError(409, "NamespaceNotEmptyException", str(exc)) from exc
        except CommitFailedException as exc:
            raise _HttpError(409, "CommitFailedException", str(exc)) from exc

    @staticmethod
    def _route(method: str, parts: list[str]) -> str:
        shape = ["namespaces", "{namespace}", "tables", "{table}"]
        if parts == ["config"]:
            return f"{method} /v1/config"
        if parts[:1] == ["namespaces"] and len(parts) <= 4:
            # literal segments stay (tables, register), parameters get their names
            named = [p if i % 2 == 0 else shape[i] for i, p in enumerate(parts)]
            return f"{method} /v1/" + "/".join(named)
        raise _HttpError(404, "NotFoundException", f"no such endpoint: /v1/{'/'.join(parts)}")

    def _dispatch(
        self, route: str, parts: list[str], query: dict[str, list[str]], body: bytes
    ) -> Any:
        from pyiceberg.catalog.rest import (
            CreateTableRequest,
            ListNamespaceResponse,
            ListTableResponseEntry,
            ListTablesResponse,
            NamespaceResponse,
            RegisterTableRequest,
        )
        from pyiceberg.table import CommitTableRequest

        sql = self.backend
        namespace = tuple(parts[1].split(SEPARATOR)) if len(parts) > 1 else ()
        method, endpoint = route.split(" ", 1)
        if endpoint == "/v1/config":
            return self._config()
        if endpoint == "/v1/namespaces":
            if method == "GET":
                parent = query.get("parent", [""])[0]
                found = sql.list_namespaces(tuple(parent.split(SEPARATOR)) if parent else ())
                return ListNamespaceResponse(namespaces=found)
            if method == "POST":
                request = json.loads(body)
                sql.create_namespace(tuple(request["namespace"]), request.get("properties", {}))
                return NamespaceResponse(
                    namespace=tuple(request["namespace"]), properties=request.get("properties")
                )
        if endpoint == "/v1/namespaces/{namespace}":
            if method in ("GET", "HEAD"):
                properties = sql.load_namespace_properties(namespace)
                return (
                    None
                    if method == "HEAD"
                    else NamespaceResponse(namespace=namespace, properties=properties)
                )
            if method == "DELETE":
                sql.drop_namespace(namespace)
                return None
        if endpoint == "/v1/namespaces/{namespace}/tables":
            if method == "GET":
                entries = [
                    ListTableResponseEntry(namespace=ident[:-1], name=ident[-1])
                    for ident in sql.list_tables(namespace)
                ]
                return ListTablesResponse(identifiers=entries)
            if method == "POST":
                # optional fields are left out of the body (exclude_none), required in the model
                optional = {"location": None, "partition-spec": None, "write-order": None}
                create = CreateTableRequest.model_validate({**optional, **json.loads(body)})
                if create.stage_create:
                    raise _HttpError(400, "BadRequestException", "stage-create is not served")
                table = sql.create_table(
                    namespace + (create.name,),
                    schema=create.table_schema,
                    location=create.location,
                    partition_spec=create.partition_spec,
                    sort_order=create.write_order,
                    properties=create.properties,
                )
                return self._load_result(table)
        if endpoint == "/v1/namespaces/{namespace}/register" and method == "POST":
            register = RegisterTableRequest.model_validate_json(body)
            table = sql.register_table(namespace + (register.name,), register.metadata_location)
            return self._load_result(table)
        if endpoint == "/v1/namespaces/{namespace}/tables/{table}":
            identifier = namespace + (parts[3],)
            if method in ("GET", "HEAD"):
                table = sql.load_table(identifier)
                return None if method == "HEAD" else self._load_result(table)
            if method == "POST":
                commit = CommitTableRequest.model_validate_json(body)
                table = sql.load_table(identifier)
                return sql.commit_table(table, commit.requirements, commit.updates)
            if method == "DELETE":
                sql.drop_table(identifier)
                return None
        raise _HttpError(405, "BadRequestException", f"{route} is not served")

    @staticmethod
    def _config() -> dict[str, Any]:
        from pyiceberg.catalog.rest import Capability

        served = [
            Capability.V1_LIST_NAMESPACES,
            Capability.V1_LOAD_NAMESPACE,
            Capability.V1_NAMESPACE_EXISTS,
            Capability.V1_CREATE_NAMESPACE,
            Capability.V1_DELETE_NAMESPACE,
            Capability.V1_LIST_TABLES,
            Capability.V1_LOAD_TABLE,
            Capability.V1_TABLE_EXISTS,
            Capability.V1_CREATE_TABLE,
            Capability.V1_UPDATE_TABLE,
            Capability.V1_DELETE_TABLE,
            Capability.V1_REGISTER_TABLE,
        ]
        return {"defaults": {}, "overrides": {}, "endpoints": [str(e) for e in served]}

    @staticmethod
    def _load_result(table: Any) -> Any:
        from pyiceberg.catalog.rest import TableResponse

        return TableResponse(
            metadata_location=table.metadata_location, metadata=table.metadata, config={}
        )

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                url = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                try:
                    result = server.handle(self.command, url.path, parse_qs(url.query), body)
                except _HttpError as exc:
                    error = {"message": exc.message, "type": exc.kind, "code": exc.code}
                    self._reply(exc.code, json.dumps({"error": error}).encode())
                    return
                except Exception as exc:  # a server-side failure: the spec's 500
                    error = {"message": repr(exc), "type": type(exc).__name__, "code": 500}
                    self._reply(500, json.dumps({"error": error}).encode())
                    return
                if result is None:
                    self._reply(204, b"")
                elif isinstance(result, dict):
                    self._reply(200, json.dumps(result).encode())
                else:
                    self._reply(200, result.model_dump_json().encode())

            def _reply(self, code: int, payload: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD" and payload:
                    self.wfile.write(payload)

            do_GET = do_POST = do_HEAD = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

        return Handler
