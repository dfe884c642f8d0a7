"""An image recipe as frozen data: base, platform, CUDA tag, stages of layers, policy.

``audit.recipe.parse.load_recipe`` builds a :class:`Recipe` from ``images/<name>/image.toml``
once, validating everything; all later code trusts it. Key paths are 1-based:
``stage[2].layer[1]`` is the first layer of the second stage (v2).

Stages form a graph, as a Dockerfile's do: each starts from an earlier stage (by default the
one before; v1 from ``[image] base``) or from an image of its own, and a layer may copy or
mount files from another stage. Invariants the parser guarantees and this module relies on:
a stage's parent and every stage a layer names come before it (file order is a topological
order); some stage's chain starts from ``[image] base``; pip layers live only in *audited*
stages (:meth:`Recipe.audited`), whose chain starts from the recorded base.
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
# BuildKit's own build arguments: declared in a stage (``ARG TARGETARCH``), filled per platform
PLATFORM_ARGS = (
    "TARGETPLATFORM", "TARGETOS", "TARGETARCH", "TARGETVARIANT",
    "BUILDPLATFORM", "BUILDOS", "BUILDARCH", "BUILDVARIANT",
)  # fmt: skip


@dataclass(frozen=True)
class Index:
    """A package index the recipe declares; only declared indexes are ever used."""

    name: str
    url: str  # never holds credentials: those reach pip as BuildKit secrets


@dataclass(frozen=True)
class Mount:
    """A BuildKit mount of one RUN (``RUN --mount=type=…``), kept on a run or pip layer.

    ``type`` is bind, cache, tmpfs, secret or ssh. A bind without ``from_`` mounts a file or
    folder of the recipe (``source``, recipe-relative: rendered under ``files/``); with
    ``from_`` (a stage name or an image) a path of that stage or image. A secret names only its
    ``id``: its value reaches the build as a BuildKit secret (``build --secret``), never as a
    file of the recipe, an ARG or an ENV. ``options`` are the remaining keys as BuildKit spells
    them (``sharing``, ``mode``, ``uid``, ``gid``, ``size``, ``required``, ``readonly``), each
    value one word without commas or quotes.
    """

    type: str
    target: str | None = None
    source: str | None = None
    from_: str | None = None
    id: str | None = None
    options: tuple[tuple[str, str], ...] = ()


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
    # a declared index that replaces the image's index_url for this layer only (a Dockerfile
    # RUN's own --index-url); None: the image's index_url
    primary_index: str | None = None
    mounts: tuple[Mount, ...] = ()  # the RUN's own BuildKit mounts (a cache, a secret …)

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
    mounts: tuple[Mount, ...] = ()  # the RUN's own BuildKit mounts (a cache, a bind …)


@dataclass(frozen=True)
class CopyLayer:
    """Copy a file or folder from the recipe folder into the image, or (``from_``) a path of
    an earlier stage or of another image (``COPY --from``: ``src`` is a path there)."""

    src: str
    dest: str
    mode: str | None = None  # octal, e.g. "0755": COPY --chmod
    owner: str | None = None  # user[:group], names or ids: COPY --chown
    from_: str | None = None  # a stage name (vK) or an image reference


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


@dataclass(frozen=True)
class ArgLayer:
    """Declare build arguments in the stage here (``ARG NAME``): later run layers see them in
    their environment, env layers with ``expand`` may name them. Defaults live in ``[args]``;
    the platform arguments (:data:`PLATFORM_ARGS`) are BuildKit's, filled per platform."""

    names: tuple[str, ...]


