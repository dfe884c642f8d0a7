"""Parse and validate ``images/<image>/image.toml`` once into a frozen :class:`Recipe`.

Everything a later step trusts is checked here: known keys only (with a "did you mean"), one
kind per layer, stages v1…vN in order, no newline or control character in any value (each may
land in a Dockerfile), declared indexes without credentials, requirements files that parse.
Every error names the file and the 1-based key path: ``images/x/image.toml: stage[2].layer[1].pip``.

This module holds the recipe grammar: ``[image]``, ``[indexes]``, ``[[stage]]`` and their layers,
``[config]``. Its helpers: :mod:`audit.recipe.located_toml` reads the file into located tables,
:mod:`audit.recipe.policy_parse` reads ``[policy]``, :mod:`audit.recipe.repins` folds no_deps
re-pins into the layer they correct.
"""

from __future__ import annotations

import dataclasses
import re
import string
from collections.abc import Callable
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from audit.errors import UsageError
from audit.project.sources import Source
from audit.recipe.build_args import SECRET_NAME, parse_arg_layer, parse_args
from audit.recipe.context import (
    STAGE_NAME,
    ParseContext,
    earlier_stage,
    own_file,
    recipe_file,
)
from audit.recipe.graph import check_graph
from audit.recipe.located_toml import SIMPLE_NAME, Node, read_toml
from audit.recipe.model import (
    DEFAULT_INDEX_URL,
    DEFAULT_LATEST_PATTERN,
    DEFAULT_TAG_PATTERN,
    ArgLayer,
    CopyLayer,
    EnvLayer,
    Healthcheck,
    ImageConfig,
    Index,
    Layer,
    PipLayer,
    Recipe,
    RunLayer,
    Stage,
    WorkdirLayer,
)
from audit.recipe.mounts import IMAGE_SOURCE, parse_mounts
from audit.recipe.policy_parse import parse_policy
from audit.recipe.repins import fold_repins
from audit.recipe.requirements_in import RequirementsFile, parse_requirements, url_problem
from audit.suggest import did_you_mean, one_of

TOP_KEYS = ("image", "indexes", "args", "stage", "policy", "config")
IMAGE_KEYS = (
    "base", "base_digest", "platform", "cuda", "interpreters", "repository",
    "tag_pattern", "latest_tag_pattern", "index_url", "resolver", "break_system_packages",
    "base_stage",
)  # fmt: skip
RESOLVER_NAMES = ("pip-tools", "uv")
IMAGE_REQUIRED = ("base", "platform", "cuda", "interpreters", "repository")
STAGE_KEYS = (
    "name", "description", "smoke", "from", "base", "base_digest", "target", "config", "layer",
)  # fmt: skip
LAYER_OPTIONS: dict[str, tuple[str, ...]] = {
    "pip": ("index", "primary_index", "pre", "no_deps", "override", "mounts"),
    "run": ("stdin", "mounts"), "copy": (), "env": ("expand",), "workdir": (), "arg": (),
}  # fmt: skip
COPY_KEYS = ("src", "dest", "mode", "owner", "from")
CONFIG_KEYS = (
    "cmd", "entrypoint", "user", "expose", "labels", "healthcheck", "stopsignal", "shell",
)  # fmt: skip
HEALTHCHECK_KEYS = ("cmd", "interval", "timeout", "start_period", "retries", "disable")

