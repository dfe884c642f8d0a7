"""The walk's cache: layer deltas by diff-id, image configs by image id.

Layout under the cache root (``$XDG_CACHE_HOME/layer-audit/walk``, ``~/.cache`` when unset)::

    v3/layers/<hex of the diff-id>.json    a header line, then the delta's JSON
    v3/configs/<hex of the image id>.json  the config's bytes, exactly

Invariants:

- a layer's delta depends only on its bytes, and a diff-id names those bytes: an entry never
  goes stale. The format is versioned twice (the ``v3`` folder and the header's ``format``):
  a change of what a delta holds misses the old entries, never misreads them;
- every entry is checked before use (the header names the diff-id and the sha256 of the body;
  a config's sha256 is its image id): a damaged, truncated or foreign entry reads as absent and
  is written again by the next walk that reads the layer;
- writes are atomic (a temporary file beside the entry, named as :mod:`audit.host.atomic`
  names its temporaries so its clean-up sweeps what a killed run left, then a rename), so
  concurrent walks never see half an entry; two runs writing the same entry write the same
  bytes. They are not synced to disk: an entry a crash damaged fails its check and is written
  again, and a walk does not wait on a busy disk's journal for a cache;
- a cache that cannot be written (read-only, full) costs speed, never the walk: the failure is
  counted in :attr:`CacheStats.write_errors`.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path

from audit.history.walk.delta import FORMAT, LayerDelta, delta_from_json, delta_to_json
from audit.host import atomic

# v2: the loader model's facts (delta format /2); v3: the text of site folders' .pth files
# and of /etc/passwd
VERSION = "v3"


def default_root(environ: dict[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/layer-audit/walk`` (``~/.cache/layer-audit/walk`` when unset)."""
    env = os.environ if environ is None else environ
    home = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(home) / "layer-audit" / "walk"


@dataclass
class CacheStats:
    """What the cache did in one walk."""

    layer_hits: int = 0
    layer_misses: int = 0
    config_hits: int = 0
    writes: int = 0
    write_errors: int = 0
    damaged: int = 0


def _hex(digest: str) -> str | None:
    if not digest.startswith("sha256:") or len(digest) != 71:
        return None
    text = digest[7:]
    return text if all(c in "0123456789abcdef" for c in text) else None


def _digest(data: bytes) -> str:
    return "sha256:" + str(sha256(data).hexdigest())


class WalkCache:
    """Deltas and configs on disk (``root`` None: a cache that keeps nothing)."""

    def __init__(self, root: Path | None) -> None:
        self.root = root / VERSION if root is not None else None
        self.stats = CacheStats()

    def _path(self, kind: str, digest: str) -> Path | None:
        text = _hex(digest)
        if self.root is None or text is None:
            return None
        return self.root / kind / f"{text}.json"

    def _read(self, path: Path | None) -> bytes | None:
        if path is None:
            return None
        try:
            return path.read_bytes()
        except OSError:
            return None

    def _write(self, path: Path | None, data: bytes) -> None:
        if path is None:
            return
        try:
            _replace(path, data)
            self.stats.writes += 1
        except OSError:
            self.stats.write_errors += 1

    # ------------------------------------------------------------------ layers

    def delta(self, diff_id: str) -> LayerDelta | None:
        """The cached delta of ``diff_id``, or None (absent, damaged, another format)."""
        data = self._read(self._path("layers", diff_id))
        found, damaged = _parse_entry(data, diff_id) if data is not None else (None, False)
        self.stats.damaged += damaged
        if found is None:
            self.stats.layer_misses += 1
        else:
            self.stats.layer_hits += 1
        return found

    def put_delta(self, diff_id: str, delta: LayerDelta) -> None:
        body = json.dumps(delta_to_json(delta), separators=(",", ":"), ensure_ascii=False)
        encoded = body.encode("utf-8", "surrogatepass")
        header = {"format": FORMAT, "diff_id": diff_id, "body": _digest(encoded)}
        data = json.dumps(header, sort_keys=True).encode() + b"\n" + encoded
        self._write(self._path("layers", diff_id), data)

    # ------------------------------------------------------------------ configs

    def config(self, image_id: str) -> bytes | None:
        """The config whose sha256 is ``image_id``, or None."""
        data = self._read(self._path("configs", image_id))
        if data is None:
            return None
        if _digest(data) != image_id:
            self.stats.damaged += 1
            return None
        self.stats.config_hits += 1
        return data

    def put_config(self, data: bytes) -> None:
        self._write(self._path("configs", _digest(data)), data)


def _replace(path: Path, data: bytes) -> None:
    """``data`` into a temporary file beside ``path``, renamed over it (no fsync)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.clean_temporaries(path.parent)
    prefix = f".{path.name}.{atomic.TEMP_MARKER}-{os.getpid()}-"
    fd, name = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
    temporary = Path(name)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; a shared cache is read by others too
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        temporary.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise


def _parse_entry(data: bytes, diff_id: str) -> tuple[LayerDelta | None, bool]:
    """(the delta, or None; whether the entry is damaged). An entry of another format or for
    another diff-id is a plain miss, not damage."""
    head, newline, body = data.partition(b"\n")
    try:
        header = json.loads(head)
    except (ValueError, RecursionError):
        return None, True
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        return None, not isinstance(header, dict)
    if not newline or header.get("diff_id") != diff_id or header.get("body") != _digest(body):
        return None, True
    try:
        return delta_from_json(json.loads(body.decode("utf-8", "surrogatepass"))), False
    except (ValueError, KeyError, TypeError, RecursionError, UnicodeDecodeError):
        return None, True
