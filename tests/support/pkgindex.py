"""A PEP 503 simple index over a directory of wheels, served on 127.0.0.1 for tests.

Listings are computed on every request, so wheels added (or yanked) while the index is
served show up at once. Every link carries a ``#sha256=`` fragment, as pip's
``--require-hashes`` and pip-tools' ``--generate-hashes`` expect. The server binds to
127.0.0.1 on a free port: containers run with ``--network host`` reach it at the same URL.

Yanking (PEP 592): :func:`yank` writes ``<wheel>.yanked`` beside a wheel holding the reason;
its link then carries ``data-yanked``.

A bad network, for tests of what a broken download leaves: ``serve_index(dir, "drop")`` sends
half of every wheel then closes the connection; ``"slow"`` waits ``SLOW_SECONDS`` before every
wheel, long enough for a test to interrupt the download.

A folder filled on demand: ``serve_index(dir, prepare=fill)`` runs ``fill()`` once, before the
first request is answered (the test session's pip-tools wheels, downloaded only when needed).

What was fetched: ``serve_index(dir, served=names)`` appends the file name of every file body it
sends (GET, not HEAD) to ``names``, so a test can say which files a run downloaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Literal
from urllib.parse import quote, unquote, urlsplit

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)

YANKED_SUFFIX = ".yanked"
SLOW_SECONDS = 30
Delivery = Literal["whole", "drop", "slow"]


def yank(distribution: Path, reason: str = "yanked by the test") -> None:
    """Mark one file of the index as yanked (PEP 592) with ``reason``."""
    distribution.with_name(distribution.name + YANKED_SUFFIX).write_text(reason)


def project_of(filename: str) -> str | None:
    """Canonical project name of a wheel or sdist file name; None for anything else."""
    try:
        if filename.endswith(".whl"):
            return canonicalize_name(parse_wheel_filename(filename)[0])
        if filename.endswith((".tar.gz", ".zip")):
            return canonicalize_name(parse_sdist_filename(filename)[0])
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
    return None


def _files_by_project(root: Path) -> dict[str, list[Path]]:
    projects: dict[str, list[Path]] = {}
    for path in sorted(root.iterdir()):
        name = project_of(path.name)
        if name is not None and path.is_file():
            projects.setdefault(name, []).append(path)
    return projects


def _page(title: str, links: list[str]) -> bytes:
    body = "\n".join(links)
    return (
        "<!DOCTYPE html>\n<html><head>"
        '<meta name="pypi:repository-version" content="1.0">'
        f"<title>{html.escape(title)}</title></head>\n<body>\n{body}\n</body></html>\n"
    ).encode()


def _file_link(path: Path) -> str:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    href = f"../../files/{quote(path.name)}#sha256={digest}"
    marker = path.with_name(path.name + YANKED_SUFFIX)
    yanked = ""
    if marker.is_file():
        yanked = f' data-yanked="{html.escape(marker.read_text().strip(), quote=True)}"'
    return f'<a href="{html.escape(href, quote=True)}"{yanked}>{html.escape(path.name)}</a><br>'


def root_page(root: Path) -> bytes:
    """The /simple/ page: one link per project."""
    links = [f'<a href="{name}/">{name}</a><br>' for name in _files_by_project(root)]
    return _page("Simple index", links)


def project_page(root: Path, project: str) -> bytes | None:
    """The /simple/<project>/ page, or None when the index has no such project."""
    files = _files_by_project(root).get(canonicalize_name(project))
    if not files:
        return None
    return _page(f"Links for {project}", [_file_link(path) for path in files])


def _once(prepare: Callable[[], object] | None) -> Callable[[], None]:
    """``prepare`` called at most once, by the first caller; the others wait for it."""
    lock = threading.Lock()
    done: list[bool] = []

    def call() -> None:
        with lock:
            if prepare is not None and not done:
                prepare()
                done.append(True)

    return call


def _handler_for(
    root: Path,
    delivery: Delivery,
    prepare: Callable[[], object] | None = None,
    slow_seconds: float = SLOW_SECONDS,
    served: list[str] | None = None,
) -> type[BaseHTTPRequestHandler]:
    ready = _once(prepare)
    fetched = served if served is not None else []

    class IndexHandler(BaseHTTPRequestHandler):
        head_only = False

        def do_HEAD(self) -> None:  # uv asks for a file's headers before it downloads it
            self.head_only = True
            self.do_GET()

        def do_GET(self) -> None:
            ready()
            parts = [unquote(p) for p in urlsplit(self.path).path.split("/") if p]
            if parts == ["simple"]:
                self._send(root_page(root), "text/html")
            elif len(parts) == 2 and parts[0] == "simple":
                self._send(project_page(root, parts[1]), "text/html")
            elif len(parts) == 2 and parts[0] == "files" and project_of(parts[1]):
                self._send_file(root / parts[1])
            else:
                self._send(None, "text/plain")

        def _send_file(self, path: Path) -> None:
            if delivery == "slow" and path.is_file():
                time.sleep(slow_seconds)
            body = path.read_bytes() if path.is_file() else None
            if body is not None and not self.head_only:
                fetched.append(path.name)
            self._send(body, "binary/octet-stream", drop=delivery == "drop")

        def _send(self, body: bytes | None, content_type: str, drop: bool = False) -> None:
            if body is None:
                self.send_error(HTTPStatus.NOT_FOUND)
                return
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.head_only:
                return
            self.wfile.write(body[: len(body) // 2] if drop else body)
            if drop:
                self.close_connection = True  # the rest of the body never comes

        def log_message(self, format: str, *args: object) -> None:
            pass  # request logs would drown pytest's output

    return IndexHandler


class QuietServer(ThreadingHTTPServer):
    """A threading HTTP server that says nothing when a client hangs up mid-answer (pip retrying,
    a test killing its client): socketserver would print a traceback on the test's stderr,
    where tests look for tracebacks the product must never print. Any other error still shows.
    """

    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):  # BrokenPipe, ConnectionReset, ...
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]


@contextlib.contextmanager
def serve_index(
    wheel_dir: Path,
    delivery: Delivery = "whole",
    *,
    prepare: Callable[[], object] | None = None,
    slow_seconds: float = SLOW_SECONDS,
    served: list[str] | None = None,
) -> Iterator[str]:
    """Serve ``wheel_dir`` as a simple index; yield ``http://127.0.0.1:PORT/simple/``.

    ``delivery`` says how wheels are sent: ``"whole"``, or a bad network (``"drop"``, ``"slow"``).
    ``prepare``, when given, fills ``wheel_dir`` before the first request is answered (once),
    so an index nobody asks costs nothing. ``served``, when given, collects the name of every
    file sent (in order; a file sent twice is named twice).
    """
    handler = _handler_for(wheel_dir, delivery, prepare, slow_seconds, served)
    server = QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="test-index", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