IMAGE_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"(?:[A-Za-z0-9][A-Za-z0-9.-]*(?::[0-9]+)?/)?"
REPOSITORY = re.compile(rf"{_DOMAIN}{_COMPONENT}(?:/{_COMPONENT})*")
DOCKER_TAG = re.compile(r"[\w][\w.-]{0,127}")
IMAGE_REF = re.compile(rf"{REPOSITORY.pattern}(?::{DOCKER_TAG.pattern})?")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
PLATFORM = re.compile(r"linux/(amd64|arm64|ppc64le|s390x|riscv64)")
CUDA = re.compile(r"cu[0-9]{2,4}|cpu")
INTERPRETER = re.compile(r"/[A-Za-z0-9._+/-]+")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# SECRET_NAME (audit.recipe.build_args): a word of the name (split at _) says it holds a
# secret: HF_TOKEN, DB_PASSWORD, not TOKENIZERS_…
PIP_SOURCE_ENV = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_TRUSTED_HOST")
CONTAINER_PATH = re.compile(r"/[\w.+@:/=,-]*")
# a COPY --from source: a path in that stage or image (relative to its root), globs allowed
FROM_PATH = re.compile(r"[\w.+@:/=,*?\[\]-]+")
TARGET_NAME = re.compile(r"[a-z][a-z0-9_.-]*")  # a Dockerfile stage name (Docker lowers them)
HEREDOC = re.compile(r"(?<!<)<<(?!<)-?\s*['\"]?[A-Za-z_]")  # not the here-string <<<
FILE_MODE = re.compile(r"0?[0-7]{3}")
OWNER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(?::[A-Za-z0-9_][A-Za-z0-9_.-]*)?")
PORT = re.compile(r"[0-9]{1,5}(?:/(?:tcp|udp|sctp))?")
LABEL_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")
SIGNAL = re.compile(r"SIG[A-Z0-9+-]+|[0-9]{1,2}")
DURATION = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?(?:ns|us|ms|s|m|h))+")
ENV_REFERENCE = re.compile(r"\$(?:\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)")


def load_recipe(source: Source, image: str) -> Recipe:
    """Read ``images/<image>/image.toml`` through ``source``; raise RecipeError when invalid."""
    if not IMAGE_NAME.fullmatch(image):
        raise UsageError(f"not an image name: {image!r}", "use the folder name under images/")
    relpath = f"images/{image}/image.toml"
    if not source.exists(relpath):
        known = [name for name in source.listdir("images") if name != image]
        raise UsageError(
            f"{source.describe(relpath)}: no such recipe{did_you_mean(image, known)}",
            f"images here: {', '.join(known) or 'none'}",
        )
    return _recipe(source, image, read_toml(source, relpath))


def load_all(source: Source) -> list[Recipe]:
    """Every recipe under ``images/``, sorted by name."""
    names = [n for n in source.listdir("images") if source.exists(f"images/{n}/image.toml")]
    return [load_recipe(source, name) for name in names]


# --- the recipe -----------------------------------------------------------------------------


def _recipe(source: Source, image: str, root: Node) -> Recipe:
    root.check_keys(TOP_KEYS, required=("image", "stage"))
    head = root.table("image")
    head.check_keys(IMAGE_KEYS, required=IMAGE_REQUIRED)
    index_url = _url(head, "index_url", DEFAULT_INDEX_URL)
    indexes = _indexes(root.table("indexes")) if "indexes" in root.data else ()
    context = ParseContext(source, f"images/{image}", index_url, indexes)
    cuda = head.matching("cuda", CUDA, "a CUDA tag like 'cu130' or 'cpu'")
    recipe = Recipe(
        name=image,
        directory=Path(context.folder),
        base=_base(head),
        base_digest=head.matching("base_digest", DIGEST, "a sha256:<64 hex> digest")
        if "base_digest" in head.data
        else None,
        platform=head.matching("platform", PLATFORM, "a platform like linux/arm64"),
        cuda=cuda,
        interpreters=_interpreters(head),
        repository=head.matching("repository", REPOSITORY, "a lower-case repository name"),
        tag_pattern=_tag_pattern(head, "tag_pattern", DEFAULT_TAG_PATTERN),
        latest_tag_pattern=_tag_pattern(head, "latest_tag_pattern", DEFAULT_LATEST_PATTERN),
        index_url=index_url,
        indexes=indexes,
        stages=(stages := _stages(root, context)),
        policy=parse_policy(
            root.table("policy") if "policy" in root.data else None,
            cuda,
            {stage.name: len(stage.layers) for stage in stages},
        ),
        resolver=_resolver(head),
        break_system_packages=head.boolean("break_system_packages", False),
        config=_config(root.table("config")) if "config" in root.data else ImageConfig(),
        args=parse_args(root.table("args")) if "args" in root.data else (),
        base_stage=head.matching("base_stage", STAGE_NAME, "a stage name like 'v1'")
        if "base_stage" in head.data
        else None,
    )
    return check_graph(root, recipe)