Layer = PipLayer | RunLayer | CopyLayer | EnvLayer | WorkdirLayer | ArgLayer


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
    parent: str | None = None  # the stage it starts from; None: ``base`` or the default
    base: str | None = None  # or an image of its own (``FROM base``), e.g. a runtime base
    base_digest: str | None = None
    target: str | None = None  # the Dockerfile's name for it: ``--target`` accepts it too
    config: ImageConfig = ImageConfig()  # CMD, ENTRYPOINT … set at the end of this stage

    @property
    def base_ref(self) -> str | None:
        """The stage's own image as FROM names it (pinned by digest when one is given)."""
        if self.base is None:
            return None
        return f"{self.base}@{self.base_digest}" if self.base_digest else self.base


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
    args: tuple[tuple[str, str], ...] = ()  # [args]: build arguments and their defaults
    # the base has no Python: this stage, built, is what the base record describes (its
    # ancestors and itself are the prelude, built without the guard)
    base_stage: str | None = None

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
        """The stage named ``name`` (``vK``), or whose Dockerfile name (``target``) it is."""
        for stage in self.stages:
            if name in (stage.name, stage.target):
                return stage
        raise KeyError(name)

    def steps(self, until: str | None = None) -> Iterator[Step]:
        """Every layer in build order; with ``until``, only those of the stages building it
        needs (:meth:`needs`: its chain and the stages it copies or mounts from). An unknown
        stage stops nowhere."""
        if until is None or not self._is_stage(until):
            return iter(self._steps)
        needed = set(self.needs(until))
        return (step for step in self._steps if step.stage.name in needed)

    # -- the stage graph ----------------------------------------------------------------------

    def parent(self, stage: Stage) -> Stage | None:
        """The stage ``stage`` starts from; None when it starts from an image."""
        if stage.parent is not None:
            return self.stage(stage.parent)
        if stage.base is not None or stage is self.stages[0]:
            return None
        return self.stages[self.stages.index(stage) - 1]

    def from_ref(self, stage: Stage) -> str:
        """What the stage's FROM names: its parent stage, its own image or ``[image] base``."""
        parent = self.parent(stage)
        if parent is not None:
            return parent.name
        return stage.base_ref or self.base_ref

    def lineage(self, stage: Stage) -> tuple[Stage, ...]:
        """The stage's chain, root first: what its image is built on, and itself."""
        chain = [stage]
        while (parent := self.parent(chain[-1])) is not None:
            chain.append(parent)
        return tuple(reversed(chain))

    def root_ref(self, stage: Stage) -> str:
        """The image the stage's chain starts from."""
        return self.from_ref(self.lineage(stage)[0])

    def audited(self, stage: Stage) -> bool:
        """Whether the stage builds on what the base record describes, so the guard can audit
        its layers: its chain starts from ``[image] base`` and, with ``base_stage``, passes
        through that stage after it (the prelude itself is not audited: it has no Python)."""
        chain = self.lineage(stage)
        if self.root_ref(stage) != self.base_ref:
            return False
        if self.base_stage is None:
            return True
        names = [s.name for s in chain]
        return self.base_stage in names and names[-1] != self.base_stage

    def needs(self, name: str) -> tuple[str, ...]:
        """The stages building ``name`` needs, in file order: its chain and, recursively, the
        stages its layers copy or mount from."""
        wanted: set[str] = set()
        todo = [self.stage(name)]
        while todo:
            stage = todo.pop()
            if stage.name in wanted:
                continue
            wanted.add(stage.name)
            parent = self.parent(stage)
            todo += [parent] if parent is not None else []
            todo += [self.stage(n) for n in _stages_named(stage) if self._is_stage(n)]
        return tuple(s.name for s in self.stages if s.name in wanted)

    def _is_stage(self, name: str) -> bool:
        return any(name in (s.name, s.target) for s in self.stages)

    def before(self, step: Step) -> frozenset[str]:
        """Slugs of the layers built before ``step`` in its own image (its chain's)."""
        chain = {s.name for s in self.lineage(step.stage)}
        return frozenset(
            s.slug
            for s in self._steps
            if s.stage.name in chain
            and (s.stage_number, s.position) < (step.stage_number, step.position)
        )

    @property
    def recorded_ref(self) -> str:
        """The image the base record describes: ``[image] base``, or (``base_stage``) the
        local tag ``lock --record-base`` and ``build`` give that stage built without guard."""
        if self.base_stage is None:
            return self.base_ref
        return f"{self.repository}:{self.tag(self.base_stage)}-base"

    @property
    def recorded_base(self) -> str:
        """How the base record names its base: ``base``, plus ``+vK`` with ``base_stage``."""
        return self.base if self.base_stage is None else f"{self.base}+{self.base_stage}"

    def layer_index_url(self, layer: PipLayer) -> str:
        """A pip layer's primary index: its own ``primary_index``, else ``index_url``."""
        return self.index(layer.primary_index).url if layer.primary_index else self.index_url

    def args_of(self, stage: Stage) -> tuple[str, ...]:
        """Every build argument the stage's arg layers declare, in order."""
        layers = [layer for layer in stage.layers if isinstance(layer, ArgLayer)]
        return tuple(name for layer in layers for name in layer.names)

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


def _stages_named(stage: Stage) -> list[str]:
    """What the stage's layers copy or mount from (stage names and images alike)."""
    found = []
    for layer in stage.layers:
        if isinstance(layer, CopyLayer) and layer.from_:
            found.append(layer.from_)
        if isinstance(layer, PipLayer | RunLayer):
            found += [mount.from_ for mount in layer.mounts if mount.from_]
    return found
