"""One redaction rule for everything we print, log, label or report.

:func:`redact` takes any text (an error message, a log line, a label value, a report) and
returns it with the secrets it may carry taken out:

- the userinfo of every URL (a user and token before the ``@`` of ``https://…@host/x``: the
  URL becomes ``https://host/x``);
- known token shapes: GitHub (``ghp_``, ``gho_``, ``ghu_``, ``ghs_``, ``ghr_``, ``github_pat_``),
  GitLab (``glpat-``), ``Bearer …`` and ``Authorization: …`` values;
- the values of secret-looking query parameters (``password=``, ``token=``, ``access_token=`` …)
  and of netrc-style ``login USER password WORD`` / ``machine HOST password WORD`` lines;
- the password of a scheme-less ``user:password@host`` (a registry reference such as
  ``user:pw@registry:5000/team/x`` becomes ``registry:5000/team/x``);
- the values of credential keys in JSON, TOML, YAML or ``KEY=value`` text (a
  ``DOCKER_AUTH_CONFIG``-like ``{"auths": {"r": {"auth": "…"}}}``, ``"password": "…"``,
  ``identitytoken``, ``registrytoken``, ``token``, ``secret``, ``api_key`` …);
- the values of assignments whose name says it holds a secret (``HF_TOKEN=…``, ``--password=…``:
  a Dockerfile's ``ENV``/``ARG`` or a command line).

A value that only names where a secret comes from is kept, for credential keys and assignments
alike: a CI expression (``GITHUB_TOKEN: ${{ github.token }}``) or a whole shell variable
(``HF_TOKEN=$HF_TOKEN``, ``${HF_TOKEN}``): hints that say how to pass a secret stay readable.

A path to a netrc file or a credential helper's name carries no secret and is kept.

Invariants: pure and idempotent (``redact(redact(t)) == redact(t)``); text without a secret
comes back unchanged; the standard library only, Python 3.9-clean (this module is vendored into
images with the rest of ``audit.core``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

MASK = "***"

# scheme://userinfo@ : userinfo is everything up to the last '@' before the host part ends.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/?#\s@\"'<>]*@)+")
_TOKENS = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{16,}|glpat-[A-Za-z0-9_\-]{16,})"
)
_AUTH_HEADER = re.compile(
    r"(?P<kind>\bBearer\s+|\bAuthorization:\s*\w+\s+)(?P<value>[A-Za-z0-9._~+/=\-]{8,})",
    re.IGNORECASE,
)
_QUERY = re.compile(
    r"(?P<key>[?&;]\s*(?:password|passwd|pwd|token|access_token|private_token|auth_token|"
    r"api_key|apikey|secret|client_secret)=)(?P<value>[^&#\s\"'<>]+)",
    re.IGNORECASE,
)
_NETRC = re.compile(r"(?P<key>\b(?:login|machine)\s+\S+\s+password\s+)(?P<value>\S+)")
# user:password@host without a scheme (a scheme URL is handled by _USERINFO first); a masked
# password (user:***@) is left as it is, so redaction stays idempotent; an image reference
# pinned by digest (ubuntu:22.04@sha256:…) is a tag, not a password.
_BARE_USERINFO = re.compile(
    r"(?<![\w/:.@%+~-])[A-Za-z0-9._~%+-]+:(?!\*\*\*@)[^\s@/:\"'<>]+@(?=[A-Za-z0-9])(?!sha\d+:)"
)
# A value that only names where a secret comes from is no secret: a CI expression
# (``${{ github.token }}``, ``${{ secrets.X }}``) or a whole shell variable (``$HF_TOKEN``,
# ``${HF_TOKEN}``; not ``${HF_TOKEN:-default}``, whose default may be one). A literal value
# that merely starts with ``$`` (``$uper$ecret``) is not a whole variable, and is masked.
_END = r"(?![^\s\"',;&}|])"
_REFERENCE = (
    r"(?:\$\{\{|\$\{[A-Za-z_][A-Za-z0-9_]*\}" + _END + r"|\$[A-Za-z_][A-Za-z0-9_]*" + _END + ")"
)
_CREDENTIAL_KEY = re.compile(
    r"(?P<key>(?<![\w.-])[\"']?(?:[A-Za-z0-9]+_)*(?:auth|password|passwd|token|identitytoken|registrytoken|"
    r"access_token|refresh_token|secret|client_secret|api_key|apikey)[\"']?\s*[:=](?!=)\s*[\"']?)"
    r"(?P<value>(?!\*\*\*)(?!" + _REFERENCE + r")[^\s\"',;&}]+)",
    re.IGNORECASE,
)
# NAME=value where a word of the name says it holds a secret: HF_TOKEN=…, --password=…
# (TOKENIZERS_PARALLELISM is no secret: the words are whole, split at _ and -)
_ASSIGNMENT = re.compile(
    r"(?P<key>(?<![\w-])-*(?:[A-Za-z0-9]+[_-])*"
    r"(?:token|password|passwd|secret|credentials?|api[_-]?key)s?(?:[_-][A-Za-z0-9]+)*=(?!=))"
    r"(?P<value>(?!" + _REFERENCE + r")(?:\"[^\"]*\"|'[^']*'|[^\s\"'&;|]+))",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """``text`` without URL userinfo, known token shapes or secret query values."""
    if not text:
        return text
    return _redact(text)


def _redact(text: str) -> str:
    """Each pattern in turn, skipping one whose :func:`_may_match` says it cannot match (a
    report of thousands of lines holds no ``@`` and no credential word: nothing to scan). The
    words a text holds are looked for once (folding a long text to lower case is most of the
    cost), and again only after a pattern changed it."""
    words = _words(text)
    for pattern, replacement in _RULES:
        if _may_match(pattern, text, words):
            redacted = pattern.sub(replacement, text)
            if redacted != text:
                text, words = redacted, _words(redacted)
    return text


# The words (lower case) one of which every match of the key patterns holds: an ASCII text
# without any of them cannot match, so the scan is skipped; and those of the auth header.
_KEY_WORDS = ("auth", "passw", "pwd", "token", "secret", "api", "credential")
_HEADER_WORDS = ("bearer", "authorization")
_KEY_BYTES = tuple(word.encode() for word in _KEY_WORDS)
_HEADER_BYTES = tuple(word.encode() for word in _HEADER_WORDS)
Words = tuple[bool, bool]  # a key word, an auth-header word


def _words(text: str) -> Words:
    """Whether ``text`` holds a key word and an auth-header word, looked for case-blind (a
    case-blind pattern also matches four non-ASCII letters, such as the Kelvin sign for k: a
    non-ASCII text is folded through :data:`_FOLD` first)."""
    if text.isascii():
        lower = text.lower()
        return any(w in lower for w in _KEY_WORDS), any(w in lower for w in _HEADER_WORDS)
    folded = _ascii_fold(text)
    return any(w in folded for w in _KEY_BYTES), any(w in folded for w in _HEADER_BYTES)


def _may_match(pattern: re.Pattern[str], text: str, words: Words) -> bool:
    """False only when ``pattern`` cannot match ``text``: a character or word every match holds
    is absent (``words``: :func:`_words` of ``text``). Never a false "no"."""
    if pattern is _USERINFO or pattern is _BARE_USERINFO:
        return "@" in text
    if pattern is _TOKENS:
        return "gh" in text or "github_pat_" in text or "glpat-" in text
    if pattern is _NETRC:
        return "password" in text
    if pattern is _QUERY or pattern is _ASSIGNMENT:
        return words[0] and "=" in text
    if pattern is _CREDENTIAL_KEY:
        return words[0] and ("=" in text or ":" in text)
    return words[1]  # _AUTH_HEADER


# The only non-ASCII characters a case-blind pattern matches as an ASCII letter (checked over
# all of Unicode): dotted capital I and dotless i as ``i``, long s as ``s``, the Kelvin sign as
# ``k``. A text folded through this table holds a word wherever a case-blind pattern sees it.
_FOLD = {0x130: "i", 0x131: "i", 0x17F: "s", 0x212A: "k"}


def _ascii_fold(text: str) -> bytes:
    """``text`` as UTF-8 with its ASCII letters in lower case, :data:`_FOLD`'s letters made
    ASCII first (an arrow or an accent in a report no longer makes every word check answer
    "maybe"). Only ASCII letters are lowered, in one pass over bytes: Unicode's lower case of
    a long non-ASCII text costs ten times as much, and a multi-byte character holds no ASCII
    byte, so it can neither hide a word nor make one."""
    if any(chr(code) in text for code in _FOLD):
        text = text.translate(_FOLD)
    return text.encode("utf-8", "surrogatepass").lower()


_MASKED_USERINFO = re.compile(r"[^:@]*:" + re.escape(MASK) + "@")


def _masked(group: str) -> Callable[[re.Match[str]], str]:
    """A replacement keeping the match's ``group`` and masking the rest."""
    return lambda match: match.group(group) + MASK