def _resolver(head: Node) -> str:
    name = head.text("resolver", "pip-tools")
    if name not in RESOLVER_NAMES:
        raise head.error(
            "resolver",
            f"{name!r} is not a resolver{did_you_mean(name, RESOLVER_NAMES)}",
            f"use {one_of(RESOLVER_NAMES)}",
        )
    return name


def _base(head: Node) -> str:
    base = head.text("base")
    if "@" in base:
        raise head.error(
            "base",
            "put the digest in base_digest, not in base",
            'write base = "repo:tag" and base_digest = "sha256:…"',
        )
    if not IMAGE_REF.fullmatch(base):
        raise head.error("base", f"not an image reference: {base!r}", "e.g. 'vllm/vllm-openai:tag'")
    return base


def _interpreters(head: Node) -> tuple[str, ...]:
    paths = head.texts("interpreters")
    if not paths:
        raise head.error(
            "interpreters",
            "needs at least one interpreter path",
            'e.g. interpreters = ["/usr/bin/python3"]',
        )
    for index, path in enumerate(paths, start=1):
        if not INTERPRETER.fullmatch(path):
            raise head.error(f"interpreters[{index}]", f"not an absolute path: {path!r}")
    return tuple(paths)


def _tag_pattern(head: Node, key: str, default: str) -> str:
    pattern = head.text(key, default)
    fields = {name for _, name, _, _ in string.Formatter().parse(pattern) if name is not None}
    if not fields <= {"stage", "arch", "cuda"}:
        raise head.error(key, f"unknown placeholder in {pattern!r}", "use {stage}, {arch}, {cuda}")
    if key == "tag_pattern" and "stage" not in fields:
        raise head.error(key, "must contain {stage}", "every stage needs its own tag")
    if not DOCKER_TAG.fullmatch(pattern.format(stage="v1", arch="arm64", cuda="cu130")):
        raise head.error(key, f"does not make a valid Docker tag: {pattern!r}")
    return pattern


def _url(node: Node, key: str, default: str | None = None) -> str:
    url = node.text(key, default)
    problem = url_problem(url)
    if problem:
        raise node.error(
            key,
            problem,
            "credentials reach pip only as BuildKit secrets "
            "(see the README); write the bare index URL here",
        )
    return url


def _indexes(table: Node) -> tuple[Index, ...]:
    for name in table.data:
        if not SIMPLE_NAME.fullmatch(name):
            raise table.error(name, "index names use letters, digits, '.', '_' and '-'")
    return tuple(Index(name, _url(table, name)) for name in table.data)


def _stages(root: Node, context: ParseContext) -> tuple[Stage, ...]:
    nodes = root.tables("stage")
    if not nodes:
        raise root.error("stage", "needs at least one [[stage]]")
    last = len(nodes)
    stages = []
    for number, node in enumerate(nodes, start=1):
        earlier = tuple(f"v{n}" for n in range(1, number))
        config_here = number == last and "config" in root.data
        here = dataclasses.replace(context, earlier=earlier)
        stages.append(_stage(node, number, here, config_here))
    return tuple(stages)


def _stage(node: Node, number: int, context: ParseContext, top_config: bool = False) -> Stage:
    node.check_keys(STAGE_KEYS, required=("name",))
    name = node.text("name")
    if name != f"v{number}":
        raise node.error(
            "name",
            f"stage {number} is named {name!r}: stages are v1 … vN in order",
            f"name it 'v{number}' (by default each stage builds on the one before it)",
        )
    # no layer: the stage is the image it starts from, with its own config (a Dockerfile's
    # FROM runtime AS serve + ENTRYPOINT)
    layers = fold_repins(node, tuple(_layer(layer, context) for layer in node.tables("layer")))
    if top_config and "config" in node.data:
        raise node.error("config", "the last stage's configuration is [config]: keep one of them")
    return Stage(
        name,
        layers,
        node.text("description", ""),
        node.optional_text("smoke"),
        parent=_parent(node, context),
        base=_base(node) if "base" in node.data else None,
        base_digest=_stage_digest(node),
        target=node.matching("target", TARGET_NAME, "a Dockerfile stage name (lower case)")
        if "target" in node.data
        else None,
        config=_config(node.table("config")) if "config" in node.data else ImageConfig(),
    )


