"""Images in a registry, read through the distribution HTTP API v2 (urllib3), never pulled.

``GET /v2/<repo>/manifests/<tag or digest>`` (an OCI index or a Docker manifest list is
followed to the platform's manifest), ``GET /v2/<repo>/blobs/<config digest>``, then only the
layer blobs whose deltas are not known yet, streamed, decompressed and scanned as they arrive.

Authentication: anonymous first; on ``401`` the ``WWW-Authenticate`` challenge says how:
``Bearer`` (a token from the realm, asked with the credentials when there are some) or
``Basic``. Credentials come from ``$LAYER_AUDIT_REGISTRY_USER`` and
``$LAYER_AUDIT_REGISTRY_PASSWORD``, else the docker CLI's ``config.json``
(``auths.<host>.auth``, or ``username``/``password``; credential helpers and identity tokens
are not read). They are sent only to the registry and its
token realm, never printed (every URL shown goes through :func:`audit.redact.redact`), and
never follow a redirect to another host (urllib3 drops ``Authorization`` then).

Transport: HTTPS with the machine's CA bundle; plain HTTP only for 127.0.0.1, ``localhost``,
``::1`` or a host named in :attr:`RegistrySettings.insecure`.

Invariants: every document and blob is checked against its digest (manifests fetched by
digest, the config, each layer's blob and diff-id); a registry that does not answer is exit 3,
a reference it does not have is exit 2.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

from audit.errors import BadInput, EnvironmentProblem, ImageFormatError
from audit.history.walk.blobs import LayerBlob
from audit.history.walk.layout import (
    ACCEPT,
    JSON_LIMIT,
    Descriptor,
    LayoutError,
    Selection,
    blob_name,
    choose_platform,
    index_entries,
    is_index,
    load_json,
    manifest_parts,
)
from audit.history.walk.source import Fetched, Known, SourceSettings, digest_of, pair_layers
from audit.history.walk.spec import RegistryRef, parse_registry_ref
from audit.redact import redact

if TYPE_CHECKING:
    import urllib3

LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
TOKEN_LIMIT = 1 << 20  # a token service's answer: a JWT of a few KiB, never megabytes
USER_ENV, PASSWORD_ENV = "LAYER_AUDIT_REGISTRY_USER", "LAYER_AUDIT_REGISTRY_PASSWORD"
CHUNK = 1 << 20
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')
_MAX_INDEX_DEPTH = 4


@dataclass(frozen=True)
class RegistrySettings:
    """How registries are reached: hosts allowed over plain HTTP, the docker CLI's config
    folder (None: ``$DOCKER_CONFIG`` or ``~/.docker``), the environment credentials are read
    from, and the read timeout in seconds."""

    insecure: tuple[str, ...] = ()
    config_dir: Path | None = None
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    timeout: float = 60.0


def _host_name(host: str) -> str:
    return (
        host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]", maxsplit=1)[0] + "]"
    )


def scheme_for(host: str, settings: RegistrySettings) -> str:
    """``http`` for a loopback or an explicitly insecure host, ``https`` otherwise."""
    if (
        _host_name(host) in LOOPBACK
        or host in settings.insecure
        or _host_name(host) in settings.insecure
    ):
        return "http"
    return "https"


def credentials(host: str, settings: RegistrySettings) -> tuple[str, str] | None:
    """(user, password) for ``host``: the environment first, then the docker config."""
    env = settings.environ
    if env.get(USER_ENV) and env.get(PASSWORD_ENV):
        return env[USER_ENV], env[PASSWORD_ENV]
    folder = settings.config_dir or (
        Path(env["DOCKER_CONFIG"]) if env.get("DOCKER_CONFIG") else Path.home() / ".docker"
    )
    try:
        document = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    auths = document.get("auths") if isinstance(document, dict) else None
    if not isinstance(auths, dict):
        return None
    names = [host, f"https://{host}", f"http://{host}"]
    if host == "registry-1.docker.io":
        names += ["https://index.docker.io/v1/", "docker.io", "index.docker.io"]
    for name in names:
        entry = auths.get(name)
        if isinstance(entry, dict):
            found = _entry_credentials(entry)
            if found:
                return found
    return None


def _entry_credentials(entry: dict[str, Any]) -> tuple[str, str] | None:
    if isinstance(entry.get("auth"), str) and entry["auth"]:
        try:
            user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return None
        return (user, password) if user else None
    name, secret = entry.get("username"), entry.get("password")
    if isinstance(name, str) and isinstance(secret, str) and name:
        return name, secret
    return None


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """(scheme, parameters) of a ``WWW-Authenticate`` header."""
    scheme, _, rest = header.strip().partition(" ")
    return scheme.lower(), dict(_CHALLENGE.findall(rest))


class _Session:
    """Requests to one repository of one registry, authenticated as its challenges ask."""

    def __init__(self, ref: RegistryRef, settings: RegistrySettings) -> None:
        import urllib3

        from audit.lock.resolvers.job import tls_context

        self.ref = ref
        self.settings = settings
        scheme = scheme_for(ref.host, settings)
        self.base = f"{scheme}://{ref.host}/v2/{ref.repository}"
        self.where = redact(str(ref))
        timeout = urllib3.Timeout(connect=10.0, read=settings.timeout)
        retries = urllib3.Retry(total=None, connect=2, read=0, redirect=5, status=0)
        self.pool = urllib3.PoolManager(
            ssl_context=tls_context() if scheme == "https" else None,
            timeout=timeout, retries=retries,
        )  # fmt: skip
        self.authorization = ""

    def get(self, path: str, accept: str = "", stream: bool = False) -> urllib3.BaseHTTPResponse:
        """``GET base + path``; one login on ``401``, then the answer as it is."""
        headers = {"Accept": accept} if accept else {}
        reply = self._send(self.base + path, headers, stream)
        if reply.status == 401 and not self.authorization:
            challenge = reply.headers.get("WWW-Authenticate", "")
            reply.drain_conn()
            self._login(challenge)
            reply = self._send(self.base + path, headers, stream)
        if reply.status == 401:
            reply.drain_conn()
            raise EnvironmentProblem(
                f"registry {self.where}: access denied (401)",
                f"log in (docker login {self.ref.host}) or set {USER_ENV} and {PASSWORD_ENV}",
            )
        return reply

    def _send(self, url: str, headers: dict[str, str], stream: bool) -> urllib3.BaseHTTPResponse:
        import urllib3

        if self.authorization:
            headers = {**headers, "Authorization": self.authorization}
        try:
            return self.pool.request("GET", url, headers=headers, preload_content=not stream)
        except urllib3.exceptions.HTTPError as exc:
            raise EnvironmentProblem(
                f"registry {redact(self.ref.host)} does not answer: {_reason(exc)}",
                "check the address and the network (is the registry running? a proxy?)",
            ) from None

    def _login(self, challenge: str) -> None:
        scheme, params = parse_challenge(challenge)
        found = credentials(self.ref.host, self.settings)
        if scheme == "basic":
            if found is None:
                raise EnvironmentProblem(
                    f"registry {self.where}: a login is required",
                    f"docker login {self.ref.host}, or set {USER_ENV} and {PASSWORD_ENV}",
                )
            self.authorization = "Basic " + _basic(found)
            return
        if scheme != "bearer" or "realm" not in params:
            raise EnvironmentProblem(
                f"registry {self.where}: an authentication it asks for is not supported "
                f"({scheme or 'none'})",
                "use a registry with token or basic authentication",
            )
        self.authorization = "Bearer " + self._token(params, found)

    def _token(self, params: dict[str, str], found: tuple[str, str] | None) -> str:
        import urllib3

        query = {"service": params.get("service", "")}
        query["scope"] = params.get("scope") or f"repository:{self.ref.repository}:pull"
        realm = params["realm"]
        if urlsplit(realm).scheme not in ("https", "http"):
            raise EnvironmentProblem(f"registry {self.where}: token realm {redact(realm)!r}")
        headers = {"Authorization": "Basic " + _basic(found)} if found else {}
        try:
            reply = self.pool.request(
                "GET", f"{realm}?{urlencode(query)}", headers=headers, preload_content=False
            )
            document: Any = {}
            if reply.status == 200:
                document = _token_answer(reply, self.settings.timeout, f"registry {self.where}")
            else:
                reply.close()  # its body is no token: never read
        except (urllib3.exceptions.HTTPError, ValueError, RecursionError) as exc:
            raise EnvironmentProblem(
                f"registry {self.where}: its token service {redact(realm)} failed: "
                f"{_reason(exc)}", "check the network and the credentials",
            ) from None  # fmt: skip
        token = (
            document.get("token") or document.get("access_token")
            if isinstance(document, dict)
            else None
        )
        if not isinstance(token, str) or not token:
            raise EnvironmentProblem(
                f"registry {self.where}: no token for {query['scope']} "
                f"(token service answered {reply.status})",
                f"check the credentials (docker login {self.ref.host}) and the repository name",
            )
        return token


def _token_answer(reply: urllib3.BaseHTTPResponse, timeout: float, where: str) -> Any:
    """A token service's JSON answer, read up to :data:`TOKEN_LIMIT` bytes (a bigger answer is
    no token: :class:`ValueError`, never held whole); nesting too deep for the parser raises
    :class:`RecursionError`."""
    try:
        data = read_within(reply, TOKEN_LIMIT, timeout, f"{where}: its token service")
    finally:
        reply.release_conn()
    if len(data) > TOKEN_LIMIT:
        raise ValueError(f"an answer over {TOKEN_LIMIT >> 10} KiB is not a token")
    return json.loads(data)


def _token_of(document: Any) -> str:
    if not isinstance(document, dict):
        return ""
    token = document.get("token") or document.get("access_token")
    return token if isinstance(token, str) else ""


def _basic(found: tuple[str, str] | None) -> str:
    user, password = found or ("", "")
    return base64.b64encode(f"{user}:{password}".encode()).decode()


def _reason(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return redact(text[:200])


# ----------------------------------------------------------------------------- documents


def _document(session: _Session, path: str, accept: str, what: str) -> tuple[bytes, str]:
    """A manifest or blob's bytes (bounded) and the digest the registry names for it."""
    reply = session.get(path, accept, stream=True)
    try:
        if reply.status == 404:
            raise BadInput(
                f"registry {session.where}: no {what}",
                "check the repository, tag or digest (the registry has none by that name)",
            )
        if reply.status != 200:
            raise EnvironmentProblem(
                f"registry {session.where}: {what}: HTTP {reply.status}",
                "check the registry (its log, its storage) and try again",
            )
        data = read_within(
            reply, JSON_LIMIT, session.settings.timeout, f"registry {session.where}: {what}"
        )
        if len(data) > JSON_LIMIT:
            raise ImageFormatError(f"registry {session.where}: {what} is too big for a document")
        return data, str(reply.headers.get("Docker-Content-Digest", ""))
    finally:
        reply.release_conn()


