"""What every image source shares: what it hands back, what is already known, its errors.

PURE: standard library and the walk's own modules. A source (the engine, a file, a registry)
reads an image's config and the layers whose deltas are not :class:`Known` yet, and returns a
:class:`Fetched`. :func:`pair_layers` checks what was read against the config: the i-th layer's
uncompressed bytes hash to the config's i-th diff-id (and its blob to its descriptor's digest),
or the image is refused: a walk never trusts a layer it did not verify.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from hashlib import sha256

from audit.errors import EnvironmentProblem, ImageFormatError
from audit.history.walk.archive import ArchiveError
from audit.history.walk.blobs import LayerBlob, UnsupportedCompression
from audit.history.walk.config import ConfigError, parse_config
from audit.history.walk.delta import LayerDelta
from audit.history.walk.layer import CUDA_FAMILIES, ElfReader, LayerFormatError
from audit.history.walk.layout import LayoutError, Selection

FORMAT_HINT = (
    "give an image as docker save or an OCI layout writes it (docker save IMAGE -o FILE); "
    "a damaged or truncated file must be written again"
)


@dataclass(frozen=True)
class Fetched:
    """What a source read: the config's bytes, the deltas of the layers it read (by diff-id),
    the image's tags, the bytes it read, and whether the engine exported the image."""

    config: bytes
    deltas: Mapping[str, LayerDelta]
    tags: tuple[str, ...] = ()
    size: int = 0
    exported: bool = False
    manifest_digest: str = ""
    platform: str = ""


class Known:
    """Deltas and configs already known (the cache), each asked once and kept for this walk:
    once :meth:`has` says yes, :meth:`delta` answers, whatever another run does meanwhile."""

    def __init__(
        self,
        delta: Callable[[str], LayerDelta | None] = lambda _: None,
        config: Callable[[str], bytes | None] = lambda _: None,
    ) -> None:
        self._lookup, self._config = delta, config
        self._deltas: dict[str, LayerDelta | None] = {}

    def delta(self, diff_id: str) -> LayerDelta | None:
        if diff_id not in self._deltas:
            self._deltas[diff_id] = self._lookup(diff_id)
        return self._deltas[diff_id]

    def has(self, diff_id: str) -> bool:
        return self.delta(diff_id) is not None

    def config(self, image_id: str) -> bytes | None:
        return self._config(image_id)


@dataclass(frozen=True)
class SourceSettings:
    """What a source needs to choose and read: the platform asked for (None: the host's), the
    host's, the ELF hook and the library families."""

    platform: str | None = None
    host: str = "linux/amd64"
    elf_reader: ElfReader | None = None
    families: tuple[str, ...] = field(default=CUDA_FAMILIES)

    def diff_ids(self, selection: Selection) -> tuple[str, ...]:
        """The config's diff-ids, one per layer of ``selection`` (else :class:`LayoutError`)."""
        diff_ids = parse_config(selection.config).diff_ids
        if len(diff_ids) != len(selection.layers):
            raise LayoutError(
                f"the manifest names {len(selection.layers)} layers, the config "
                f"{len(diff_ids)} diff-ids"
            )
        return diff_ids

    @contextlib.contextmanager
    def errors(self, where: str) -> Iterator[None]:
        """Format errors raised inside become the typed errors of the contract, naming
        ``where`` (exit 2; a layer this Python cannot decompress: exit 3)."""
        try:
            yield
        except UnsupportedCompression as exc:
            raise EnvironmentProblem(
                f"{where}: {exc}", "pip install zstandard where layer-audit runs"
            ) from None
        except (ArchiveError, LayoutError, LayerFormatError, ConfigError) as exc:
            hint = getattr(exc, "hint", "") or FORMAT_HINT
            raise ImageFormatError(f"{where}: {exc}", hint) from None


def digest_of(data: bytes) -> str:
    return "sha256:" + str(sha256(data).hexdigest())


def pair_layers(
    selection: Selection,
    blobs: Mapping[str, LayerBlob],
    known: Known,
    where: str,
    size: int,
    *,
    exported: bool = False,
) -> Fetched:
    """The :class:`Fetched` of a selection whose layers were read into ``blobs`` (by name);
    every layer verified against the config (see the module's invariant)."""
    settings = SourceSettings()
    with settings.errors(where):
        if selection.config_digest and digest_of(selection.config) != selection.config_digest:
            raise LayoutError(f"the config does not hash to {selection.config_digest}")
        diff_ids = settings.diff_ids(selection)
        deltas: dict[str, LayerDelta] = {}
        for index, ((name, blob_digest), diff_id) in enumerate(
            zip(selection.layers, diff_ids, strict=True)
        ):
            blob = blobs.get(name)
            if blob is None:
                if known.has(diff_id):
                    continue
                raise LayoutError(f"layer {index + 1} ({name}) is not in the image")
            _check(blob, index, name, blob_digest, diff_id)
            if blob.delta is not None:
                deltas[diff_id] = blob.delta
    return Fetched(
        selection.config, deltas, selection.tags, size, exported,
        selection.manifest_digest, selection.platform,
    )  # fmt: skip


def _check(blob: LayerBlob, index: int, name: str, blob_digest: str, diff_id: str) -> None:
    if blob_digest and blob.digest != blob_digest:
        raise LayoutError(
            f"layer {index + 1} ({name}): its bytes hash to {blob.digest}, the manifest says "
            f"{blob_digest} (damaged or tampered with)"
        )
    if blob.diff_id != diff_id:
        raise LayoutError(
            f"layer {index + 1} ({name}): its tar hashes to {blob.diff_id}, the config says "
            f"{diff_id} (damaged or tampered with)"
        )
