"""Parse and validate ``images/<image>/image.toml`` once into a frozen :class:`Recipe`.

Everything a later step trusts is checked here: known keys only (with a "did you mean"), one
kind per layer, stages v1…vN in order, no newline or control character in any value (each may
land in a Dockerfile), declared indexes without credentials, requirements files that parse.
Every error names the file and the 1-based key path: ``images/x/image.toml: stage[2].layer[1].pip``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import posixpath
import re
import string
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from audit.core import presets, rules
from audit.core.errors import RecipeError, UsageError
from audit.core.policy import ACTIONS, FAIL, WARN, LockstepGroup, Policy, Waiver
from audit.core.redact import redact
from audit.core.suggest import did_you_mean, one_of
from audit.plan.recipe import (
    DEFAULT_INDEX_URL,
    DEFAULT_LATEST_PATTERN,
    DEFAULT_TAG_PATTERN,
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
from audit.plan.requirements_in import RequirementsFile, parse_requirements, url_problem
from audit.plan.sources import Source

TOP_KEYS = ("image", "indexes", "stage", "policy", "config")
IMAGE_KEYS = (
    "base", "base_digest", "platform", "cuda", "interpreters", "repository",
    "tag_pattern", "latest_tag_pattern", "index_url", "resolver", "break_system_packages",
)  # fmt: skip
RESOLVER_NAMES = ("pip-tools", "uv")
IMAGE_REQUIRED = ("base", "platform", "cuda", "interpreters", "repository")
STAGE_KEYS = ("name", "description", "smoke", "layer")
LAYER_OPTIONS: dict[str, tuple[str, ...]] = {
    "pip": ("index", "pre", "no_deps", "override"), "run": ("stdin",), "copy": (),
    "env": ("expand",), "workdir": (),
}  # fmt: skip
COPY_KEYS = ("src", "dest", "mode", "owner")
CONFIG_KEYS = (
    "cmd", "entrypoint", "user", "expose", "labels", "healthcheck", "stopsignal", "shell",
)  # fmt: skip
HEALTHCHECK_KEYS = ("cmd", "interval", "timeout", "start_period", "retries", "disable")
POLICY_ACTIONS = {
    "downgrade": FAIL,
    "removal": FAIL,
    "variant": FAIL,
    "rebuilt": WARN,
    "shadowed": WARN,
}
POLICY_KEYS = (
    *POLICY_ACTIONS, "native_shadowed", "native_libraries", "cuda_suffix", "require", "forbid",
    "lockstep", "waiver", "preset", "preset_skip",
)  # fmt: skip
WAIVER_KEYS = ("package", "from", "to", "reason", "expires", "rule", "stage", "layer")
WAIVER_RULES = rules.WAIVABLE

UNSAFE_TEXT = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
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
SIMPLE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
PACKAGE_GLOB = re.compile(r"[A-Za-z0-9*?][A-Za-z0-9._*?-]*")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# a word of the name (split at _) says it holds a secret: HF_TOKEN, DB_PASSWORD, not TOKENIZERS_…
SECRET_NAME = re.compile(
    r"(?:^|_)(?:TOKEN|PASSWORD|PASSWD|SECRET|CREDENTIALS?|API_?KEY)S?(?:_|$)", re.IGNORECASE
)
PIP_SOURCE_ENV = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_TRUSTED_HOST")
CONTAINER_PATH = re.compile(r"/[\w.+@:/=,-]*")
HEREDOC = re.compile(r"(?<!<)<<(?!<)-?\s*['\"]?[A-Za-z_]")  # not the here-string <<<
FILE_MODE = re.compile(r"0?[0-7]{3}")
OWNER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(?::[A-Za-z0-9_][A-Za-z0-9_.-]*)?")
PORT = re.compile(r"[0-9]{1,5}(?:/(?:tcp|udp|sctp))?")
LABEL_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")
SIGNAL = re.compile(r"SIG[A-Z0-9+-]+|[0-9]{1,2}")
DURATION = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?(?:ns|us|ms|s|m|h))+")
ENV_REFERENCE = re.compile(r"\$(?:\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)")
TOML_POSITION = re.compile(r"\(at (?:line (\d+), column \d+|end of document)\)$")
TOML_HEADER = re.compile(r"\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
FORMAT_HINT = "fix the value: docs/recipes.md describes every key"
TOML_KEY = re.compile(r"\s*([A-Za-z0-9_.\-\"' ]+?)\s*=")


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
    root = _Node(source.describe(relpath), "", _read_toml(source, relpath))
    return _recipe(source, image, root)


def load_all(source: Source) -> list[Recipe]:
    """Every recipe under ``images/``, sorted by name."""
    names = [n for n in source.listdir("images") if source.exists(f"images/{n}/image.toml")]
    return [load_recipe(source, name) for name in names]


# --- TOML ---------------------------------------------------------------------------------


def _read_toml(source: Source, relpath: str) -> dict[str, Any]:
    where = source.describe(relpath)
    try:
        text = source.read_bytes(relpath).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecipeError(where, f"not UTF-8 text ({exc.reason})", "save it as UTF-8") from exc
    except OSError as exc:  # a directory or an unreadable file where the recipe should be
        raise RecipeError(where, f"cannot read ({exc.strerror})", "make it a plain file") from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _toml_error(where, text, str(exc)) from exc
    except RecursionError as exc:  # tomllib recurses once per nested array or inline table
        raise RecipeError(where, "values are nested too deeply", "see docs/recipes.md") from exc


def _toml_error(where: str, text: str, message: str) -> RecipeError:
    """tomllib's message, placed at its line and the key path in force there."""
    match = TOML_POSITION.search(message)
    problem = TOML_POSITION.sub("", message).strip()
    lines = text.splitlines()
    line = int(match.group(1)) if match and match.group(1) else len(lines)
    path = _key_path_at(lines[:line])
    duplicate = "overwrite" in problem or "twice" in problem or "Duplicate" in problem
    label = f"duplicate key ({problem})" if duplicate else f"invalid TOML: {problem}"
    hint = (
        "each key may appear once per table: remove or merge one"
        if duplicate
        else ("see docs/recipes.md for the format")
    )
    return RecipeError(f"{where}: {path or '(top level)'} (line {line})", label, hint)


