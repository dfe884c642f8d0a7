"""A project's files on a simple index: PEP 691 JSON first, PEP 503 HTML when that is all.

One request per project, ``Accept: application/vnd.pypi.simple.v1+json`` preferred over HTML.
Every file URL is resolved against the page it came from (relative URLs, ``<base href>``),
hashes come from the JSON ``hashes`` or the link's ``#sha256=`` fragment, yanked files (PEP 592)
keep their reason, and PEP 658/714 metadata files (``core-metadata``, its older spelling
``data-dist-info-metadata``) are noted with their hashes. A project the index does not carry
(404) is an empty list; any other failure is exit 3 (:mod:`audit.index.http`).
"""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urldefrag, urljoin

from audit.history.snapshot import canonical_name
from audit.index.http import FetchStats, get, unreachable

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
ACCEPT = f"{JSON_TYPE}, text/html;q=0.1"
HASHES = ("sha256", "sha384", "sha512")


@dataclass(frozen=True)
class IndexFile:
    """One file an index lists for a project.

    ``metadata_hashes`` is None when the index offers no PEP 658 metadata file, an empty
    mapping when it offers one without a hash, else algorithm -> hex digest. ``yanked`` is
    None unless the file is yanked (then the reason, possibly empty).
    """

    filename: str
    url: str
    hashes: Mapping[str, str]
    yanked: str | None = None
    metadata_hashes: Mapping[str, str] | None = None
    requires_python: str = ""
    size: int = 0  # bytes, when the index says (PEP 700); 0 when unknown


def project_url(index_url: str, name: str) -> str:
    """``<index>/<canonical name>/``."""
    return f"{index_url.rstrip('/')}/{canonical_name(name)}/"


def project_files(
    index_url: str, name: str, *, context: ssl.SSLContext | None, stats: FetchStats
) -> list[IndexFile]:
    """Every file ``index_url`` lists for ``name``, in the index's order; [] on 404."""
    url = project_url(index_url, name)
    answer = get(url, {"Accept": ACCEPT, "Accept-Encoding": "gzip"}, context=context, stats=stats)
    if answer.status in (404, 410):
        return []
    if answer.status != 200:
        raise unreachable(url, f"HTTP {answer.status}")
    text = answer.body.decode("utf-8", "replace")
    try:
        if JSON_TYPE in answer.headers.get("content-type", ""):
            return _from_json(json.loads(text), answer.url)
        return _from_html(text, answer.url)
    except (ValueError, TypeError, AttributeError) as exc:
        raise unreachable(url, f"not a simple-index page: {exc}") from exc


class ProjectPages:
    """Project pages read at most once per (index, project) while the object lives (one lock
    run), shared between threads: a page asked for while another thread reads it waits for
    that read, and a read that failed fails the same way for every asker."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, str], Future[list[IndexFile]]] = {}
        self._lock = threading.Lock()

    def files(
        self, index_url: str, name: str, *, context: ssl.SSLContext | None, stats: FetchStats
    ) -> list[IndexFile]:
        """:func:`project_files`, read once."""
        key = (index_url, canonical_name(name))
        with self._lock:
            held = self._held.get(key)
            mine = held is None
            if held is None:
                held = self._held[key] = Future()
        if mine:
            try:
                held.set_result(project_files(index_url, name, context=context, stats=stats))
            except BaseException as exc:  # handed to every asker, raised below
                held.set_exception(exc)
        return held.result()


# -- PEP 691 ---------------------------------------------------------------------------------


def _from_json(page: Mapping[str, Any], page_url: str) -> list[IndexFile]:
    return [_json_file(entry, page_url) for entry in page.get("files", [])]


def _json_file(entry: Mapping[str, Any], page_url: str) -> IndexFile:
    yanked = entry.get("yanked", False)
    offered = entry.get("core-metadata", entry.get("data-dist-info-metadata"))
    return IndexFile(
        filename=str(entry["filename"]),
        url=urljoin(page_url, str(entry["url"])),
        hashes={k: str(v) for k, v in dict(entry.get("hashes") or {}).items()},
        yanked=(yanked if isinstance(yanked, str) else "") if yanked else None,
        metadata_hashes=_offered(offered),
        requires_python=str(entry.get("requires-python") or ""),
        size=int(entry.get("size") or 0),
    )


def _offered(value: object) -> Mapping[str, str] | None:
    """PEP 714: ``true``, a hash mapping, or absent/false."""
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    return {} if value is True else None


# -- PEP 503 ---------------------------------------------------------------------------------


class _Links(HTMLParser):
    """Collects ``<a>`` attributes and the text of each link, and a ``<base href>``."""

    def __init__(self) -> None:
        super().__init__()
        self.base = ""
        self.links: list[tuple[dict[str, str | None], str]] = []
        self._open: dict[str, str | None] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "base" and not self.base:
            self.base = dict(attrs).get("href") or ""
        elif tag == "a":
            self._open, self._text = dict(attrs), []

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._open is not None:
            self.links.append((self._open, "".join(self._text).strip()))
            self._open = None


def _from_html(text: str, page_url: str) -> list[IndexFile]:
    parser = _Links()
    parser.feed(text)
    base = urljoin(page_url, parser.base) if parser.base else page_url
    return [_html_file(attrs, label, base) for attrs, label in parser.links if attrs.get("href")]


def _html_file(attrs: Mapping[str, str | None], label: str, base: str) -> IndexFile:
    url, fragment = urldefrag(urljoin(base, attrs["href"] or ""))
    algorithm, _, digest = fragment.partition("=")
    offered = attrs.get("data-core-metadata", attrs.get("data-dist-info-metadata"))
    return IndexFile(
        filename=label or url.rsplit("/", 1)[-1],
        url=url,
        hashes={algorithm: digest} if algorithm in HASHES and digest else {},
        yanked=attrs["data-yanked"] or "" if "data-yanked" in attrs else None,
        metadata_hashes=_html_offered(offered)
        if "data-core-metadata" in attrs or "data-dist-info-metadata" in attrs
        else None,
        requires_python=attrs.get("data-requires-python") or "",
    )


def _html_offered(value: str | None) -> Mapping[str, str] | None:
    """``true``, ``sha256=<hex>``, or ``false`` (not offered)."""
    text = (value or "true").strip()
    if text.lower() == "false":
        return None
    algorithm, _, digest = text.partition("=")
    return {algorithm: digest} if algorithm in HASHES and digest else {}