def _parent(node: Node, context: ParseContext) -> str | None:
    """``from``: an earlier stage; exclusive with ``base`` (an image of the stage's own)."""
    if "from" not in node.data:
        return None
    if "base" in node.data:
        raise node.error("from", "a stage starts from a stage (from) or an image (base), not both")
    return earlier_stage(node, "from", node.text("from"), context)


def _stage_digest(node: Node) -> str | None:
    if "base_digest" not in node.data:
        return None
    if "base" not in node.data:
        raise node.error("base_digest", "pins the stage's own base: give base too")
    return node.matching("base_digest", DIGEST, "a sha256:<64 hex> digest")


def _layer(node: Node, context: ParseContext) -> Layer:
    every_key = (*LAYER_OPTIONS, *{o for opts in LAYER_OPTIONS.values() for o in opts})
    node.check_keys(every_key)
    kinds = [kind for kind in LAYER_OPTIONS if kind in node.data]
    if len(kinds) != 1:
        raise node.error(
            None,
            f"a layer needs exactly one of {one_of(LAYER_OPTIONS)}, found {len(kinds)}",
            "split it into one [[stage.layer]] per step",
        )
    kind = kinds[0]
    for key in node.data:
        if key not in (kind, *LAYER_OPTIONS[kind]):
            raise node.error(key, f"not an option of a {kind} layer", "see docs/recipes.md")
    builders: dict[str, Callable[[Node, ParseContext], Layer]] = {
        "pip": _pip_layer, "run": _run_layer, "copy": _copy_layer, "env": _env_layer,
        "workdir": _workdir_layer, "arg": _arg_layer,
    }  # fmt: skip
    return builders[kind](node, context)


def _arg_layer(node: Node, context: ParseContext) -> ArgLayer:
    return parse_arg_layer(node)


def _declared_index(node: Node, key: str, context: ParseContext) -> str | None:
    """A pip layer's ``index`` or ``primary_index``: the name of a declared index."""
    index = node.optional_text(key)
    names = [i.name for i in context.indexes]
    if index is not None and index not in names:
        raise node.error(
            key,
            f"index {index!r} is not declared{did_you_mean(index, names)}",
            f"declare it under [indexes] (declared: {one_of(names) or 'none'})",
        )
    return index


def _pip_layer(node: Node, context: ParseContext) -> PipLayer:
    path = recipe_file(node, "pip", context, under="requirements/")
    index = _declared_index(node, "index", context)
    primary = _declared_index(node, "primary_index", context)
    primary_url = next((i.url for i in context.indexes if i.name == primary), context.index_url)
    urls = [primary_url, *(i.url for i in context.indexes if i.name == index)]
    parsed = parse_requirements(
        context.source,
        f"{context.folder}/{path}",
        allowed_index_urls=urls,
        origin=f"{node.file}: {node.at('pip')}",
    )
    if not parsed.requirement_lines:  # each line was checked as it was read
        # pip refuses to install nothing ("You must give at least one requirement"): say it now
        raise node.error(
            "pip",
            f"{context.folder}/{path} names no requirement to install",
            "add a requirement line, or remove this layer",
        )
    no_deps = node.boolean("no_deps", False)
    override = _override(node) if "override" in node.data else ()
    if no_deps:
        override = _exact_pins_only(node, parsed)
    mounts = parse_mounts(node, context) if "mounts" in node.data else ()
    return PipLayer(path, index, node.boolean("pre", False), no_deps, override, primary, mounts)


