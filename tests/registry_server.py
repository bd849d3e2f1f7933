"""A small HTTP server speaking the Confluent Schema Registry REST API, for tests.

The only stand-in the tests use (no registry server can be installed here).
It implements the endpoints confluent-kafka's SchemaRegistryClient and TiCDC's
encoder call: GET /, GET /schemas/ids/{id}, POST /subjects/{s}/versions
(register), POST /subjects/{s} (lookup), GET /subjects, GET
/subjects/{s}/versions[/{v}|/latest]; optional basic auth (401 without
the right credentials); optional TLS (https, with a certificate such as
`testbed.tls.LocalCa.issue` makes); and fault injection (answer 503 for a
while, or stop listening and start again on the same port).
"""

from __future__ import annotations

import base64
import json
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], (ssl.SSLError, ConnectionError)):
            return  # a client refusing our certificate, or hanging up: its own error says so
        super().handle_error(request, client_address)


def _canonical(schema: str) -> str:
    return json.dumps(json.loads(schema), sort_keys=True, separators=(",", ":"))


class FakeSchemaRegistry:
    def __init__(self, user_info: str | None = None, tls: tuple[Path | str, Path | str] | None = None) -> None:
        self.user_info = user_info
        self.tls = tls  # (certificate, key) PEM files: serve https
        self.schemas: dict[int, str] = {}
        self.subjects: dict[str, list[int]] = {}
        self.requests: list[str] = []
        self.failures_left = 0  # answer 503 to this many requests
        self._by_canonical: dict[str, int] = {}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._port = 0

    # --- lifecycle ------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self._port}"

    def start(self) -> str:
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                registry._handle(self, "GET")

            def do_POST(self) -> None:
                registry._handle(self, "POST")

        self._server = _Server(("127.0.0.1", self._port), Handler)
        if self.tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*(str(part) for part in self.tls))
            # The handshake happens on the handler's first read, in its own thread.
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True, do_handshake_on_connect=False)
        self._port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self.url

    def stop(self) -> None:
        """Stop listening (clients see refused connections); `start` resumes on the same port."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # --- registry semantics --------------------------------------------------------

    def register(self, subject: str, schema: str) -> int:
        with self._lock:
            canonical = _canonical(schema)
            schema_id = self._by_canonical.get(canonical)
            if schema_id is None:
                schema_id = len(self.schemas) + 1
                self.schemas[schema_id] = schema
                self._by_canonical[canonical] = schema_id
            versions = self.subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
            return schema_id

    # --- HTTP ---------------------------------------------------------------------------

    def _reply(self, handler: BaseHTTPRequestHandler, status: int, body: object) -> None:
        payload = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    def _authorized(self, handler: BaseHTTPRequestHandler) -> bool:
        if self.user_info is None:
            return True
        expected = "Basic " + base64.b64encode(self.user_info.encode()).decode()
        return handler.headers.get("Authorization") == expected

    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        path = urlparse(handler.path).path  # clients add query strings we do not need
        self.requests.append(f"{method} {path}")
        body = b""
        if method == "POST":
            body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        with self._lock:
            failing = self.failures_left > 0
            if failing:
                self.failures_left -= 1
        if failing:
            return self._reply(handler, 503, {"error_code": 50003, "message": "temporarily unavailable"})
        if not self._authorized(handler):
            return self._reply(handler, 401, {"error_code": 401, "message": "Unauthorized"})
        parts = [unquote(p) for p in path.strip("/").split("/") if p]
        try:
            status, reply = self._route(method, parts, json.loads(body) if body else None)
        except (KeyError, ValueError, IndexError) as err:
            status, reply = 422, {"error_code": 42201, "message": f"invalid request: {err}"}
        self._reply(handler, status, reply)

    def _route(self, method: str, parts: list[str], body: dict | None) -> tuple[int, object]:
        if not parts:
            return 200, {}
        if method == "GET" and parts[:2] == ["schemas", "ids"] and len(parts) == 3:
            schema = self.schemas.get(int(parts[2]))
            if schema is None:
                return 404, {"error_code": 40403, "message": f"Schema {parts[2]} not found"}
            return 200, {"schema": schema}
        if parts[0] != "subjects":
            return 404, {"error_code": 404, "message": "Not found"}
        if len(parts) == 1:
            return 200, sorted(self.subjects)
        subject = parts[1]
        if method == "POST" and len(parts) == 3 and parts[2] == "versions":
            return 200, {"id": self.register(subject, body["schema"])}
        versions = self.subjects.get(subject)
        if versions is None:
            return 404, {"error_code": 40401, "message": f"Subject '{subject}' not found."}
        if method == "POST" and len(parts) == 2:
            schema_id = self._by_canonical.get(_canonical(body["schema"]))
            if schema_id not in versions:
                return 404, {"error_code": 40403, "message": "Schema not found"}
            return 200, self._version(subject, versions.index(schema_id) + 1)
        if method == "GET" and len(parts) == 3 and parts[2] == "versions":
            return 200, list(range(1, len(versions) + 1))
        if method == "GET" and len(parts) == 4 and parts[2] == "versions":
            number = len(versions) if parts[3] == "latest" else int(parts[3])
            if not 1 <= number <= len(versions):
                return 404, {"error_code": 40402, "message": f"Version {parts[3]} not found."}
            return 200, self._version(subject, number)
        return 404, {"error_code": 404, "message": "Not found"}

    def _version(self, subject: str, number: int) -> dict:
        schema_id = self.subjects[subject][number - 1]
        return {"subject": subject, "version": number, "id": schema_id, "schema": self.schemas[schema_id]}
