"""The layer walk's entry point: ``walk(spec, context) -> WalkResult``.

One walk: parse the spec, ask its source for the config and the layers whose deltas the cache
does not hold (the source verifies every layer it reads against the config's diff-ids), store
what was read, and fold the deltas in order into a :class:`~audit.history.model.History`
(producer ``walk``; ``states[0]`` the empty image). Every state the walk needs is passed in
:class:`WalkContext`: no module keeps any.

Errors are the contract's (:mod:`audit.errors`): a spec, file or image that is not what it
says, exit 2; an engine, registry or network that does not answer, exit 3. Nothing is written
anywhere but the cache.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from audit.docker.container import daemon
from audit.errors import BadInput, ImageFormatError
from audit.history.model import History
from audit.history.walk.cache import CacheStats, WalkCache, default_root
from audit.history.walk.config import MACHINES, ConfigError, OciConfig, parse_config
from audit.history.walk.delta import LayerDelta
from audit.history.walk.engine import fetch_engine
from audit.history.walk.files import exists, fetch_file
from audit.history.walk.fold import fold
from audit.history.walk.layer import CUDA_FAMILIES, ElfReader
from audit.history.walk.layout import _same_platform
from audit.history.walk.registry import RegistrySettings, fetch_registry
from audit.history.walk.source import Fetched, Known, SourceSettings, digest_of
from audit.history.walk.spec import (
    DOCKER_ARCHIVE,
    ENGINE,
    OCI,
    ImageSpec,
    parse_spec,
    shown_spec,
)


def elf_facts(name: str, stream: IO[bytes], size: int) -> Mapping[str, Any]:
    """The default ELF hook: :func:`audit.native.elfread.layer_facts`, pyelftools imported
    only when a layer is read (a walk of cached layers reads none; benchmarks/bench_walk.py's
    second walk pays ~30 ms less start-up for it)."""
    from audit.native.elfread import layer_facts

    return layer_facts(name, stream, size)


def host_platform() -> str:
    """``linux/amd64``, ``linux/arm64``: this machine's, as image platforms are written."""
    machine = os.uname().machine
    arch = next((goarch for goarch, m in MACHINES.items() if m == machine), machine)
    return f"linux/{arch}"


@dataclass(frozen=True)
class WalkContext:
    """Everything a walk reads besides the image: where the cache is (None: no cache), how to
    reach the engine (a docker SDK client factory) and registries, which platform to pick from
    an index (None: the host's), the ELF hook (pyelftools, reading each member as it streams:
    :func:`audit.native.elfread.layer_facts`; None records the files without their facts)
    and the library families to record."""

    cache_root: Path | None = field(default_factory=default_root)
    docker: Callable[[], Any] = daemon
    registry: RegistrySettings = field(default_factory=RegistrySettings)
    platform: str | None = None
    elf_reader: ElfReader | None = elf_facts
    families: tuple[str, ...] = CUDA_FAMILIES


@dataclass(frozen=True)
class LayerFacts:
    """One layer: its diff-id, tar size and non-folder member count, whether its delta came
    from the cache, and what was read only in part."""

    diff_id: str
    size: int
    files: int
    cached: bool
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ImageFacts:
    """The walked image: id (its config's sha256), platform, tags, the config's Env (PATH,
    LD_LIBRARY_PATH, ...), its layers in order, and what the walk read to know it."""

    id: str
    platform: str
    tags: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    layers: tuple[LayerFacts, ...]
    source: str
    bytes_read: int
    exported: bool
    manifest_digest: str = ""

    @property
    def diff_ids(self) -> tuple[str, ...]:
        return tuple(layer.diff_id for layer in self.layers)


@dataclass(frozen=True)
class WalkResult:
    """The history, the image's facts and what the cache did."""

    history: History
    image: ImageFacts
    cache: CacheStats


def walk(spec: str, context: WalkContext) -> WalkResult:
    """Walk the image ``spec`` names (see :mod:`audit.history.walk.spec` for the syntax)."""
    parsed = parse_spec(spec, exists)
    cache = WalkCache(context.cache_root)
    known = Known(cache.delta, cache.config)
    settings = SourceSettings(context.platform, host_platform(), context.elf_reader,
                              context.families)  # fmt: skip
    fetched = _fetch(parsed, context, settings, known)
    where = shown_spec(spec)
    config = _config(fetched.config, where)
    _check_platform(config, context.platform, where)
    deltas = _deltas(config, fetched, known, where)
    if cache.stats.config_hits == 0:
        cache.put_config(fetched.config)
    for diff_id, delta in fetched.deltas.items():
        cache.put_delta(diff_id, delta)
    history = fold(where, config, deltas)
    image = _facts(fetched, config, deltas, where)
    return WalkResult(history, image, cache.stats)


def _fetch(
    spec: ImageSpec, context: WalkContext, settings: SourceSettings, known: Known
) -> Fetched:
    if spec.kind == ENGINE:
        return fetch_engine(spec.target, context.docker, settings, known)
    if spec.kind in (DOCKER_ARCHIVE, OCI):
        return fetch_file(spec.target, spec.tag, settings, known)
    return fetch_registry(spec.target, context.registry, settings, known)


def _config(data: bytes, where: str) -> OciConfig:
    try:
        return parse_config(data)
    except ConfigError as exc:
        raise ImageFormatError(f"{where}: the image config: {exc}", "check the image") from None


def _check_platform(config: OciConfig, wanted: str | None, where: str) -> None:
    if wanted and config.platform and not _same_platform(config.platform, wanted):
        raise BadInput(
            f"{where}: the image is {config.platform}, not {wanted}",
            "drop --platform, or give the image of that platform",
        )


def _deltas(config: OciConfig, fetched: Fetched, known: Known, where: str) -> dict[str, LayerDelta]:
    deltas: dict[str, LayerDelta] = {}
    for index, diff_id in enumerate(config.diff_ids):
        delta = fetched.deltas.get(diff_id) or known.delta(diff_id)
        if delta is None:
            raise ImageFormatError(
                f"{where}: layer {index + 1} ({diff_id}) was not read",
                "the image changed while it was read: walk it again",
            )
        deltas[diff_id] = delta
    return deltas


def _facts(
    fetched: Fetched, config: OciConfig, deltas: dict[str, LayerDelta], where: str
) -> ImageFacts:
    layers = tuple(
        LayerFacts(d, deltas[d].size, deltas[d].files, d not in fetched.deltas, deltas[d].notes)
        for d in config.diff_ids
    )
    return ImageFacts(
        id=digest_of(fetched.config), platform=config.platform, tags=fetched.tags,
        env=config.env, layers=layers, source=where, bytes_read=fetched.size,
        exported=fetched.exported, manifest_digest=fetched.manifest_digest,
    )  # fmt: skip
