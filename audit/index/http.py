"""GET requests to a package index, counted, with one error rule for the network.

Every request goes through :func:`get`: it uses the TLS context it is given (the project's,
:func:`audit.lock.resolvers.job.tls_context`, by default), counts itself and the bytes of its
body in a :class:`FetchStats`, and turns a network failure (no answer, a reset, a body cut short)
into :class:`EnvironmentProblem` (exit 3) naming the redacted URL and the reason. HTTP status
codes are answers, not failures: the caller decides what a 404 or a 416 means. A caller may
ask for ``Accept-Encoding: gzip`` (project pages: PyPI's JSON for a big project is megabytes);
the body comes back inflated and ``bytes_downloaded`` counts what crossed the network.

Connections are kept and reused (``urllib3``'s thread-safe pools, one per TLS context and
proxy): a metadata read is a page and two or three range requests to the same hosts, and a new
TLS handshake for each of them cost as much as the request itself. The environment's proxies
(``https_proxy``, ``no_proxy``) are honoured as :mod:`urllib.request` honours them, and URL
userinfo becomes basic authentication (never sent anywhere else, never printed).
"""

from __future__ import annotations

import functools
import gzip
import ssl
import threading
import urllib.parse
import urllib.request
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from audit.errors import EnvironmentProblem
from audit.redact import redact

if TYPE_CHECKING:
    import urllib3

TIMEOUT = 60.0
# Connections kept per host: fetch_many's eight workers, with room to spare.
POOL_SIZE = 16


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


def prepare() -> None:
    """Import what the first request needs (urllib3, deferred so that starting the program does
    not wait for it): a caller that will fetch soon calls this beside its other work."""
    import urllib3  # noqa: F401


def get(
    url: str,
    headers: Mapping[str, str],
    *,
    context: ssl.SSLContext | None,
    stats: FetchStats,
    timeout: float = TIMEOUT,
) -> Answer:
    """GET ``url``; any HTTP status comes back as an :class:`Answer`, a network failure raises."""
    import urllib3  # here, not at import: a lock run's start does not wait for it

    bare, sent = _with_auth(url, headers)
    stats.count("requests")
    try:
        reply = _pool(bare, context).request(
            "GET", bare, headers=sent, timeout=timeout, retries=_retries(),
            preload_content=True, decode_content=False,
        )  # fmt: skip
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise unreachable(url, _reason(exc)) from exc
    answer = Answer(reply.status, _lower(reply.headers), reply.data, _final_url(bare, reply))
    stats.count("bytes_downloaded", len(answer.body))
    return _decoded(answer, url) if reply.status < 400 else answer


@functools.cache
def _retries() -> urllib3.Retry:
    import urllib3

    return urllib3.Retry(total=3, connect=2, read=1, redirect=5, status=0, raise_on_status=False)


def _final_url(url: str, reply: urllib3.BaseHTTPResponse) -> str:
    """Where the answer came from: ``url`` after every redirect (relative links resolve there)."""
    for step in reply.retries.history if reply.retries else ():
        if step.redirect_location:
            url = urllib.parse.urljoin(url, step.redirect_location)
    return url


def _with_auth(url: str, headers: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """(the URL without userinfo, the headers with its basic authentication when it had one)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return url, dict(headers)
    login = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
    import urllib3

    auth = urllib3.util.make_headers(basic_auth=login)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc)), {**headers, **auth}


_POOLS: dict[tuple[int, str], tuple[ssl.SSLContext | None, urllib3.PoolManager]] = {}
_POOLS_LOCK = threading.Lock()


def _pool(url: str, context: ssl.SSLContext | None) -> urllib3.PoolManager:
    """The kept connection pool for ``url``'s proxy (or none) and ``context`` (kept alive
    beside its pool, so its id is never reused while the pool exists)."""
    proxy = _proxy_for(url)
    key = (id(context), proxy)
    with _POOLS_LOCK:
        held = _POOLS.get(key)
        if held is None:
            held = _POOLS[key] = (context, _manager(proxy, context))
        return held[1]


def _manager(proxy: str, context: ssl.SSLContext | None) -> urllib3.PoolManager:
    import urllib3

    if proxy:
        return urllib3.ProxyManager(proxy, maxsize=POOL_SIZE, ssl_context=context)
    return urllib3.PoolManager(maxsize=POOL_SIZE, ssl_context=context)


def _proxy_for(url: str) -> str:
    """The proxy :mod:`urllib.request` would use for ``url`` ("" for none)."""
    parts = urllib.parse.urlsplit(url)
    proxy = urllib.request.getproxies().get(parts.scheme, "")
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return ""
    return proxy


def _reason(exc: BaseException) -> str:
    """What went wrong, in the words of the innermost cause (a refused connection, a reset)."""
    inner = getattr(exc, "reason", None)
    return str(inner or exc) or type(exc).__name__


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


def unreachable(url: str, reason: str) -> EnvironmentProblem:
    """Exit 3: the index at ``url`` did not answer (or answered something unusable)."""
    return EnvironmentProblem(
        f"the package index did not answer usably ({redact(reason)}): {redact(url)}",
        "check the network, the index URL and the CA bundle (SSL_CERT_FILE), then run again",
    )
