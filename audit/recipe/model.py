"""An image recipe as frozen data: base, platform, CUDA tag, stages of layers, policy.

``audit.recipe.parse.load_recipe`` builds a :class:`Recipe` from ``images/<name>/image.toml``
once, validating everything; all later code trusts it. Key paths are 1-based:
``stage[2].layer[1]`` is the first layer of the second stage (v2).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from audit.policy.model import Policy

DEFAULT_TAG_PATTERN = "{stage}-{arch}-{cuda}"
DEFAULT_LATEST_PATTERN = "latest-{arch}-{cuda}"
DEFAULT_INDEX_URL = "https://pypi.org/simple"


@dataclass(frozen=True)
class Index:
    """A package index the recipe declares; only declared indexes are ever used."""

    name: str
    url: str  # never holds credentials: those reach pip as BuildKit secrets


@dataclass(frozen=True)
class PipLayer:
    """Install one requirements file (locked per layer), optionally with one extra index."""

    requirements: str  # relative to the recipe folder, e.g. "requirements/v3-flashinfer.in"
    index: str | None = None  # name of a declared index, added as an extra index
    pre: bool = False  # allow pre-releases (nightlies)
    # pip's --no-deps re-pin: every line is name==version, installed even though something
    # installed asks for another version; reported as an override with what it breaks.
    no_deps: bool = False
    # the field's fix in one layer: these exact pins ("name==version", canonical names) win over
    # what the layer's resolution asks for, as a --no-deps re-pin right after it would
    override: tuple[str, ...] = ()

    @property
    def override_names(self) -> tuple[str, ...]:
        return tuple(pin.split("==", 1)[0] for pin in self.override)


@dataclass(frozen=True)
class RunLayer:
    """A shell step. The guard checks the environment after it like after a pip layer."""

    command: str
    # a file of the recipe folder fed to the command's standard input (a Dockerfile heredoc,
    # kept as a file: the file is bind-mounted for this step only, never left in a layer)
    stdin: str | None = None


@dataclass(frozen=True)
class CopyLayer:
    """Copy a file or folder from the recipe folder into the image."""

    src: str
    dest: str
    mode: str | None = None  # octal, e.g. "0755": COPY --chmod
    owner: str | None = None  # user[:group], names or ids: COPY --chown


@dataclass(frozen=True)
class WorkdirLayer:
    """Change the working folder for the layers after it (and the image): WORKDIR."""

    path: str  # absolute


@dataclass(frozen=True)
class EnvLayer:
    """Set environment variables (never secrets: those are BuildKit secrets)."""

    values: tuple[tuple[str, str], ...]
    # values may name variables set before (``${PATH}``): Docker expands them at build time
    expand: bool = False


Layer = PipLayer | RunLayer | CopyLayer | EnvLayer | WorkdirLayer


@dataclass(frozen=True)
class Healthcheck:
    """HEALTHCHECK of the final image: a command (exec list or shell string) and its timing,
    or ``disable`` (HEALTHCHECK NONE: switch off one the base image has)."""

    command: tuple[str, ...] | str | None = None
    interval: str | None = None
    timeout: str | None = None
    start_period: str | None = None
    retries: int | None = None
    disable: bool = False


@dataclass(frozen=True)
class ImageConfig:
    """How the final image starts (``[config]``): rendered at the end of the last stage.

    A list is the exec form (rendered as a JSON array), a string the shell form; nothing here
    holds a newline or control character (the parser refuses them)."""

    cmd: tuple[str, ...] | str | None = None
    entrypoint: tuple[str, ...] | str | None = None
    user: str | None = None
    expose: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    healthcheck: Healthcheck | None = None
    stopsignal: str | None = None
    shell: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return self == ImageConfig()


@dataclass(frozen=True)
class Stage:
    name: str  # v1 ... vN
    layers: tuple[Layer, ...]
    description: str = ""
    smoke: str | None = None  # a command run in the built stage image


@dataclass(frozen=True)
class Step:
    """One layer in context: which stage, its 1-based position, and its key path."""

    stage: Stage
    stage_number: int
    position: int
    layer: Layer

    @property
    def key_path(self) -> str:
        return f"stage[{self.stage_number}].layer[{self.position}]"

    @property
    def label(self) -> str:
        """Human name: ``v3 layer 2 (requirements/x.in)``."""
        detail = (
            self.layer.requirements
            if isinstance(self.layer, PipLayer)
            else type(self.layer).__name__.removesuffix("Layer").lower()
        )
        return f"{self.stage.name} layer {self.position} ({detail})"

    @property
    def slug(self) -> str:
        """File-name-safe id: ``v3-02``."""
        return f"{self.stage.name}-{self.position:02d}"


@dataclass(frozen=True)
class Recipe:
    name: str
    directory: Path  # project-relative: images/<name>
    base: str  # image reference, e.g. vllm/vllm-openai:glm53-flash-arm64-cu130
    base_digest: str | None  # sha256:..., encouraged
    platform: str  # linux/arm64
    cuda: str  # cu130
    interpreters: tuple[str, ...]  # inside the image, e.g. ("/usr/bin/python3",)
    repository: str  # what to tag, e.g. local/glm53-flash-vllm
    tag_pattern: str
    latest_tag_pattern: str
    index_url: str  # the primary index
    indexes: tuple[Index, ...]  # extra indexes a layer may name
    stages: tuple[Stage, ...]
    policy: Policy
    resolver: str = "pip-tools"  # "pip-tools" (in the image) or "uv" (here, for the target)
    # PEP 668: pip layers install into an externally managed interpreter (Debian/Ubuntu system
    # Python) with PIP_BREAK_SYSTEM_PACKAGES=1; off, pip refuses and the build says so (exit 2)
    break_system_packages: bool = False
    config: ImageConfig = ImageConfig()  # CMD, ENTRYPOINT, USER … of the last stage

    @property
    def source(self) -> Path:
        return self.directory / "image.toml"

    @property
    def arch(self) -> str:
        return self.platform.split("/")[1]

    @property
    def base_ref(self) -> str:
        """The base as FROM should name it: pinned by digest when one is given."""
        return f"{self.base}@{self.base_digest}" if self.base_digest else self.base

    def stage(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(name)

    def steps(self, until: str | None = None) -> Iterator[Step]:
        """Every layer in build order, up to and including stage ``until``."""
        if until is None:
            return iter(self._steps)
        last = next((n for n, s in enumerate(self.stages, 1) if s.name == until), len(self.stages))
        return (step for step in self._steps if step.stage_number <= last)

    @cached_property
    def _steps(self) -> tuple[Step, ...]:
        """Every layer's step, made on first use and kept: a recipe is frozen, and the gate
        asks one for its steps tens of times per image."""
        return tuple(
            Step(stage, number, position, layer)
            for number, stage in enumerate(self.stages, start=1)
            for position, layer in enumerate(stage.layers, start=1)
        )

    def index(self, name: str) -> Index:
        for index in self.indexes:
            if index.name == name:
                return index
        raise KeyError(name)

    def tag(self, stage: str) -> str:
        return self.tag_pattern.format(stage=stage, arch=self.arch, cuda=self.cuda)

    def latest_tag(self) -> str:
        return self.latest_tag_pattern.format(stage="latest", arch=self.arch, cuda=self.cuda)