def _override(node: Node) -> tuple[str, ...]:
    """``override = ["name==version", ...]``: exact pins, one per package, canonical names."""
    pins: dict[str, str] = {}
    for index, text in enumerate(node.texts("override"), start=1):
        key = f"override[{index}]"
        try:
            requirement = Requirement(text)
        except InvalidRequirement as exc:
            raise node.error(key, f"not a requirement: {text!r}", "write name==version") from exc
        specs = list(requirement.specifier)
        exact = len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version
        if not exact or requirement.marker or requirement.url or requirement.extras:
            raise node.error(
                key,
                f"{text!r} is not one exact version",
                "an override installs one version on purpose: write name==version",
            )
        name = canonicalize_name(requirement.name)
        if name in pins:
            raise node.error(key, f"{name} is overridden twice", "keep one entry per package")
        pins[name] = f"{name}=={Version(specs[0].version)}"
    return tuple(pins.values())


def _exact_pins_only(node: Node, parsed: RequirementsFile) -> tuple[str, ...]:
    """A no_deps layer re-pins: each of its requirements names one version with ``==``; its
    pins, ``name==version`` with canonical names, are its overrides."""
    pins = []
    for requirement in parsed.requirements:
        specs = list(requirement.specifier)
        if len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version:
            raise node.error(
                "no_deps",
                f"{parsed.relpath}: {requirement} does not pin one version of "
                f"{requirement.name} with ==",
                "a no_deps layer re-pins packages on purpose: write name==version on each line",
            )
        pins.append(f"{canonicalize_name(requirement.name)}=={Version(specs[0].version)}")
    return tuple(pins)


def _run_layer(node: Node, context: ParseContext) -> RunLayer:
    # a list of commands reads better in image.toml than one long line
    listed = isinstance(node.data["run"], list)
    command = " && ".join(node.texts("run")) if listed else node.text("run")
    if not command.strip():
        raise node.error("run", "must not be empty")
    if command.rstrip().endswith("\\"):
        raise node.error("run", "ends with a backslash, which would continue the Dockerfile line")
    if HEREDOC.search(command):
        raise node.error(
            "run",
            "heredocs ('<<') are not supported in run layers",
            'put the heredoc in a file and name it with stdin = "FILE" on this layer',
        )
    stdin = own_file(node, "stdin", context) if "stdin" in node.data else None
    mounts = parse_mounts(node, context) if "mounts" in node.data else ()
    return RunLayer(command, stdin, mounts)


def _copy_layer(node: Node, context: ParseContext) -> CopyLayer:
    table = node.table("copy")
    table.check_keys(COPY_KEYS, required=("src", "dest"))
    origin = _copy_origin(table, context) if "from" in table.data else None
    if origin is None:
        src = own_file(table, "src", context)
    else:
        src = table.matching("src", FROM_PATH, f"a path in {origin} (no spaces or quotes)")
    dest = table.matching("dest", CONTAINER_PATH, "an absolute path inside the image")
    mode = _maybe(table, "mode", FILE_MODE, "an octal mode like '0755'")
    owner = _maybe(table, "owner", OWNER, "user[:group] (names or ids)")
    return CopyLayer(src, dest, mode, owner, origin)


def _copy_origin(table: Node, context: ParseContext) -> str:
    """``copy.from``: an earlier stage (``vK``), or an image reference."""
    name = table.text("from")
    if STAGE_NAME.fullmatch(name):
        return earlier_stage(table, "from", name, context)
    if not IMAGE_SOURCE.fullmatch(name):
        raise table.error("from", f"{name!r} is neither a stage (vK) nor an image reference")
    return name


def _workdir_layer(node: Node, context: ParseContext) -> WorkdirLayer:
    return WorkdirLayer(
        node.matching("workdir", CONTAINER_PATH, "an absolute path inside the image")
    )


def _env_layer(node: Node, context: ParseContext) -> EnvLayer:
    table = node.table("env")
    if not table.data:
        raise node.error("env", 'needs at least one NAME = "value"')
    for name in table.data:
        _check_env_name(table, name)
    expand = node.boolean("expand", False)
    values = tuple((name, _line(table, name)) for name in table.data)
    for name, value in values if expand else ():
        if "$" in ENV_REFERENCE.sub("", value):
            raise table.error(
                name,
                "with expand = true, every '$' starts a reference: ${NAME} or $NAME",
                "write $$ nowhere: set expand = false for literal values",
            )
    return EnvLayer(values, expand)