def read_within(reply: urllib3.BaseHTTPResponse, limit: int, seconds: float, what: str) -> bytes:
    """A small answer's body: at most ``limit`` + 1 bytes (more says "too big"), read within
    ``seconds`` in all. The read timeout bounds each wait only: a server that trickles a byte
    per wait would hold a walk for ever, so the whole read has a deadline
    (:class:`EnvironmentProblem`, exit 3, past it)."""
    deadline = time.monotonic() + seconds
    parts: list[bytes] = []
    size = 0
    while size <= limit:
        piece = reply.read1(min(1 << 16, limit + 1 - size))
        if not piece:
            break
        parts.append(piece)
        size += len(piece)
        if time.monotonic() > deadline:
            raise EnvironmentProblem(
                f"{what}: the answer took over {seconds:.0f} s ({size} bytes so far)",
                "check the network and the registry; try again",
            )
    return b"".join(parts)


def _verified(data: bytes, digest: str, where: str) -> bytes:
    if digest and digest_of(data) != digest:
        raise ImageFormatError(
            f"{where}: the registry's answer does not hash to {digest} (damaged or tampered with)",
            "try again; report it to the registry's owner if it stays",
        )
    return data


def _manifest(
    session: _Session, settings: SourceSettings
) -> tuple[Descriptor, tuple[Descriptor, ...], str, str]:
    """(config, layers, manifest digest, platform) of the reference, following indexes."""
    reference, platform = session.ref.reference, ""
    for _ in range(_MAX_INDEX_DEPTH):
        data, named = _document(session, f"/manifests/{reference}", ", ".join(ACCEPT), "manifest "
                                f"{reference}")  # fmt: skip
        digest = reference if reference.startswith("sha256:") else named
        where = f"registry {session.where}"
        _verified(data, reference if reference.startswith("sha256:") else "", where)
        with _layout_errors(where):
            document = load_json(data, "manifest")
            if not is_index(document):
                config, layers = manifest_parts(document, "manifest")
                return config, layers, digest or digest_of(data), platform
            entries = index_entries(document, "index")
            chosen = choose_platform(entries, settings.platform, settings.host, "index")
        reference, platform = chosen.digest, chosen.platform
    raise ImageFormatError(f"registry {session.where}: indexes nested too deep")


