"""Dependency confusion, refused: a package the layer's extra index carries comes from it.

pip (and so pip-tools) merges every index and takes the highest version anywhere, so a name
published on the public index above the version on a team's or vendor's extra index (the
FlashInfer nightly index, an internal index) wins silently. uv's default ``first-index`` strategy
cannot do that. For the pip-tools backend, every file the layer moves is checked after the
resolution: when its project exists on the layer's extra index, the file pip chose (its sha256,
from pip's report) must be one that index lists; otherwise the lock is refused (exit 1) and
nothing is written.

One request per moved project to the extra index's simple page (PEP 503 HTML or PEP 691 JSON:
both list file hashes), with the machine's CA bundle; an index that does not answer is exit 3.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from typing import Any

from audit.errors import EnvironmentProblem, ResolutionConflict
from audit.history.snapshot import canonical_name
from audit.lock.resolvers.job import tls_context
from audit.redact import redact

_HASH_IN_LINK = re.compile(r"sha256=([0-9a-f]{64})")
ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.5"


def project_hashes(index_url: str, name: str, timeout: float = 20.0) -> set[str] | None:
    """The sha256 of every file ``index_url`` lists for ``name``; None when it has no such
    project (404)."""
    url = f"{index_url.rstrip('/')}/{canonical_name(name)}/"
    context = tls_context()
    request = urllib.request.Request(url, headers={"Accept": ACCEPT})  # noqa: S310 (http(s): recipe-checked)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as answer:  # noqa: S310
            body = answer.read().decode("utf-8", "replace")
            kind = answer.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise _unreachable(index_url, f"HTTP {exc.code}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise _unreachable(index_url, str(getattr(exc, "reason", exc))) from exc
    return _json_hashes(body) if "json" in kind else set(_HASH_IN_LINK.findall(body))


def _json_hashes(body: str) -> set[str]:
    files: list[Mapping[str, Any]] = json.loads(body).get("files", [])
    return {str(f.get("hashes", {}).get("sha256", "")) for f in files} - {""}


def _unreachable(index_url: str, cause: str) -> EnvironmentProblem:
    return EnvironmentProblem(
        f"the extra index did not answer ({cause}): {redact(index_url)}",
        "check the network and the CA bundle (SSL_CERT_FILE), then run lock again",
    )


def confused(extra_index: str, chosen: Iterable[tuple[str, str, str]]) -> list[tuple[str, str]]:
    """(name, version) of every chosen file (name, version, sha256) whose project the extra
    index carries but which is not one of that index's files."""
    found = []
    for name, version, sha256 in chosen:
        hashes = project_hashes(extra_index, name)
        if hashes is not None and sha256 not in hashes:
            found.append((name, version))
    return found


def refuse_confusion(label: str, extra_index: str, chosen: list[tuple[str, str, str]]) -> None:
    """Raise (exit 1) when a moved package of the layer did not come from its extra index."""
    bad = confused(extra_index, chosen)
    if not bad:
        return
    listed = ", ".join(f"{name} {version}" for name, version in bad)
    raise ResolutionConflict(
        f"{label}: {listed} exists on the layer's extra index {redact(extra_index)} but pip "
        "took it from another index (dependency confusion: pip merges indexes), nothing written",
        "pin the version the extra index has in the requirements file, or lock with "
        'resolver = "uv" (a package on the extra index then only comes from it)',
    )
