"""The files an index lists for a project, as the pylock export names them: name, URL, sha256.

A view over :mod:`audit.index.simple`, the project's one simple-index client (PEP 691
JSON, else PEP 503 HTML; relative links made absolute against the page; a project the index
does not have is an empty list; an index that does not answer is exit 3). Only files with a
sha256 are kept: a PEP 751 file entry needs one.
"""

from __future__ import annotations

from audit.index import simple as simple_index
from audit.index.http import FetchStats
from audit.lock.resolvers.job import tls_context
from audit.report.pylock import ExportedFile


def project_files(index_url: str, name: str) -> list[ExportedFile]:
    """Every file ``index_url`` lists for ``name`` that carries a sha256."""
    listed = simple_index.project_files(index_url, name, context=tls_context(), stats=FetchStats())
    return [
        ExportedFile(entry.filename, entry.url, entry.hashes["sha256"])
        for entry in listed
        if entry.hashes.get("sha256")
    ]
