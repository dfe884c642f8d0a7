"""The files an index lists for a project (PEP 691 JSON or PEP 503 HTML): name, URL, sha256.

One request per project, with the machine's CA bundle. Relative links are made absolute
against the page's URL (the index this project's machines reach serves relative file URLs).
A project the index does not have is an empty list; an index that does not answer is exit 3.
"""

from __future__ import annotations

import html
import json
import re
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

from audit.core.errors import EnvironmentProblem
from audit.core.redact import redact
from audit.core.snapshot import canonical_name
from audit.engines.resolvers.job import tls_context
from audit.plan.pylock import IndexFile

ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.5"
_ANCHOR = re.compile(r'<a\s[^>]*href="([^"]+)"[^>]*>', re.IGNORECASE)


def project_files(index_url: str, name: str, timeout: float = 30.0) -> list[IndexFile]:
    """Every file ``index_url`` lists for ``name`` that carries a sha256."""
    page = f"{index_url.rstrip('/')}/{canonical_name(name)}/"
    request = urllib.request.Request(page, headers={"Accept": ACCEPT})  # noqa: S310 (recipe URL)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=tls_context()) as answer:  # noqa: S310
            body = answer.read().decode("utf-8", "replace")
            kind = answer.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return []
        raise _unreachable(index_url, f"HTTP {exc.code}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise _unreachable(index_url, str(getattr(exc, "reason", exc))) from exc
    return _json_files(page, body) if "json" in kind else _html_files(page, body)


def _json_files(page: str, body: str) -> list[IndexFile]:
    files: list[Mapping[str, Any]] = json.loads(body).get("files", [])
    found = []
    for entry in files:
        sha256 = str(entry.get("hashes", {}).get("sha256", ""))
        if sha256 and entry.get("filename"):
            found.append(
                IndexFile(str(entry["filename"]), urljoin(page, str(entry["url"])), sha256)
            )
    return found


def _html_files(page: str, body: str) -> list[IndexFile]:
    found = []
    for href in _ANCHOR.findall(body):
        url = urljoin(page, html.unescape(href))
        parts = urlsplit(url)
        if not parts.fragment.startswith("sha256="):
            continue
        filename = unquote(parts.path.rsplit("/", 1)[-1])
        bare = urlunsplit(parts._replace(fragment=""))
        found.append(IndexFile(filename, bare, parts.fragment.removeprefix("sha256=")))
    return found


def _unreachable(index_url: str, cause: str) -> EnvironmentProblem:
    return EnvironmentProblem(
        f"the index did not answer ({cause}): {redact(index_url)}",
        "check the network and the CA bundle (SSL_CERT_FILE), then run export again",
    )
