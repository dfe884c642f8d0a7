"""GET requests to a package index, counted, with one error rule for the network.

Every request goes through :func:`get`: it uses the TLS context it is given (the project's,
:func:`audit.engines.resolvers.job.tls_context`, by default), counts itself and the bytes of its
body in a :class:`FetchStats`, and turns a network failure (no answer, a reset, a body cut short)
into :class:`EnvironmentProblem` (exit 3) naming the redacted URL and the reason. HTTP status
codes are answers, not failures: the caller decides what a 404 or a 416 means. A caller may
ask for ``Accept-Encoding: gzip`` (project pages: PyPI's JSON for a big project is megabytes);
the body comes back inflated and ``bytes_downloaded`` counts what crossed the network.
"""

from __future__ import annotations

import gzip
import http.client
import ssl
import threading
import urllib.error
import urllib.request
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from audit.core.errors import EnvironmentProblem
from audit.core.redact import redact

TIMEOUT = 60.0


@dataclass
class FetchStats:
    """What reading metadata cost: requests, body bytes, and how each file was read.

    ``metadata_files`` counts PEP 658 ``.metadata`` files, ``range_reads`` wheels read by
    range requests, ``fallbacks`` wheels downloaded whole (the server ignored ``Range`` or
    refused it), ``cached`` answers from the on-disk cache. Safe to share between threads.
    """

    requests: int = 0
    bytes_downloaded: int = 0
    metadata_files: int = 0
    range_reads: int = 0
    fallbacks: int = 0
    cached: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def count(self, what: str, amount: int = 1) -> None:
        """Add ``amount`` to the counter named ``what``."""
        with self._lock:
            setattr(self, what, getattr(self, what) + amount)

    def summary(self) -> str:
        """One line for a person: requests, MB, and the read kinds that happened."""
        return (
            f"{self.requests} requests, {self.bytes_downloaded / 1e6:.2f} MB downloaded "
            f"({self.metadata_files} metadata files, {self.range_reads} range reads, "
            f"{self.fallbacks} full downloads, {self.cached} cached)"
        )


@dataclass(frozen=True)
class Answer:
    """One HTTP answer: status, headers (lower-case names), body, and the final URL."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    url: str


def get(
    url: str,
    headers: Mapping[str, str],
    *,
    context: ssl.SSLContext | None,
    stats: FetchStats,
    timeout: float = TIMEOUT,
) -> Answer:
    """GET ``url``; any HTTP status comes back as an :class:`Answer`, a network failure raises."""
    request = urllib.request.Request(url, headers=dict(headers))  # noqa: S310 (http(s): recipe-checked)
    stats.count("requests")
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as reply:  # noqa: S310
            body = reply.read()
            answer = Answer(reply.status, _lower(reply.headers), body, reply.geturl())
        stats.count("bytes_downloaded", len(answer.body))
        return _decoded(answer, url)
    except urllib.error.HTTPError as exc:
        body = _error_body(exc)
        answer = Answer(exc.code, _lower(exc.headers), body, url)
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        raise unreachable(url, str(getattr(exc, "reason", exc)) or type(exc).__name__) from exc
    stats.count("bytes_downloaded", len(answer.body))
    return answer


def _decoded(answer: Answer, url: str) -> Answer:
    """The answer with a gzip body (asked for with ``Accept-Encoding: gzip``) inflated."""
    if answer.headers.get("content-encoding", "").lower() != "gzip":
        return answer
    try:
        body = gzip.decompress(answer.body)
    except (OSError, EOFError, zlib.error) as exc:
        raise unreachable(url, f"a broken gzip body ({exc})") from exc
    return Answer(answer.status, answer.headers, body, answer.url)


def _lower(headers: object) -> dict[str, str]:
    items = getattr(headers, "items", None)
    return {str(k).lower(): str(v) for k, v in items()} if items else {}


def _error_body(exc: urllib.error.HTTPError) -> bytes:
    try:
        return exc.read()
    except (OSError, http.client.HTTPException):
        return b""


def unreachable(url: str, reason: str) -> EnvironmentProblem:
    """Exit 3: the index at ``url`` did not answer (or answered something unusable)."""
    return EnvironmentProblem(
        f"the package index did not answer usably ({redact(reason)}): {redact(url)}",
        "check the network, the index URL and the CA bundle (SSL_CERT_FILE), then run again",
    )