def _key_path_at(lines: list[str]) -> str:
    """The 1-based key path of the last line: ``stage[2].layer[1].pip``, best effort."""
    counts: dict[str, int] = {}
    table = ""
    for text in lines:
        header = TOML_HEADER.match(text)
        if header:
            table = ".".join(part.strip().strip("\"'") for part in header.group(2).split("."))
            if header.group(1) == "[[":
                counts[table] = counts.get(table, 0) + 1
                counts = {k: v for k, v in counts.items() if not k.startswith(table + ".")}
    parts = table.split(".") if table else []
    shown = []
    for depth, part in enumerate(parts, start=1):
        prefix = ".".join(parts[:depth])
        shown.append(f"{part}[{counts[prefix]}]" if prefix in counts else part)
    key = TOML_KEY.match(lines[-1]) if lines and not TOML_HEADER.match(lines[-1]) else None
    if key:
        shown.append(key.group(1).strip().strip("\"'"))
    return ".".join(shown)


@dataclass(frozen=True)
class _Node:
    """One TOML table and where it is, with typed getters that raise located errors."""

    file: str
    path: str
    data: Mapping[str, Any]

    def at(self, key: str | None) -> str:
        if key is None:
            return self.path or "(top level)"
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str | None, problem: str, hint: str = "") -> RecipeError:
        return RecipeError(f"{self.file}: {self.at(key)}", problem, hint or FORMAT_HINT)

    def check_keys(self, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> None:
        for key in self.data:
            if key not in allowed:
                raise self.error(
                    key,
                    f"unknown key{did_you_mean(key, allowed)}",
                    f"allowed here: {one_of(allowed)}",
                )
        for key in required:
            if key not in self.data:
                raise self.error(key, "required key is missing", "see docs/recipes.md")

    def value(self, key: str, kinds: type | tuple[type, ...], what: str) -> Any:
        value = self.data[key]
        if not isinstance(value, kinds):
            raise self.error(key, f"must be {what}, not {type(value).__name__} {value!r}")
        return value

    def text(self, key: str, default: str | None = None) -> str:
        if key not in self.data and default is not None:
            return default
        value: str = self.value(key, str, "a string")
        if UNSAFE_TEXT.search(value):
            raise self.error(
                key,
                "newline or control character in value",
                "keep it on one line: a value that lands in a Dockerfile could inject instructions",
            )
        if not value.strip():
            raise self.error(key, "must not be empty")
        if redact(value) != value:
            raise self.error(
                key,
                f"holds a credential: {redact(value)!r}",
                "a recipe is committed and its values land in Dockerfiles, labels and reports: "
                "give credentials to pip as BuildKit secrets and to registries with docker login",
            )
        return value

    def optional_text(self, key: str) -> str | None:
        return self.text(key) if key in self.data else None

    def matching(self, key: str, pattern: re.Pattern[str], what: str, default: str = "") -> str:
        value = self.text(key, default or None)
        if not pattern.fullmatch(value):
            raise self.error(key, f"not {what}: {value!r}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        return bool(self.value(key, bool, "true or false")) if key in self.data else default

    def texts(self, key: str) -> list[str]:
        items = self.value(key, list, "a list of strings") if key in self.data else []
        return [
            self.element(f"{key}[{n}]", item).text(f"{key}[{n}]") for n, item in enumerate(items, 1)
        ]

    def element(self, key: str, value: Any) -> _Node:
        """A node holding one list element, so its errors read ``…key[2]``."""
        return _Node(self.file, self.path, {key: value})

    def table(self, key: str) -> _Node:
        value = self.value(key, dict, "a table")
        return _Node(self.file, self.at(key), value)

    def tables(self, key: str) -> list[_Node]:
        if key not in self.data:
            return []
        value = self.data[key]
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise self.error(key, f"must be an array of tables: write [[{self.at(key)}]] headers")
        return [_Node(self.file, f"{self.at(key)}[{n}]", v) for n, v in enumerate(value, 1)]


# --- the recipe -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Context:
    """What layer validation needs beyond its own table."""

    source: Source
    folder: str
    index_url: str
    indexes: tuple[Index, ...]


def _recipe(source: Source, image: str, root: _Node) -> Recipe:
    root.check_keys(TOP_KEYS, required=("image", "stage"))
    head = root.table("image")
    head.check_keys(IMAGE_KEYS, required=IMAGE_REQUIRED)
    index_url = _url(head, "index_url", DEFAULT_INDEX_URL)
    indexes = _indexes(root.table("indexes")) if "indexes" in root.data else ()
    context = _Context(source, f"images/{image}", index_url, indexes)
    cuda = head.matching("cuda", CUDA, "a CUDA tag like 'cu130' or 'cpu'")
    return Recipe(
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
        policy=_policy(root.table("policy") if "policy" in root.data else None, cuda, stages),
        resolver=_resolver(head),
        break_system_packages=head.boolean("break_system_packages", False),
        config=_config(root.table("config")) if "config" in root.data else ImageConfig(),
    )


def _resolver(head: _Node) -> str:
    name = head.text("resolver", "pip-tools")
    if name not in RESOLVER_NAMES:
        raise head.error(
            "resolver",
            f"{name!r} is not a resolver{did_you_mean(name, RESOLVER_NAMES)}",
            f"use {one_of(RESOLVER_NAMES)}",
        )
    return name


def _base(head: _Node) -> str:
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


def _interpreters(head: _Node) -> tuple[str, ...]:
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


def _tag_pattern(head: _Node, key: str, default: str) -> str:
    pattern = head.text(key, default)
    fields = {name for _, name, _, _ in string.Formatter().parse(pattern) if name is not None}
    if not fields <= {"stage", "arch", "cuda"}:
        raise head.error(key, f"unknown placeholder in {pattern!r}", "use {stage}, {arch}, {cuda}")
    if key == "tag_pattern" and "stage" not in fields:
        raise head.error(key, "must contain {stage}", "every stage needs its own tag")
    if not DOCKER_TAG.fullmatch(pattern.format(stage="v1", arch="arm64", cuda="cu130")):
        raise head.error(key, f"does not make a valid Docker tag: {pattern!r}")
    return pattern


def _url(node: _Node, key: str, default: str | None = None) -> str:
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


def _indexes(table: _Node) -> tuple[Index, ...]:
    for name in table.data:
        if not SIMPLE_NAME.fullmatch(name):
            raise table.error(name, "index names use letters, digits, '.', '_' and '-'")
    return tuple(Index(name, _url(table, name)) for name in table.data)


def _stages(root: _Node, context: _Context) -> tuple[Stage, ...]:
    nodes = root.tables("stage")
    if not nodes:
        raise root.error("stage", "needs at least one [[stage]]")
    return tuple(_stage(node, number, context) for number, node in enumerate(nodes, start=1))


def _stage(node: _Node, number: int, context: _Context) -> Stage:
    node.check_keys(STAGE_KEYS, required=("name", "layer"))
    name = node.text("name")
    if name != f"v{number}":
        raise node.error(
            "name",
            f"stage {number} is named {name!r}: stages are v1 … vN in order",
            f"name it 'v{number}' (each stage builds on the one before it)",
        )
    layers = tuple(_layer(layer, context) for layer in node.tables("layer"))
    if not layers:
        raise node.error("layer", "a stage needs at least one [[stage.layer]]")
    layers = _repins_to_resolution(node, layers)
    return Stage(name, layers, node.text("description", ""), node.optional_text("smoke"))


def _repins_to_resolution(node: _Node, layers: tuple[Layer, ...]) -> tuple[Layer, ...]:
    """A no_deps re-pin layer also overrides the nearest pip layer before it in its stage.

    "Install the nightly, then force NCCL back with --no-deps" then never leaves the broken
    versions in any image layer: the nightly's lock already holds the re-pinned versions (the
    re-pin layer installs nothing more), and the nightly layer reports each as an override.
    """
    found = list(layers)
    for index, layer in enumerate(layers):
        if isinstance(layer, PipLayer) and layer.no_deps:
            target = _resolving_layer_before(found, index)
            if target is not None:
                found[target] = _merged(node, found[target], layer, target)
    return tuple(found)


def _resolving_layer_before(layers: list[Layer], index: int) -> int | None:
    for earlier in range(index - 1, -1, -1):
        layer = layers[earlier]
        if isinstance(layer, PipLayer) and not layer.no_deps:
            return earlier
    return None


def _merged(node: _Node, layer: Layer, repin: PipLayer, index: int) -> PipLayer:
    assert isinstance(layer, PipLayer)
    pins = {pin.split("==", 1)[0]: pin for pin in layer.override}
    for pin in repin.override:
        name = pin.split("==", 1)[0]
        if pins.get(name, pin) != pin:
            raise node.error(
                f"layer[{index + 1}].override",
                f"{name} is overridden as {pins[name]} here and re-pinned as {pin} by "
                f"{repin.requirements}",
                "keep one version of it",
            )
        pins[name] = pin
    return dataclasses.replace(layer, override=tuple(pins.values()))


def _layer(node: _Node, context: _Context) -> Layer:
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
    builders: dict[str, Callable[[_Node, _Context], Layer]] = {
        "pip": _pip_layer, "run": _run_layer, "copy": _copy_layer, "env": _env_layer,
        "workdir": _workdir_layer,
    }  # fmt: skip
    return builders[kind](node, context)


def _pip_layer(node: _Node, context: _Context) -> PipLayer:
    path = _recipe_file(node, "pip", context, under="requirements/")
    index = node.optional_text("index")
    names = [i.name for i in context.indexes]
    if index is not None and index not in names:
        raise node.error(
            "index",
            f"index {index!r} is not declared{did_you_mean(index, names)}",
            f"declare it under [indexes] (declared: {one_of(names) or 'none'})",
        )
    urls = [context.index_url, *(i.url for i in context.indexes if i.name == index)]
    parsed = parse_requirements(
        context.source,
        f"{context.folder}/{path}",
        allowed_index_urls=urls,
        origin=f"{node.file}: {node.at('pip')}",
    )
    if not parsed.requirements:
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
    return PipLayer(path, index, node.boolean("pre", False), no_deps, override)


def _override(node: _Node) -> tuple[str, ...]:
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


def _exact_pins_only(node: _Node, parsed: RequirementsFile) -> tuple[str, ...]:
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


def _recipe_file(node: _Node, key: str, context: _Context, under: str = "") -> str:
    """A path inside the recipe folder (``under`` it, when given) that exists."""
    path = node.text(key)
    clean = posixpath.normpath(path)
    if path.startswith("/") or clean.startswith("..") or not clean.startswith(under):
        raise node.error(key, f"{path!r} must be a relative path inside {context.folder}/{under}")
    if not context.source.exists(f"{context.folder}/{clean}"):
        raise node.error(key, f"{context.folder}/{clean} does not exist", "create it or fix it")
    return clean


def _run_layer(node: _Node, context: _Context) -> RunLayer:
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
    stdin = _own_file(node, "stdin", context) if "stdin" in node.data else None
    return RunLayer(command, stdin)


def _own_file(node: _Node, key: str, context: _Context) -> str:
    """A file or folder of the recipe folder that is the user's own (not the recipe itself)."""
    path = _recipe_file(node, key, context)
    if path in ("image.toml", ".") or path.startswith("templates"):
        raise node.error(key, "name a file or folder of your own, not the recipe itself")
    return path


def _copy_layer(node: _Node, context: _Context) -> CopyLayer:
    table = node.table("copy")
    table.check_keys(COPY_KEYS, required=("src", "dest"))
    src = _own_file(table, "src", context)
    dest = table.matching("dest", CONTAINER_PATH, "an absolute path inside the image")
    mode = _maybe(table, "mode", FILE_MODE, "an octal mode like '0755'")
    owner = _maybe(table, "owner", OWNER, "user[:group] (names or ids)")
    return CopyLayer(src, dest, mode, owner)


def _workdir_layer(node: _Node, context: _Context) -> WorkdirLayer:
    return WorkdirLayer(
        node.matching("workdir", CONTAINER_PATH, "an absolute path inside the image")
    )


def _env_layer(node: _Node, context: _Context) -> EnvLayer:
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


def _line(node: _Node, key: str) -> str:
    """A one-line string that may be empty (``ENV A=`` and ``LABEL a=`` are real)."""
    value: str = node.value(key, str, "a string")
    return node.text(key) if value else value


def _check_env_name(table: _Node, name: str) -> None:
    if not ENV_NAME.fullmatch(name):
        raise table.error(name, "not an environment variable name")
    if SECRET_NAME.search(name):
        raise table.error(
            name,
            "looks like a secret: it would stay in the image history",
            "pass secrets as BuildKit secrets (see the README)",
        )
    if name.upper() in PIP_SOURCE_ENV:
        raise table.error(
            name,
            "would change where pip looks for packages",
            "declare indexes in image.toml instead",
        )


# --- the final image's configuration --------------------------------------------------------


def _config(node: _Node) -> ImageConfig:
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


def _command(node: _Node, key: str) -> tuple[str, ...] | str | None:
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


def _maybe(node: _Node, key: str, pattern: re.Pattern[str], what: str) -> str | None:
    """``node.matching(key, …)`` when the key is there, else None."""
    return node.matching(key, pattern, what) if key in node.data else None


def _each_matching(node: _Node, key: str, pattern: re.Pattern[str], what: str) -> list[str]:
    items = node.texts(key)
    for index, item in enumerate(items, start=1):
        if not pattern.fullmatch(item):
            raise node.error(f"{key}[{index}]", f"not {what}: {item!r}")
    return items


def _labels(table: _Node) -> tuple[tuple[str, str], ...]:
    for name in table.data:
        if not LABEL_KEY.fullmatch(name):
            raise table.error(name, "label keys use letters, digits, '.', '_', '/' and '-'")
    return tuple((name, _line(table, name)) for name in table.data)


def _healthcheck(node: _Node) -> Healthcheck:
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


# --- the policy -----------------------------------------------------------------------------


def _policy(node: _Node | None, cuda: str, stages: tuple[Stage, ...]) -> Policy:
    recipe_cuda = None if cuda == "cpu" else cuda
    if node is None:
        return Policy(cuda=recipe_cuda)
    node.check_keys(POLICY_KEYS)
    actions: dict[str, Any] = {k: _action(node, k, d) for k, d in POLICY_ACTIONS.items()}
    policy = Policy(
        **actions,
        cuda=recipe_cuda,
        cuda_suffix=node.boolean("cuda_suffix", True),
        native_shadowed=_action(node, "native_shadowed", "")
        if "native_shadowed" in node.data
        else None,
        native_libraries=_library_prefixes(node),
        lockstep=_lockstep(node.table("lockstep")) if "lockstep" in node.data else (),
        requirements=_requirement_list(node, "require"),
        forbidden=_requirement_list(node, "forbid"),
        waivers=tuple(_waiver(w, stages) for w in node.tables("waiver")),
    )
    return _with_preset(node, policy)


def _with_preset(node: _Node, policy: Policy) -> Policy:
    """``policy`` with the preset ``[policy] preset`` names merged under it (see
    :func:`audit.core.presets.merge`); ``preset_skip`` lists rule ids of that preset."""
    name = node.optional_text("preset")
    if name is None:
        if "preset_skip" in node.data:
            raise node.error("preset_skip", "skips rules of a preset, but no preset is set")
        return policy
    if name not in presets.PRESETS:
        raise node.error(
            "preset",
            f"no preset {name!r}{did_you_mean(name, presets.NAMES)}",
            f"use {one_of(presets.NAMES)}",
        )
    ids = presets.rule_ids(name)
    skip = node.texts("preset_skip") if "preset_skip" in node.data else []
    for index, rule_id in enumerate(skip, start=1):
        if rule_id not in ids:
            raise node.error(
                f"preset_skip[{index}]",
                f"preset {name} has no rule {rule_id!r}{did_you_mean(rule_id, ids)}",
                f"use {one_of(ids)}",
            )
    explicit = frozenset(key for key in (*POLICY_ACTIONS, "cuda_suffix") if key in node.data)
    return presets.merge(policy, name, explicit, frozenset(skip))


def _action(node: _Node, key: str, default: str) -> str:
    value = node.text(key, default)
    if value not in ACTIONS:
        raise node.error(
            key,
            f"{value!r} is not an action{did_you_mean(value, ACTIONS)}",
            f"use {one_of(ACTIONS)}",
        )
    return value


LIBRARY_PREFIX = re.compile(r"lib[A-Za-z0-9_+-]+")


def _library_prefixes(node: _Node) -> tuple[str, ...]:
    """``native_libraries``: file name prefixes of shared libraries (``libmooncake``)."""
    found = []
    for index, text in enumerate(node.texts("native_libraries"), start=1):
        if not LIBRARY_PREFIX.fullmatch(text):
            raise node.error(
                f"native_libraries[{index}]",
                f"{text!r} is not a library file name prefix",
                "name it as its files start, e.g. 'libmooncake' for libmooncake.so.1",
            )
        found.append(text)
    return tuple(dict.fromkeys(found))


def _requirement_list(node: _Node, key: str) -> tuple[str, ...]:
    """PEP 508 strings with canonical names, one per package."""
    seen: dict[str, str] = {}
    for index, text in enumerate(node.texts(key), start=1):
        try:
            requirement = Requirement(text)
        except InvalidRequirement as exc:
            raise node.error(
                f"{key}[{index}]",
                f"not a PEP 508 requirement: {text!r}",
                "e.g. 'nvidia-nccl-cu13>=2.30'",
            ) from exc
        if requirement.url:
            raise node.error(f"{key}[{index}]", "a policy names versions, not URLs")
        requirement.name = canonicalize_name(requirement.name)
        if requirement.name in seen:
            raise node.error(
                f"{key}[{index}]",
                f"{requirement.name} is listed twice",
                "merge the specifiers into one entry",
            )
        seen[requirement.name] = str(requirement)
    return tuple(seen.values())


def _lockstep(table: _Node) -> tuple[LockstepGroup, ...]:
    groups = []
    for name in table.data:
        if not SIMPLE_NAME.fullmatch(name):
            raise table.error(name, "group names use letters, digits, '.', '_' and '-'")
        members = [canonicalize_name(m) for m in table.texts(name)]
        for index, member in enumerate(members, start=1):
            if not PACKAGE_GLOB.fullmatch(member):
                raise table.error(f"{name}[{index}]", f"not a package name or glob: {member!r}")
        if len(set(members)) != len(members) or not members:
            raise table.error(name, "list each member once", "a group needs distinct members")
        groups.append(LockstepGroup(name, tuple(members)))
    return tuple(groups)


def _waiver(node: _Node, stages: tuple[Stage, ...]) -> Waiver:
    node.check_keys(WAIVER_KEYS, required=("package", "from", "to", "reason"))
    package = node.text("package")
    if not PACKAGE_GLOB.fullmatch(package) or "*" in package or "?" in package:
        raise node.error("package", f"not a package name: {package!r}")
    stage, layer = _waiver_scope(node, stages)
    return Waiver(
        package=canonicalize_name(package),
        from_version=_waiver_version(node, "from"),
        to_version=_waiver_version(node, "to"),
        reason=node.text("reason"),
        expires=_expiry(node),
        rule=_waiver_rule(node),
        stage=stage,
        layer=layer,
    )


def _waiver_rule(node: _Node) -> str | None:
    rule = node.optional_text("rule")
    if rule is not None and rule not in WAIVER_RULES:
        raise node.error(
            "rule",
            f"{rule!r} is not a rule that can be waived{did_you_mean(rule, WAIVER_RULES)}",
            f"use {one_of(WAIVER_RULES)} (without rule: the change from -> to)",
        )
    return rule


def _waiver_scope(node: _Node, stages: tuple[Stage, ...]) -> tuple[str | None, int | None]:
    """The stage (a recipe stage name) and 1-based layer a waiver is limited to, if any."""
    stage = node.optional_text("stage")
    names = [s.name for s in stages]
    if stage is not None and stage not in names:
        raise node.error(
            "stage", f"no stage {stage!r}{did_you_mean(stage, names)}", f"use {one_of(names)}"
        )
    if "layer" not in node.data:
        return stage, None
    layer = node.data["layer"]
    count = len(next((s.layers for s in stages if s.name == stage), ()))
    if stage is None or type(layer) is not int or not 1 <= layer <= count:
        raise node.error(
            "layer",
            f"must be a layer number of stage {stage or '(none given)'}: 1 to {count}",
            'give stage = "vK" and layer = N (1-based) together',
        )
    return stage, layer


def _waiver_version(node: _Node, key: str) -> str:
    value = node.text(key)
    if value == "*":
        return value
    try:
        version = Version(value)
    except InvalidVersion as exc:
        raise node.error(key, f"not a version: {value!r}", "a PEP 440 version or '*'") from exc
    # normal form, so "2.9.0+CU130" or "1.0-RC1" match what pip installs ("2.9.0+cu130", "1.0rc1")
    return str(version)


def _expiry(node: _Node) -> dt.date | None:
    if "expires" not in node.data:
        return None
    value = node.data["expires"]
    if type(value) is not dt.date:
        raise node.error(
            "expires",
            f"must be a TOML date like 2026-12-31, not {value!r}",
            "write it unquoted: expires = 2026-12-31",
        )
    return value