def _without_userinfo(match: re.Match[str]) -> str:
    """The URL start without its userinfo; ``user:***@`` (already masked) is kept as it is."""
    userinfo = match.group(0)[len(match.group("scheme")) :]
    return match.group(0) if _MASKED_USERINFO.fullmatch(userinfo) else match.group("scheme")


# In this order: a URL's userinfo goes before a bare ``user:password@`` is looked for.
_RULES: tuple[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = (
    (_USERINFO, _without_userinfo),
    (_TOKENS, MASK),
    (_AUTH_HEADER, _masked("kind")),
    (_QUERY, _masked("key")),
    (_BARE_USERINFO, ""),
    (_CREDENTIAL_KEY, _masked("key")),
    (_NETRC, _masked("key")),
    (_ASSIGNMENT, _masked("key")),
)


# C0 controls but tab and newline, DEL and the C1 controls: what a terminal acts on (ESC
# starts a colour, title or clear-screen sequence; CR and backspace overwrite what was shown).
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with every control character a terminal would act on written as a visible
    ``\\u00XX`` (an image's package named ``x\\x1b[2J`` prints as ``x\\u001b[2J``, clearing
    nothing). Tab and newline are kept. Invariants: idempotent; a text without such a
    character comes back unchanged; inside a JSON string the escape means the same character,
    so a JSON document stays valid and equal."""
    if not _CONTROLS.search(text):
        return text
    return _CONTROLS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def redact_all(lines: list[str]) -> list[str]:
    """Each line redacted; the list's length and order are kept."""
    return [redact(line) for line in lines]


_SCP_LIKE = re.compile(r"^(?:[^@/\s]+@)?(?P<host>[A-Za-z0-9.\-]+):(?!//)(?P<path>[^\s]+)$")


def public_source_url(remote: str) -> str:
    """A git remote as a credential-free ``https://`` URL, or ``""`` when it is not public.

    A CI clone URL (a token as userinfo before ``@gitlab.example.com/team/images.git``) and
    ``git@github.com:org/repo.git`` both become ``https://HOST/PATH`` (without ``.git``);
    ``ssh://`` and ``git://`` remotes keep host and path; a local path or ``file://``
    remote has no public address and gives ``""``.
    """
    remote = remote.strip()
    if not remote:
        return ""
    scp = _SCP_LIKE.match(remote)
    if scp and "://" not in remote:
        host, path = scp.group("host"), scp.group("path")
    else:
        try:
            parts = urlsplit(remote)
            host = parts.hostname or ""
            port = parts.port
        except ValueError:
            return ""
        if parts.scheme not in ("http", "https", "ssh", "git", "git+ssh", "git+https") or not host:
            return ""
        if port and parts.scheme in ("http", "https"):
            host = f"{host}:{port}"
        path = parts.path
    path = path.strip("/")
    if path.endswith(".git"):
        path = path[: -len(".git")]
    url = urlunsplit(("https", host, f"/{path}" if path else "", "", ""))
    return redact(url)


def redact_json(value: Any) -> Any:
    """A JSON-like value with every string in it (keys included) redacted; shape kept (a tuple
    becomes a list, a dict subclass a dict).

    A report holds hundreds of thousands of strings: the exact JSON types are told apart by
    ``type`` and a string in a container is redacted without another call of this function;
    anything else (a subclass) takes the general path, with the same result."""
    kind = type(value)
    if kind is str:
        return redact(value)
    if kind is dict:
        return {
            (redact(key) if type(key) is str else redact_json(key)): (
                redact(item) if type(item) is str else redact_json(item)
            )
            for key, item in value.items()
        }
    if kind is list or kind is tuple:
        return [redact(item) if type(item) is str else redact_json(item) for item in value]
    if value is None or kind is bool or kind is int or kind is float:
        return value
    return _redact_subclass(value)


def _redact_subclass(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact_json(key): redact_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_json(item) for item in value]
    return value