class _layout_errors:
    def __init__(self, where: str) -> None:
        self.where = where

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, LayoutError):
            raise ImageFormatError(
                f"{self.where}: {exc}", exc.hint or "check the reference"
            ) from None


# ----------------------------------------------------------------------------- the source


def fetch_registry(
    text: str, registry: RegistrySettings, settings: SourceSettings, known: Known
) -> Fetched:
    """The image ``text`` (``HOST/REPO[:TAG|@DIGEST]``) names in its registry."""
    ref = parse_registry_ref(text)
    session = _Session(ref, registry)
    config_desc, layers, manifest_digest, platform = _manifest(session, settings)
    config, _ = _document(session, f"/blobs/{config_desc.digest}", "", "config blob")
    _verified(config, config_desc.digest, f"registry {session.where}")
    selection = Selection(
        config, config_desc.digest, tuple((blob_name(d.digest), d.digest) for d in layers),
        (str(ref),) if not ref.by_digest else (), platform, manifest_digest,
    )  # fmt: skip
    with settings.errors(f"registry {session.where}"):
        diff_ids = settings.diff_ids(selection)
        blobs, size = {}, len(config)
        for descriptor, diff_id in zip(layers, diff_ids, strict=True):
            name = blob_name(descriptor.digest)
            if name not in blobs and not known.has(diff_id):
                blobs[name] = _layer(session, descriptor, settings)
                size += blobs[name].size
    return pair_layers(selection, blobs, known, f"registry {session.where}", size)


def _layer(session: _Session, descriptor: Descriptor, settings: SourceSettings) -> LayerBlob:
    import urllib3

    reply = session.get(f"/blobs/{descriptor.digest}", stream=True)
    try:
        if reply.status != 200:
            raise EnvironmentProblem(
                f"registry {session.where}: layer {descriptor.digest}: HTTP {reply.status}",
                "check the registry and try again",
            )
        blob = LayerBlob(True, settings.elf_reader, settings.families)
        try:
            for chunk in reply.stream(CHUNK, decode_content=False):
                blob.write(memoryview(chunk))
        except urllib3.exceptions.HTTPError as exc:
            raise EnvironmentProblem(
                f"registry {session.where}: the download of {descriptor.digest} broke off: "
                f"{_reason(exc)}", "check the network and try again",
            ) from None  # fmt: skip
        blob.close()
        return blob
    finally:
        reply.release_conn()