def _line(node: Node, key: str) -> str:
    """A one-line string that may be empty (``ENV A=`` and ``LABEL a=`` are real)."""
    value: str = node.value(key, str, "a string")
    return node.text(key) if value else value


def _check_env_name(table: Node, name: str) -> None:
    if not ENV_NAME.fullmatch(name):
        raise table.error(name, "not an environment variable name")
    if SECRET_NAME.search(name):
        raise table.error(
            name,
            "looks like a secret (it would stay in the image history)",
            "pass secrets as BuildKit secrets (see the README)",
        )
    if name.upper() in PIP_SOURCE_ENV:
        raise table.error(
            name,
            "would change where pip looks for packages",
            "declare indexes in image.toml instead",
        )


# --- the final image's configuration --------------------------------------------------------


def _config(node: Node) -> ImageConfig:
    """``[config]``: CMD, ENTRYPOINT, USER, EXPOSE, LABEL, HEALTHCHECK, STOPSIGNAL, SHELL."""
    node.check_keys(CONFIG_KEYS)
    return ImageConfig(
        cmd=_command(node, "cmd"),
        entrypoint=_command(node, "entrypoint"),
        user=_maybe(node, "user", OWNER, "user[:group] (names or ids)"),
        expose=tuple(_each_matching(node, "expose", PORT, "a port like '8000' or '8000/tcp'")),
        labels=_labels(node.table("labels")) if "labels" in node.data else (),
        healthcheck=_healthcheck(node.table("healthcheck")) if "healthcheck" in node.data else None,
        stopsignal=_maybe(node, "stopsignal", SIGNAL, "a signal like 'SIGTERM' or '15'"),
        shell=tuple(node.texts("shell")),
    )


def _command(node: Node, key: str) -> tuple[str, ...] | str | None:
    """A list of strings (exec form) or one shell line; neither may continue a line."""
    if key not in node.data:
        return None
    if isinstance(node.data[key], list):
        items = node.texts(key)
        if not items:
            raise node.error(key, "an exec form needs at least the program")
        return tuple(items)
    text = node.text(key)
    if text.rstrip().endswith("\\") or text.lstrip().startswith("["):
        raise node.error(key, "a shell form may not start with '[' nor end with '\\'",
                         'write the exec form as a list: ["prog", "arg"]')  # fmt: skip
    return text


def _maybe(node: Node, key: str, pattern: re.Pattern[str], what: str) -> str | None:
    """``node.matching(key, …)`` when the key is there, else None."""
    return node.matching(key, pattern, what) if key in node.data else None


def _each_matching(node: Node, key: str, pattern: re.Pattern[str], what: str) -> list[str]:
    items = node.texts(key)
    for index, item in enumerate(items, start=1):
        if not pattern.fullmatch(item):
            raise node.error(f"{key}[{index}]", f"not {what}: {item!r}")
    return items


def _labels(table: Node) -> tuple[tuple[str, str], ...]:
    for name in table.data:
        if not LABEL_KEY.fullmatch(name):
            raise table.error(name, "label keys use letters, digits, '.', '_', '/' and '-'")
    return tuple((name, _line(table, name)) for name in table.data)


def _healthcheck(node: Node) -> Healthcheck:
    node.check_keys(HEALTHCHECK_KEYS)
    if node.boolean("disable", False):
        if len(node.data) > 1:
            raise node.error("disable", "disable = true takes no other key", "remove the others")
        return Healthcheck(disable=True)
    if "cmd" not in node.data:
        raise node.error("cmd", "required key is missing", "or disable = true")
    what = "a duration like '30s' or '1m30s'"
    timing = {
        key: _maybe(node, key, DURATION, what) for key in ("interval", "timeout", "start_period")
    }
    retries = node.value("retries", int, "an integer") if "retries" in node.data else None
    if retries is not None and (type(retries) is not int or not 0 <= retries <= 1000):
        raise node.error("retries", "must be an integer from 0 to 1000")
    return Healthcheck(
        _command(node, "cmd"),
        interval=timing["interval"],
        timeout=timing["timeout"],
        start_period=timing["start_period"],
        retries=retries,
    )
