"""A small distribution-API registry on 127.0.0.1 serving an OCI layout, with token auth.

Debian's registry (:mod:`tests.support.registry`) speaks anonymous and basic auth only; this
one speaks the token flow real registries (Docker Hub, GHCR, Harbor) use: ``/v2/...`` answers
``401`` with ``WWW-Authenticate: Bearer realm=...,service=...,scope=...``; the realm hands out a
token for the right basic credentials; blobs are redirected to a second server (the "storage"),
which records whether any ``Authorization`` header reached it. Every request path is logged.
"""

from __future__ import annotations

import base64
import contextlib
import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

from tests.support.pkgindex import QuietServer

TOKEN = "t0ken-for-tests"


@dataclass
class Served:
    """What the registry served: request paths, and the storage's Authorization headers."""

    paths: list[str] = field(default_factory=list)
    storage_authorizations: list[str] = field(default_factory=list)
    host: str = ""


def _manifest_type(data: bytes) -> str:
    document = json.loads(data)
    return str(document.get("mediaType") or "application/vnd.oci.image.index.v1+json")


def _handler(
    files: Mapping[str, bytes],
    repository: str,
    user: str,
    password: str,
    served: Served,
    storage: list[str],
    scheme: str,
) -> type[BaseHTTPRequestHandler]:
    index = json.loads(files["index.json"])
    basic = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    accepted = f"Bearer {TOKEN}" if scheme == "bearer" else basic
    tags = {
        e.get("annotations", {}).get("org.opencontainers.image.ref.name", ""): e["digest"]
        for e in index["manifests"]
    }

    class Registry(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.paths.append(self.path)
            parts = urlsplit(self.path)
            if parts.path == "/token":
                self._token(parse_qs(parts.query))
            elif self.headers.get("Authorization") != accepted:
                self._challenge()
            else:
                self._serve(parts.path)

        def _challenge(self) -> None:
            realm = f"http://{served.host}/token"
            scope = f"repository:{repository}:pull"
            self.send_response(401)
            challenge = f'Bearer realm="{realm}",service="tests",scope="{scope}"'
            self.send_header(
                "WWW-Authenticate", challenge if scheme == "bearer" else 'Basic realm="tests"'
            )
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _token(self, query: dict[str, list[str]]) -> None:
            if self.headers.get("Authorization") != basic or query.get("service") != ["tests"]:
                self._send(401, b'{"errors": [{"code": "UNAUTHORIZED"}]}', "application/json")
                return
            self._send(200, json.dumps({"token": TOKEN}).encode(), "application/json")

        def _serve(self, path: str) -> None:
            prefix = f"/v2/{repository}/"
            if not path.startswith(prefix):
                self._send(404, b"{}", "application/json")
                return
            kind, _, reference = path[len(prefix) :].partition("/")
            digest = tags.get(reference, reference)
            name = "blobs/sha256/" + digest.removeprefix("sha256:")
            if name not in files:
                self._send(404, b'{"errors": [{"code": "MANIFEST_UNKNOWN"}]}', "application/json")
            elif kind == "blobs":
                self.send_response(307)
                self.send_header("Location", f"http://{storage[0]}/{name}")
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                data = files[name]
                self._send(200, data, _manifest_type(data), digest)

        def _send(self, status: int, body: bytes, kind: str, digest: str = "") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            if digest:
                self.send_header("Docker-Content-Digest", digest)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Registry


def _storage_handler(files: Mapping[str, bytes], served: Served) -> type[BaseHTTPRequestHandler]:
    class Storage(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.storage_authorizations.append(self.headers.get("Authorization") or "")
            data = files.get(self.path.lstrip("/"))
            self.send_response(200 if data is not None else 404)
            self.send_header("Content-Length", str(len(data or b"")))
            self.end_headers()
            self.wfile.write(data or b"")

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Storage


@contextlib.contextmanager
def token_registry(
    files: Mapping[str, bytes],
    repository: str,
    user: str = "ci",
    password: str = "s3cret-pw",
    scheme: str = "bearer",
) -> Iterator[Served]:
    """Serve ``files`` (an OCI layout) as ``repository``; yields what was served (``host``
    is ``127.0.0.1:PORT``). ``scheme`` ``basic``: the registry asks for basic auth itself."""
    served = Served()
    storage_address: list[str] = []
    storage = QuietServer(("127.0.0.1", 0), _storage_handler(files, served))
    registry = QuietServer(
        ("127.0.0.1", 0),
        _handler(files, repository, user, password, served, storage_address, scheme),
    )
    storage_address.append(f"127.0.0.1:{storage.server_address[1]}")
    served.host = f"127.0.0.1:{registry.server_address[1]}"
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (storage, registry)]
    for thread in threads:
        thread.start()
    try:
        yield served
    finally:
        for server in (storage, registry):
            server.shutdown()
            server.server_close()
