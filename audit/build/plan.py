"""The build plan: a pure function from a recipe and options to the exact builds to run.

Nothing here touches Docker, the network or the clock: the executor (:mod:`audit.build.run`)
gathers facts (the docker client, provenance, secret files, a unique token) and hands them in,
so every decision (targets, argv, tags, labels, secrets, network) is unit-tested.

Order of builds: for a base without Python, first the prelude up to ``base_stage`` (tagged as
the image the base record describes, so it can be checked before any guarded layer); then the
target stage (one build that runs every guarded layer it needs), then each other stage when
building all stages (the ones it shares come from BuildKit's cache in seconds, the branches
beside it build). Each build gets a temporary unique tag; final tags move only after every
build of the run succeeded, so a failed build moves no tag.

A recipe's build arguments (``--build-arg NAME=VALUE``), its secrets (``--secret
id=ID,src=FILE``: what a layer's secret mount reads) and SSH agents (``--ssh``) reach BuildKit
as BuildKit's own options, never as a label, an ENV or a file of the context.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from audit import __version__
from audit.errors import UsageError
from audit.recipe.model import PipLayer, Recipe, RunLayer
from audit.redact import redact
from audit.render.stages import BuildArgs, check_build_args

TRAIL_DIR = "/var/lib/layer-audit/trail"
# BuildKit secret ids (names, not secrets): RUNs mount them at /run/secrets/<id>.
SECRET_CA = "pip-ca"  # noqa: S105
SECRET_NETRC = "pip-netrc"  # noqa: S105
NO_GUARD_ARG = "LAYER_AUDIT_NO_GUARD"
INLINE_CACHE_ARG = "BUILDKIT_INLINE_CACHE"  # BuildKit embeds its cache keys in the image
OCI = "org.opencontainers.image"
CREATED_LABEL = f"{OCI}.created"
LABEL_PREFIX = "io.layer-audit"
NETWORK_AUTO = "auto"
NETWORK_DEFAULT = "default"
LOCAL_HOSTS = ("localhost",)
SOURCE_DATE_EPOCH = "SOURCE_DATE_EPOCH"
DIRTY_SUFFIX = "-dirty"


BuildMode = Literal["buildx", "buildkit-env"]


@dataclass(frozen=True)
class DockerClient:
    """A docker client program and how it runs BuildKit builds."""

    path: str
    mode: BuildMode
    version: str


def build_command(client: DockerClient, *, push: bool = False) -> list[str]:
    """The argv prefix of a BuildKit build whose result lands in the local image store, or
    (``push``: a buildx multi-platform build, which no local store can hold) in the registry."""
    if client.mode == "buildx":
        return [client.path, "buildx", "build", "--push" if push else "--load"]
    return [client.path, "build"]


@dataclass(frozen=True)
class BuildOptions:
    """The command line of ``python -m audit build``, parsed once."""

    image: str = "demo"
    stage: str | None = None
    platform: str | None = None
    push: bool = False
    builder: str | None = None
    docker: str | None = None
    network: str = NETWORK_AUTO
    ca_bundle: Path | None = None
    guard: bool = True
    no_cache: bool = False
    cache_from: tuple[str, ...] = ()  # image references whose inline cache the build may use
    cache_to: str | None = None  # push the target's image here, with its inline cache
    dry: bool = False  # the base is a replica: real layers, real guard, no runnable tag
    build_args: BuildArgs = ()  # --build-arg NAME=VALUE: the recipe's [args] and arg layers
    secrets: tuple[str, ...] = ()  # --secret id=ID,src=FILE (or env=VAR): a secret mount's value
    ssh: tuple[str, ...] = ()  # --ssh default[=SOCKET]: an ssh mount's agent


@dataclass(frozen=True)
class Provenance:
    """Facts the OCI labels record, gathered by the executor.

    ``source`` is already a public ``https://`` URL without credentials (or ""), and
    ``created`` comes from ``SOURCE_DATE_EPOCH`` when set (see :func:`created_time`), so the
    same commit built twice carries the same labels.
    """

    source: str  # where the recipe lives (public git remote URL), "" when unknown
    revision: str  # git commit of the checkout, "" when unknown
    created: str  # RFC 3339 time of this build
    recipe_digest: str  # sha256 over the recipe folder
    locks_digest: str  # sha256 over the recipe's locks
    dirty: bool = False  # the recipe, locks or templates differ from the commit
    base_image_id: str = ""  # from locks/<image>/base.json
    base_digest: str = ""  # the base's manifest digest, recorded or pinned, "" when unknown


@dataclass(frozen=True)
class Secret:
    """A BuildKit secret: the RUN mounts it at /run/secrets/<id>; never an ARG, ENV or label."""

    id: str
    src: Path

    @property
    def flag(self) -> str:
        return f"id={self.id},src={self.src}"


@dataclass(frozen=True)
class StageBuild:
    """One ``docker build --target <stage>``: its argv, temporary tag and the tags it earns."""

    stage: str
    argv: tuple[str, ...]
    temp_ref: str
    tags: tuple[str, ...]  # full references, repository:tag
    smoke: str | None


@dataclass(frozen=True)
class BuildPlan:
    image: str
    context: Path
    platform: str
    arch: str
    network: str | None
    secrets: tuple[Secret, ...]
    labels: tuple[tuple[str, str], ...]
    builds: tuple[StageBuild, ...]
    push: bool
    guard: bool
    cache_to: str | None = None
    multi_platform: bool = False  # buildx pushes the final tags itself; no local image
    prelude: StageBuild | None = None  # base_stage built first, tagged as the recorded base

    @property
    def target(self) -> str:
        return self.builds[0].stage

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(tag for build in self.builds for tag in build.tags)


def target_stages(recipe: Recipe, stage: str | None) -> tuple[str, ...]:
    """The stages to build, target first: ``stage`` (a name ``vK`` or a stage's ``target``)
    alone, or every stage when none is named."""
    names = [s.name for s in recipe.stages]
    if stage is None:
        return (names[-1], *names[:-1])
    try:
        return (recipe.stage(stage).name,)
    except KeyError:
        known = names + [s.target for s in recipe.stages if s.target]
        raise UsageError(
            f"--stage {stage}: {recipe.source} has no such stage",
            f"choose one of: {', '.join(known)}",
        ) from None


SECRET_SPEC = ("id", "src", "source", "env", "type", "required")


def check_passthrough(options: BuildOptions) -> None:
    """``--secret`` and ``--ssh`` as BuildKit reads them; a secret never takes the id of the
    build's own pip secrets (exit 2 otherwise, naming the option, never its value)."""
    for spec in options.secrets:
        keys = dict(part.partition("=")[::2] for part in spec.split(","))
        if not keys.get("id") or any(key not in SECRET_SPEC for key in keys):
            raise UsageError(
                "--secret: expected id=ID,src=FILE (or id=ID,env=VAR)",
                "name the id a secret mount of the recipe reads, and where its value is",
            )
        if keys["id"] in (SECRET_CA, SECRET_NETRC):
            raise UsageError(
                f"--secret id={keys['id']}: the build's own secret for pip",
                "give pip's CA bundle with --ca-bundle and index credentials with "
                f"${CREDENTIALS_ENV} or a netrc file",
            )
    for spec in options.ssh:
        if not spec or any(c.isspace() or c == "," for c in spec):
            raise UsageError(f"--ssh {spec!r}: expected ID[=SOCKET|KEY]", "e.g. --ssh default")


def effective_platform(recipe: Recipe, platform: str | None) -> tuple[str, str]:
    """``(platform, arch)``: the recipe's unless ``--platform`` overrides it.

    A list (``linux/amd64,linux/arm64``, one multi-arch tag) gives the arches joined with
    ``-`` (``amd64-arm64``), which takes ``{arch}``'s place in the tags.
    """
    chosen = platform or recipe.platform
    arches = []
    for item in chosen.split(","):
        parts = item.split("/")
        if len(parts) not in (2, 3) or not all(parts):
            raise UsageError(
                f"--platform {chosen}: expected os/arch, e.g. linux/arm64",
                "pass --platform linux/amd64 or linux/arm64 (a comma-separated list with "
                "buildx and --push), or leave it out for the recipe's",
            )
        arches.append(parts[1])
    return chosen, "-".join(arches)


def check_multi_platform(client: DockerClient, options: BuildOptions, platform: str) -> bool:
    """True for a multi-platform build, which needs buildx and ``--push`` (exit 2 otherwise):
    no local image store holds a multi-platform image, so buildx pushes it as one tag."""
    if "," not in platform:
        return False
    if client.mode != "buildx":
        raise UsageError(
            f"--platform {platform}: one multi-arch tag needs buildx; {client.path} "
            f"{client.version} has none",
            "install the buildx plugin, or build each platform on its own",
        )
    if not options.push or not options.guard:
        raise UsageError(
            f"--platform {platform}: a multi-platform image cannot be loaded locally",
            "add --push, with the guard on (buildx pushes the one multi-arch tag after the "
            "guarded build)",
        )
    return True


DRY_SUFFIX = "-dry"


def stage_tags(recipe: Recipe, stage: str, arch: str, *, dry: bool = False) -> tuple[str, ...]:
    """Final references for ``stage``: its own tag, plus the moving latest for the last stage.

    A dry build (on a replica base) gets only ``<tag>-dry`` (``v2-arm64-cu130-dry``): it can be
    inspected and audited, but no runnable tag and no latest tag ever points at it.
    """
    values = {"stage": stage, "arch": arch, "cuda": recipe.cuda}
    tags = [f"{recipe.repository}:{recipe.tag_pattern.format(**values)}"]
    if dry:
        return (tags[0] + DRY_SUFFIX,)
    if stage == recipe.stages[-1].name:
        latest = recipe.latest_tag_pattern.format(**dict(values, stage="latest"))
        tags.append(f"{recipe.repository}:{latest}")
    return tuple(tags)


def _is_local_host(host: str) -> bool:
    if host in LOCAL_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def index_urls(recipe: Recipe) -> tuple[str, ...]:
    return (recipe.index_url, *(index.url for index in recipe.indexes))


def needs_network(recipe: Recipe) -> bool:
    """True when a layer may fetch from the network: pip layers and shell steps."""
    return any(isinstance(step.layer, PipLayer | RunLayer) for step in recipe.steps())


def choose_network(recipe: Recipe, requested: str) -> str | None:
    """The build's ``--network``; ``auto`` picks ``host`` for recipes that fetch packages.

    A build container on Docker's default bridge cannot reach an index on the host's loopback
    (127.0.0.1), nor any index on hosts whose dockerd runs without NAT (``--iptables=false``)
    or behind a proxy listening on localhost; the host network reaches what the host reaches.
    ``default`` passes nothing (Docker's bridge); any other value is passed through.
    """
    if requested == NETWORK_AUTO:
        local = any(_is_local_host(urlsplit(url).hostname or "") for url in index_urls(recipe))
        return "host" if local or needs_network(recipe) else None
    return None if requested == NETWORK_DEFAULT else requested


def created_time(environ: Mapping[str, str], now: _dt.datetime) -> str:
    """RFC 3339 UTC time of a build: ``SOURCE_DATE_EPOCH`` when set (reproducible), else ``now``.

    A value that is not a non-negative whole number of seconds is bad input (exit 2).
    """
    epoch = environ.get(SOURCE_DATE_EPOCH, "").strip()
    if epoch:
        if not epoch.isdigit():
            raise UsageError(
                f"${SOURCE_DATE_EPOCH}={epoch[:40]!r}: not a whole number of seconds",
                "set it to a Unix time, e.g. $(git log -1 --format=%ct), or unset it",
            )
        moment = _dt.datetime.fromtimestamp(int(epoch), _dt.UTC)
    else:
        moment = now.astimezone(_dt.UTC)
    return moment.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def qualified_image(ref: str) -> str:
    """``ref`` as Docker resolves it: registry, repository path and tag or digest spelt out.

    ``debian:bookworm`` -> ``docker.io/library/debian:bookworm``; ``org/x`` ->
    ``docker.io/org/x:latest``; a first component with a dot, a port or ``localhost`` is a
    registry and is kept.
    """
    name, at, digest = ref.partition("@")
    first, slash, _ = name.partition("/")
    if not slash:
        name = f"docker.io/library/{name}"
    elif not ("." in first or ":" in first or first == "localhost"):
        name = f"docker.io/{name}"
    if not at and ":" not in name.rpartition("/")[2]:
        name += ":latest"
    return f"{name}{at}{digest}"


def labels(recipe: Recipe, provenance: Provenance, guard: bool) -> tuple[tuple[str, str], ...]:
    """OCI labels plus the recipe and lock digests; sorted, every value redacted.

    Invariants: a pure function of its arguments (same commit and ``SOURCE_DATE_EPOCH`` give
    the same labels); an unknown fact leaves its label out rather than guessing (no local path
    as ``source``); ``revision`` ends in ``-dirty`` when the built files are uncommitted; a
    ``title`` the recipe's ``[config] labels`` give is the user's and wins (provenance does not).
    """
    revision = provenance.revision
    own = dict(recipe.config.labels)
    if revision and provenance.dirty:
        revision += DIRTY_SUFFIX
    found = {
        f"{OCI}.title": own.get(f"{OCI}.title", recipe.repository),
        f"{OCI}.created": provenance.created,
        f"{OCI}.base.name": qualified_image(recipe.base),
        f"{LABEL_PREFIX}.image": recipe.name,
        f"{LABEL_PREFIX}.recipe": str(recipe.source),
        f"{LABEL_PREFIX}.recipe.digest": provenance.recipe_digest,
        f"{LABEL_PREFIX}.locks": f"locks/{recipe.name}",
        f"{LABEL_PREFIX}.locks.digest": provenance.locks_digest,
        f"{LABEL_PREFIX}.guard": "on" if guard else "off",
        f"{LABEL_PREFIX}.guard.version": __version__,
        f"{LABEL_PREFIX}.trail": TRAIL_DIR,
    }
    optional = {
        f"{OCI}.source": provenance.source,
        f"{OCI}.revision": revision,
        f"{OCI}.base.digest": recipe.base_digest or provenance.base_digest,
        f"{LABEL_PREFIX}.base.image-id": provenance.base_image_id,
        f"{LABEL_PREFIX}.dirty": "true" if revision and provenance.dirty else "",
    }
    found.update({key: value for key, value in optional.items() if value})
    return tuple(sorted((key, redact(value)) for key, value in found.items()))


def stage_labels(recipe: Recipe, stage: str) -> tuple[tuple[str, str], ...]:
    """The labels that differ per stage: ``version`` (the stage) and a description."""
    said = recipe.stage(stage).description
    description = f"{recipe.name} {stage}" + (f": {said}" if said else "")
    description = dict(recipe.config.labels).get(f"{OCI}.description", description)
    return (
        (f"{OCI}.description", redact(description)),
        (f"{OCI}.version", stage),
        (f"{LABEL_PREFIX}.stage", stage),
    )


def client_flags(client: DockerClient, builder: str | None, *, push: bool = False) -> list[str]:
    """The argv prefix for ``client``; ``--builder`` needs buildx."""
    if builder is None:
        return build_command(client, push=push)
    if client.mode != "buildx":
        raise UsageError(
            f"--builder {builder}: {client.path} {client.version} has no buildx",
            "install the buildx plugin or drop --builder",
        )
    return [*build_command(client, push=push), "--builder", builder]


def cache_flags(options: BuildOptions) -> tuple[str, ...]:
    """``--cache-from REF`` for each given, and the inline cache when ``--cache-to`` is given.

    The inline cache (``BUILDKIT_INLINE_CACHE=1``) stores BuildKit's cache keys in the image's
    configuration; pushed, it lets another engine (``--cache-from REF``) reuse its layers.
    Works with the 20.10 client's BuildKit and with buildx alike.
    """
    flags: list[str] = []
    for ref in options.cache_from:
        flags += ["--cache-from", ref]
    if options.cache_to:
        flags += ["--build-arg", f"{INLINE_CACHE_ARG}=1"]
    return tuple(flags)


@dataclass(frozen=True)
class _Common:
    """Flags every build of one plan shares."""

    prefix: tuple[str, ...]
    platform: str
    network: str | None
    secrets: tuple[Secret, ...]
    labels: tuple[tuple[str, str], ...]
    guard: bool
    context: Path
    recipe: Recipe
    cache: tuple[str, ...] = ()
    passthrough: tuple[str, ...] = ()  # --build-arg, --secret, --ssh as the user gave them

    def stage_labels(self, stage: str) -> tuple[tuple[str, str], ...]:
        return stage_labels(self.recipe, stage)

    def argv(self, stage: str, refs: tuple[str, ...], no_cache: bool) -> tuple[str, ...]:
        argv = [*self.prefix, "--progress=plain", "--platform", self.platform]
        argv += ["--target", stage]
        for ref in refs:
            argv += ["-t", ref]
        argv += self.cache
        for secret in self.secrets:
            argv += ["--secret", secret.flag]
        argv += self.passthrough
        if self.network:
            argv += ["--network", self.network]
        for key, value in (*self.labels, *self.stage_labels(stage)):
            argv += ["--label", f"{key}={value}"]
        if not self.guard:
            argv += ["--build-arg", f"{NO_GUARD_ARG}=1"]
        if no_cache:
            argv.append("--no-cache")
        return (*argv, "-f", str(self.context / "Dockerfile"), str(self.context))


def plan_build(
    recipe: Recipe,
    options: BuildOptions,
    *,
    client: DockerClient,
    context: Path,
    provenance: Provenance,
    secrets: Mapping[str, Path],
    token: str,
) -> BuildPlan:
    """Every build of one run. ``secrets`` maps secret ids to files the executor prepared.

    ``--no-cache`` applies to the first (target) build only: it rebuilds every layer up to the
    target once, and the earlier stages then come from that fresh cache.
    """
    platform, arch = effective_platform(recipe, options.platform)
    multi = check_multi_platform(client, options, platform)
    stages = target_stages(recipe, options.stage)
    check_build_args(recipe, options.build_args)
    check_passthrough(options)
    common = _Common(
        prefix=tuple(client_flags(client, options.builder, push=multi)),
        platform=platform,
        network=choose_network(recipe, options.network),
        secrets=tuple(Secret(key, secrets[key]) for key in sorted(secrets)),
        labels=labels(recipe, provenance, options.guard),
        guard=options.guard,
        context=context,
        recipe=recipe,
        cache=cache_flags(options),
        passthrough=passthrough_flags(options),
    )
    builds = tuple(
        _stage_build(
            recipe, common, stage, arch=arch, token=token, no_cache=options.no_cache and i == 0,
            multi=multi, cache_to=options.cache_to if multi and i == 0 else None, dry=options.dry,
        )
        for i, stage in enumerate(stages)
    )  # fmt: skip
    return BuildPlan(
        image=recipe.name,
        context=context,
        platform=platform,
        arch=arch,
        network=common.network,
        secrets=common.secrets,
        labels=common.labels,
        builds=builds,
        push=options.push,
        guard=options.guard,
        cache_to=options.cache_to,
        multi_platform=multi,
        prelude=_prelude_build(recipe, common, token) if not multi else None,
    )


def passthrough_flags(options: BuildOptions) -> tuple[str, ...]:
    """``--build-arg``, ``--secret`` and ``--ssh`` for BuildKit, in the order given."""
    flags: list[str] = []
    for name, value in options.build_args:
        flags += ["--build-arg", f"{name}={value}"]
    for spec in options.secrets:
        flags += ["--secret", spec]
    for spec in options.ssh:
        flags += ["--ssh", spec]
    return tuple(flags)


def _prelude_build(recipe: Recipe, common: _Common, token: str) -> StageBuild | None:
    """For a base without Python: ``base_stage`` built first (it has no guard) and tagged as
    the image the base record describes, so the build can check it before any guarded layer."""
    if recipe.base_stage is None:
        return None
    stage = recipe.base_stage
    temp_ref = f"{recipe.repository}:layer-audit-build-{token}-prelude"
    argv = common.argv(stage, (temp_ref,), no_cache=False)
    return StageBuild(stage, argv, temp_ref, (recipe.recorded_ref,), None)


def _stage_build(
    recipe: Recipe,
    common: _Common,
    stage: str,
    *,
    arch: str,
    token: str,
    no_cache: bool,
    multi: bool = False,
    cache_to: str | None = None,
    dry: bool = False,
) -> StageBuild:
    """One stage's build: under a temporary tag, or (``multi``) pushed by buildx straight to
    its final tags, which it moves only when the whole multi-platform build passed (and to
    ``cache_to``, the target's inline cache, when given)."""
    temp_ref = f"{recipe.repository}:layer-audit-build-{token}-{stage}"
    # An unguarded build is for measuring only: it never earns the tags guarded images carry.
    tags = stage_tags(recipe, stage, arch, dry=dry) if common.guard else ()
    refs = (*tags, *([cache_to] if cache_to else [])) if multi else (temp_ref,)
    return StageBuild(
        stage=stage,
        argv=common.argv(stage, refs, no_cache),
        temp_ref=temp_ref,
        tags=tags,
        smoke=recipe.stage(stage).smoke,
    )


# ----------------------------------------------------------------------------- secret sources

CREDENTIALS_ENV = "LAYER_AUDIT_INDEX_CREDENTIALS"
CA_ENVS = ("SSL_CERT_FILE", "PIP_CERT")


@dataclass(frozen=True)
class SecretSources:
    """Where the secrets come from on the host; the executor turns them into secret files."""

    ca_bundle: Path | None = None
    netrc: Path | None = None  # an existing netrc file, passed as it is
    credentials: str | None = None  # USER:PASSWORD for every declared index host

    def describe(self) -> str:
        """What will be passed, for the log: paths and kinds, never a secret value."""
        parts = [f"CA bundle {self.ca_bundle}"] if self.ca_bundle else []
        if self.credentials:
            parts.append(f"index credentials from ${CREDENTIALS_ENV}")
        elif self.netrc:
            parts.append(f"index credentials from {self.netrc}")
        return ", ".join(parts) or "none"


def find_ca_bundle(option: Path | None, environ: Mapping[str, str]) -> Path | None:
    """``--ca-bundle`` (must exist), else ``SSL_CERT_FILE`` or ``PIP_CERT`` when the file exists."""
    if option is not None:
        if not option.is_file():
            raise UsageError(f"--ca-bundle {option}: no such file", "pass a PEM bundle file")
        return option.resolve()
    for name in CA_ENVS:
        value = environ.get(name)
        if value and Path(value).is_file():
            return Path(value).resolve()
    return None


def find_netrc(environ: Mapping[str, str], home: Path) -> Path | None:
    """``$NETRC`` or ``~/.netrc`` when present."""
    candidate = Path(environ["NETRC"]) if environ.get("NETRC") else home / ".netrc"
    return candidate.resolve() if candidate.is_file() else None


def secret_sources(options: BuildOptions, environ: Mapping[str, str], home: Path) -> SecretSources:
    return SecretSources(
        ca_bundle=find_ca_bundle(options.ca_bundle, environ),
        netrc=find_netrc(environ, home),
        credentials=environ.get(CREDENTIALS_ENV) or None,
    )


def netrc_text(recipe: Recipe, credentials: str) -> str:
    """A netrc granting ``USER:PASSWORD`` to every host of the recipe's declared indexes."""
    user, sep, password = credentials.partition(":")
    if not sep or not user or not password or any(c.isspace() for c in credentials):
        # Never echo the value: it is a secret even when malformed.
        raise UsageError(
            f"${CREDENTIALS_ENV}: expected USER:PASSWORD without spaces",
            f"set {CREDENTIALS_ENV}=user:token, or use a netrc file ($NETRC or ~/.netrc)",
        )
    hosts = sorted({urlsplit(url).hostname or "" for url in index_urls(recipe)} - {""})
    return "".join(f"machine {host} login {user} password {password}\n" for host in hosts)
