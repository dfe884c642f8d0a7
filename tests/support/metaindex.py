"""A simple index on 127.0.0.1 that behaves like the real ones for metadata readers.

Serves a folder of wheels as PEP 691 JSON (when asked for it and ``json=True``) or PEP 503 HTML,
with relative file URLs, optional PEP 658 ``.metadata`` files (``metadata=True``), and one of
three range behaviours: ``"ranges"`` (206 with ``Content-Range``, suffix ranges included, like
the real index), ``"ignore"`` (200 with the whole body, like a plain static server) or
``"refuse"`` (416 to any ``Range``). :class:`Served` counts requests and body bytes sent, so
tests can check that reading metadata downloads a small part of a wheel.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import html
import json
import re
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Literal
from urllib.parse import quote, unquote, urlsplit

from packaging.utils import canonicalize_name, parse_wheel_filename

from tests.support.pkgindex import QuietServer

RangeMode = Literal["ranges", "ignore", "refuse"]
_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


@dataclass
class Served:
    """What the server sent: requests per path kind and body bytes."""

    requests: int = 0
    bytes_sent: int = 0
    ranges: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, body: int, range_header: str | None) -> None:
        with self.lock:
            self.requests += 1
            self.bytes_sent += body
            if range_header:
                self.ranges.append(range_header)


def _metadata_of(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return archive.read(name)


def _entries(root: Path, project: str, metadata: bool) -> list[dict[str, object]]:
    files = []
    for path in sorted(root.glob("*.whl")):
        if canonicalize_name(parse_wheel_filename(path.name)[0]) != project:
            continue
        entry: dict[str, object] = {
            "filename": path.name,
            "url": f"../../files/{quote(path.name)}",
            "hashes": {"sha256": hashlib.sha256(path.read_bytes()).hexdigest()},
        }
        if metadata:
            digest = hashlib.sha256(_metadata_of(path)).hexdigest()
            entry["core-metadata"] = {"sha256": digest}
        files.append(entry)
    return files


def _html(entries: list[dict[str, object]]) -> bytes:
    links = []
    for entry in entries:
        digest = entry["hashes"]["sha256"]  # type: ignore[index]
        extra = ""
        if "core-metadata" in entry:
            extra = f' data-core-metadata="sha256={entry["core-metadata"]["sha256"]}"'  # type: ignore[index]
        href = html.escape(f"{entry['url']}#sha256={digest}", quote=True)
        links.append(f'<a href="{href}"{extra}>{html.escape(str(entry["filename"]))}</a><br>')
    return ("<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n").encode()


def _handler(
    root: Path, mode: RangeMode, metadata: bool, json_api: bool, served: Served, gzip_pages: bool
) -> type:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        head_only = False

        def do_HEAD(self) -> None:  # uv asks for a file's headers before it reads it
            self.head_only = True
            self.do_GET()

        def do_GET(self) -> None:
            parts = [unquote(p) for p in urlsplit(self.path).path.split("/") if p]
            if len(parts) == 2 and parts[0] == "simple":
                self._page(canonicalize_name(parts[1]))
            elif len(parts) == 2 and parts[0] == "files" and parts[1].endswith(".metadata"):
                wheel = root / parts[1][: -len(".metadata")]
                body = _metadata_of(wheel) if metadata and wheel.is_file() else None
                self._send(body, "binary/octet-stream")
            elif len(parts) == 2 and parts[0] == "files" and (root / parts[1]).is_file():
                self._file((root / parts[1]).read_bytes())
            else:
                self._send(None, "text/plain")

        def _page(self, project: str) -> None:
            entries = _entries(root, project, metadata)
            if not entries:
                self._send(None, "text/plain")
            elif json_api and "application/vnd.pypi.simple.v1+json" in self.headers.get(
                "Accept", ""
            ):
                page = {"meta": {"api-version": "1.1"}, "name": project, "files": entries}
                self._page_body(json.dumps(page).encode(), "application/vnd.pypi.simple.v1+json")
            else:
                self._page_body(_html(entries), "text/html")

        def _page_body(self, body: bytes, kind: str) -> None:
            if gzip_pages and "gzip" in self.headers.get("Accept-Encoding", ""):
                self._send(gzip.compress(body), kind, headers={"Content-Encoding": "gzip"})
            else:
                self._send(body, kind)

        def _file(self, data: bytes) -> None:
            asked = self.headers.get("Range")
            if not asked or mode == "ignore":
                self._send(data, "binary/octet-stream")
            elif mode == "refuse":
                self._send(b"", "text/plain", HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
            else:
                self._range(data, asked)

        def _range(self, data: bytes, asked: str) -> None:
            found = _RANGE.match(asked)
            if found is None:
                self._send(b"", "text/plain", HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
                return
            first, last = found.groups()
            if not first:
                start, end = max(0, len(data) - int(last)), len(data) - 1
            else:
                start, end = int(first), min(len(data) - 1, int(last or len(data) - 1))
            extra = {"Content-Range": f"bytes {start}-{end}/{len(data)}"}
            self._send(
                data[start : end + 1], "binary/octet-stream", HTTPStatus.PARTIAL_CONTENT, extra
            )

        def _send(
            self,
            body: bytes | None,
            kind: str,
            status: HTTPStatus = HTTPStatus.OK,
            headers: dict[str, str] | None = None,
        ) -> None:
            if body is None:
                body, status = b"not found", HTTPStatus.NOT_FOUND
            served.add(len(body), self.headers.get("Range"))
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            if not self.head_only:
                self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@contextlib.contextmanager
def serve_metadata_index(
    root: Path,
    mode: RangeMode = "ranges",
    *,
    metadata: bool = False,
    json_api: bool = True,
    gzip_pages: bool = False,
) -> Iterator[tuple[str, Served]]:
    """Serve ``root``'s wheels; yield (``http://127.0.0.1:PORT/simple/``, counters).

    ``gzip_pages``: project pages are gzip-encoded for a client that accepts it (as PyPI does).
    """
    served = Served()
    handler = _handler(root, mode, metadata, json_api, served, gzip_pages)
    server = QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/", served
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
