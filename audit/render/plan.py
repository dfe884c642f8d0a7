"""Render a recipe into its build context ``build/<image>/``: Dockerfile, inputs, policy, recipe.

This module plans only: every file's bytes and mode are computed in memory, templates
rendered, all errors raised, before anything is written. :mod:`audit.render.write` writes
the plan (atomically, only changed bytes) and removes what a previous render left.

The stage graph is rendered as the recipe says it (:mod:`audit.render.stages`: each FROM, the
build arguments, the USER/SHELL reset a stage needs); the guard runs after every pip and run
layer of an audited stage, and only there: a stage built on an image nothing recorded (or the
prelude before the base has Python) has nothing the guard could compare with.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import jinja2
from jinja2.loaders import split_template_path

from audit.errors import BadInput, RecipeError, UsageError
from audit.project.paths import PACKAGE_DIR, PACKAGE_TEMPLATES, image_dir, locks_dir
from audit.project.sources import DirectorySource, check_inside, read_project_file
from audit.recipe.model import (
    ArgLayer,
    CopyLayer,
    EnvLayer,
    Healthcheck,
    ImageConfig,
    Mount,
    PipLayer,
    Recipe,
    RunLayer,
    Stage,
    Step,
    WorkdirLayer,
)
from audit.recipe.requirements_in import parse_requirements
from audit.render.stages import (
    BuildArgs,
    arg_lines,
    stage_config,
    stage_reset,
    unguarded_reason,
)
from audit.suggest import did_you_mean

RECIPE_SCHEMA = 1
MANIFEST = ".layer-audit-render.json"
LOCK_TARGET = "/tmp/layer-audit/lock.txt"  # noqa: S108 - a path inside the image, not here
REQUIREMENTS_TARGET = "/tmp/layer-audit/requirements"  # noqa: S108 - inside the image
STDIN_TARGET = "/tmp/layer-audit/stdin"  # noqa: S108 - inside the image
BREAK_SYSTEM_PACKAGES = "PIP_BREAK_SYSTEM_PACKAGES"
PIP_CACHE_TARGET = "/root/.cache/pip"
PIP_CACHE_MOUNT = f"--mount=type=cache,target={PIP_CACHE_TARGET}"
FILE_MODE = 0o644
EXECUTABLE_MODE = 0o755


@dataclass(frozen=True)
class ContextFile:
    data: bytes
    mode: int = FILE_MODE


@dataclass(frozen=True)
class RenderResult:
    """What a render left: the context folder, its Dockerfile, and which files it touched."""

    context: Path
    dockerfile: Path
    files: tuple[Path, ...]  # every file of the context this render is responsible for
    changed: tuple[Path, ...] = ()  # written because their bytes or mode differed
    removed: tuple[Path, ...] = ()  # stale files of an earlier render


def select_stages(recipe: Recipe, stage: str | None) -> tuple[Stage, ...]:
    """The stages to render: all, or those building ``stage`` (a name ``vK`` or a stage's
    ``target``) needs, in file order: for a chain, v1 up to it."""
    names = [s.name for s in recipe.stages]
    if stage is None:
        return recipe.stages
    try:
        wanted = recipe.needs(stage)
    except KeyError:
        known = names + [s.target for s in recipe.stages if s.target]
        raise UsageError(
            f"{recipe.source.as_posix()}: no stage {stage!r}{did_you_mean(stage, known)}",
            f"stages: {', '.join(known)}",
        ) from None
    return tuple(s for s in recipe.stages if s.name in wanted)


# --- planning (no writes) -------------------------------------------------------------------


def plan_context(
    root: Path, recipe: Recipe, stages: tuple[Stage, ...], build_args: BuildArgs = ()
) -> dict[str, ContextFile]:
    """Every file of the build context, by context-relative POSIX path; ``build_args``
    (``render --build-arg``) replace ``[args]`` defaults in the Dockerfile."""
    steps = [s for s in recipe.steps() if s.stage in stages]
    locks = read_locks(root, recipe.name)
    files = {f"locks/{name}": ContextFile(data) for name, data in locks.items()}
    inputs = requirement_inputs(root, recipe, steps)
    for paths in inputs.values():
        files.update(paths)
    files.update(copied_files(root, recipe, steps))
    layers = LayerFiles(
        {f"locks/{name}" for name in locks}, {k: tuple(v) for k, v in inputs.items()}
    )
    files["policy.json"] = ContextFile(to_json(recipe.policy.to_json()))
    files["recipe.json"] = ContextFile(to_json(describe_recipe(recipe, stages, steps, layers)))
    dockerfile = render_dockerfile(root, recipe, stages, layers, build_args)
    files["Dockerfile"] = ContextFile(dockerfile.encode())
    return dict(sorted(files.items()))


@dataclass(frozen=True)
class LayerFiles:
    """Which pip layers have a lock, and the requirements files each reads (context paths)."""

    locks: set[str]
    requirements: dict[str, tuple[str, ...]]  # by step slug; the layer's own file first

    def lock(self, step: Step) -> str | None:
        """The context path of a pip layer's lock, when one has been compiled."""
        name = f"locks/{step.slug}.txt"
        return name if name in self.locks else None


def to_json(data: Any) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def read_locks(root: Path, image: str) -> dict[str, bytes]:
    """``locks/<image>/*`` (plain files, no dot files), by file name."""
    folder = locks_dir(root, image)
    if not folder.is_dir():
        return {}
    found = sorted(p for p in folder.iterdir() if not p.is_dir() and not p.name.startswith("."))
    return {path.name: read_project_file(root, path.relative_to(root).as_posix()) for path in found}


def requirement_inputs(
    root: Path, recipe: Recipe, steps: list[Step]
) -> dict[str, dict[str, ContextFile]]:
    """By pip layer slug: its .in file and what that includes, at ``requirements/…``."""
    source = DirectorySource(root)
    folder = recipe.directory.as_posix()
    inputs: dict[str, dict[str, ContextFile]] = {}
    for step in steps:
        if isinstance(step.layer, PipLayer):
            parsed = parse_requirements(
                source,
                f"{folder}/{step.layer.requirements}",
                allowed_index_urls=allowed_urls(recipe, step.layer),
                origin=f"{recipe.source.as_posix()}: {step.key_path}.pip",
            )
            inputs[step.slug] = {
                relpath.removeprefix(f"{folder}/"): ContextFile(source.read_bytes(relpath))
                for relpath in parsed.files
            }
    return inputs


def allowed_urls(recipe: Recipe, layer: PipLayer) -> list[str]:
    """The indexes a pip layer may use: its primary index and its own extra index."""
    extra = [recipe.index(layer.index).url] if layer.index else []
    return [recipe.layer_index_url(layer), *extra]


def copied_files(root: Path, recipe: Recipe, steps: list[Step]) -> dict[str, ContextFile]:
    """Sources of copy layers under ``files/``, keeping their executable bit.

    Each is read by :func:`read_project_file`: a regular file inside the recipe folder, under
    the size cap; a link out, a FIFO or a device is refused (exit 2) naming the path.
    """
    folder = image_dir(root, recipe.name)
    files: dict[str, ContextFile] = {}
    for step in steps:
        for key, src in _context_sources(step):
            for path in _walk(folder, folder / src, recipe, f"{step.key_path}.{key}"):
                mode = EXECUTABLE_MODE if os.access(path, os.X_OK) else FILE_MODE
                rel = path.relative_to(folder).as_posix()
                data = read_project_file(root, path.relative_to(root).as_posix())
                files[f"files/{rel}"] = ContextFile(data, mode)
    return files


def _context_sources(step: Step) -> list[tuple[str, str]]:
    """(key, recipe-folder path) of what a layer brings into the build context: a copy
    layer's source (not one copied from a stage or image), a run layer's standard input, the
    recipe files its bind mounts name."""
    layer = step.layer
    if isinstance(layer, CopyLayer):
        return [] if layer.from_ else [("copy.src", layer.src)]
    found = [("stdin", layer.stdin)] if isinstance(layer, RunLayer) and layer.stdin else []
    if isinstance(layer, RunLayer | PipLayer):
        found += [
            (f"mounts[{n}].source", m.source)
            for n, m in enumerate(layer.mounts, 1)
            if m.type == "bind" and m.from_ is None and m.source
        ]
    return found


def _walk(folder: Path, start: Path, recipe: Recipe, key_path: str) -> Iterator[Path]:
    """Entries at or under ``start`` that are not folders, sorted, refusing links that leave
    the recipe folder (FIFOs and devices are yielded, so that reading them refuses them)."""
    where = f"{recipe.source.as_posix()}: {key_path}"
    hint = "copy the file into the recipe folder instead of linking it"
    try:
        check_inside(folder, start, str(start.relative_to(folder)))
    except RecipeError:
        raise
    except BadInput as exc:
        raise RecipeError(where, exc.message, hint) from exc
    paths = sorted(p for p in start.rglob("*") if not p.is_dir()) if start.is_dir() else [start]
    for path in paths:
        if not path.resolve().is_relative_to(folder.resolve()):
            raise RecipeError(
                where,
                f"{path.relative_to(folder)} links outside {recipe.directory.as_posix()}/",
                hint,
            )
        yield path


# --- views: what the templates see ------------------------------------------------------------


def stage_views(
    recipe: Recipe, stages: tuple[Stage, ...], layers: LayerFiles
) -> list[dict[str, Any]]:
    steps = [s for s in recipe.steps() if s.stage in stages]
    views = []
    for stage in stages:
        number = recipe.stages.index(stage) + 1
        config, origin = stage_config(recipe, stage)
        views.append(
            {
                "name": stage.name,
                "number": number,
                "parent": recipe.from_ref(stage),
                "description": stage.description,
                "origin": f"{recipe.source.as_posix()} stage[{number}] ({stage.name})",
                "reset": stage_reset(recipe, stage),
                "steps": [step_view(recipe, s, layers) for s in steps if s.stage is stage],
                "config": config_instructions(config) if config else [],
                "config_origin": f"{recipe.source.as_posix()} {origin}",
            }
        )
    return views


def step_view(recipe: Recipe, step: Step, layers: LayerFiles) -> dict[str, Any]:
    """Everything a layer template needs, precomputed so templates only lay text out."""
    origin = f"{recipe.source.as_posix()} {step.key_path}"
    view: dict[str, Any] = {"slug": step.slug, "key_path": step.key_path, "mounts": []}
    view["unguarded"] = unguarded_reason(recipe, step.stage)
    layer = step.layer
    if isinstance(layer, PipLayer):
        lock = layers.lock(step)
        mounts = pip_mounts(lock, layers.requirements[step.slug])
        view |= {"kind": "pip", "origin": f"{origin} pip {layer.requirements}", "lock": lock}
        view |= {"mounts": mounts + own_mounts(layer.mounts, mounts)}
        view |= {"commands": pip_commands(recipe, layer, lock)}
    elif isinstance(layer, RunLayer):
        view |= {"kind": "run", "origin": f"{origin} run", "commands": [layer.command]}
        view |= {"stdin": STDIN_TARGET if layer.stdin else None}
        if layer.stdin:
            view["mounts"] = [f"--mount=type=bind,source=files/{layer.stdin},target={STDIN_TARGET}"]
        view["mounts"] += own_mounts(layer.mounts, view["mounts"])
    elif isinstance(layer, ArgLayer):
        view |= {"kind": "arg", "origin": f"{origin} arg", "names": list(layer.names)}
    elif isinstance(layer, CopyLayer):
        view |= {"kind": "copy", "origin": f"{origin} copy {layer.src}"}
        view["arguments"] = copy_arguments(layer)
    elif isinstance(layer, WorkdirLayer):
        view |= {"kind": "workdir", "origin": f"{origin} workdir", "path": layer.path}
    else:
        names = " ".join(name for name, _ in layer.values)
        view |= {"kind": "env", "origin": f"{origin} env {names}"}
        quote = env_expanding if layer.expand else env_quote
        view["assignments"] = [f"{name}={quote(value)}" for name, value in layer.values]
    return view


def copy_arguments(layer: CopyLayer) -> str:
    """``[--from=vK] --chmod=… --chown=… ["files/src", "/dest"]`` (JSON form: paths may hold
    spaces); a copy from a stage or image names its path there."""
    flags = [f"--from={layer.from_}"] if layer.from_ else []
    flags += [f"--chmod={layer.mode}"] if layer.mode else []
    flags += [f"--chown={layer.owner}"] if layer.owner else []
    src = layer.src if layer.from_ else f"files/{layer.src}"
    return " ".join([*flags, json.dumps([src, layer.dest])])


def mount_flag(mount: Mount) -> str:
    """``--mount=type=cache,target=/root/.cache/uv``: keys in a fixed order; a bind of a
    recipe file names it under ``files/`` in the build context."""
    source = mount.source
    if mount.type == "bind" and mount.from_ is None and source:
        source = f"files/{source}"
    keys = [("type", mount.type), ("id", mount.id), ("from", mount.from_), ("source", source)]
    keys += [("target", mount.target), *mount.options]
    return "--mount=" + ",".join(f"{key}={value}" for key, value in keys if value is not None)


def own_mounts(mounts: tuple[Mount, ...], ours: list[str]) -> list[str]:
    """A layer's own mounts as flags, less any whose target one of ``ours`` already mounts
    (a Dockerfile's pip cache: the render's own cache mount serves it)."""
    taken = {part.partition("=")[2] for flag in ours for part in flag.split(",")
             if part.startswith("target=")}  # fmt: skip
    return [mount_flag(m) for m in mounts if m.target is None or m.target not in taken]


def config_instructions(config: ImageConfig) -> list[str]:
    """The final image's configuration as Dockerfile instructions, in the order Docker needs:
    SHELL first (a shell-form CMD is stored with the SHELL in force), ENTRYPOINT before CMD.
    Exec forms are JSON arrays; every value was checked to be one line by the parser."""
    lines = [f"SHELL {json.dumps(list(config.shell))}"] if config.shell else []
    lines += [f"USER {config.user}"] if config.user else []
    lines += [f"EXPOSE {' '.join(config.expose)}"] if config.expose else []
    labels = [f"{env_quote(key)}={env_quote(value)}" for key, value in config.labels]
    lines += [f"LABEL {' '.join(labels)}"] if labels else []
    lines += [f"STOPSIGNAL {config.stopsignal}"] if config.stopsignal else []
    lines += [healthcheck_instruction(config.healthcheck)] if config.healthcheck else []
    lines += [f"ENTRYPOINT {command_form(config.entrypoint)}"] if config.entrypoint else []
    lines += [f"CMD {command_form(config.cmd)}"] if config.cmd else []
    return lines


def command_form(command: tuple[str, ...] | str | None) -> str:
    """A JSON array (exec form) for a list, the line itself (shell form) for a string."""
    return (
        json.dumps(list(command), ensure_ascii=False)
        if isinstance(command, tuple)
        else str(command)
    )


def healthcheck_instruction(check: Healthcheck) -> str:
    if check.disable:
        return "HEALTHCHECK NONE"
    options = [
        f"--{name.replace('_', '-')}={value}"
        for name, value in (("interval", check.interval), ("timeout", check.timeout),
                            ("start_period", check.start_period), ("retries", check.retries))
        if value is not None
    ]  # fmt: skip
    return " ".join(["HEALTHCHECK", *options, "CMD", command_form(check.command)])


def pip_mounts(lock: str | None, requirements: tuple[str, ...]) -> list[str]:
    """Bind the lock (or, unlocked, the layer's own requirements files) and pip's cache.

    Only this layer's inputs are mounted: BuildKit keys the step on their contents, so an edit
    to another layer's file must not rebuild this one.
    """
    if lock:
        return [f"--mount=type=bind,source={lock},target={LOCK_TARGET}", PIP_CACHE_MOUNT]
    binds = [
        f"--mount=type=bind,source={path},target={REQUIREMENTS_TARGET}/"
        + path.removeprefix("requirements/")
        for path in requirements
    ]
    return [*binds, PIP_CACHE_MOUNT]


def pip_commands(recipe: Recipe, layer: PipLayer, lock: str | None) -> list[str]:
    """The layer's install; unlocked with an ``override``, the --no-deps re-pin after it (a
    lock already holds the overridden versions)."""
    commands = [pip_command(recipe, layer, lock)]
    if layer.override and not lock:
        repin = ["PIP_CONFIG_FILE=/dev/null", recipe.interpreters[0], "-m", "pip", "install"]
        repin += ["--no-deps", "--index-url", recipe.layer_index_url(layer)]
        if layer.index:
            repin += ["--extra-index-url", recipe.index(layer.index).url]
        commands.append(" ".join(shlex.quote(arg) for arg in [*repin, *layer.override]))
    return commands


def pip_command(recipe: Recipe, layer: PipLayer, lock: str | None) -> str:
    """The pip install of one layer, blind to the machine's and the image's pip config files."""
    args = ["PIP_CONFIG_FILE=/dev/null", *break_system_packages(recipe)]
    args += [recipe.interpreters[0], "-m", "pip", "install"]
    if lock:
        args += ["--require-hashes", "--no-deps"]
    else:
        args += (["--pre"] if layer.pre else []) + (["--no-deps"] if layer.no_deps else [])
    args += ["--index-url", recipe.layer_index_url(layer)]
    if layer.index:
        args += ["--extra-index-url", recipe.index(layer.index).url]
    in_file = layer.requirements.removeprefix("requirements/")
    args += ["-r", LOCK_TARGET if lock else f"{REQUIREMENTS_TARGET}/{in_file}"]
    return " ".join(shlex.quote(arg) for arg in args)


def break_system_packages(recipe: Recipe) -> list[str]:
    """PEP 668: the assignment that lets pip install into an externally managed interpreter,
    when the recipe says so (``[image] break_system_packages = true``); else nothing."""
    return [f"{BREAK_SYSTEM_PACKAGES}=1"] if recipe.break_system_packages else []


def env_expanding(value: str) -> str:
    """A Dockerfile ENV value whose ``${NAME}`` references Docker expands: double-quoted, with
    \\ and " escaped (the parser allowed ``$`` only as the start of a reference)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def env_quote(value: str) -> str:
    """A Dockerfile ENV value taken literally: double-quoted, with \\, " and $ escaped."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


def describe_recipe(
    recipe: Recipe, stages: tuple[Stage, ...], steps: list[Step], layers: LayerFiles
) -> dict[str, Any]:
    """``recipe.json``: the rendered recipe as plain data, for people and tools.

    The build guard does not read it: its settings are ``_guard/guard.json``.
    """
    return with_graph(
        recipe,
        stages,
        {
            "schema": RECIPE_SCHEMA,
            "name": recipe.name,
            "source": recipe.source.as_posix(),
            "base": recipe.base,
            "base_digest": recipe.base_digest,
            "base_ref": recipe.base_ref,
            "platform": recipe.platform,
            "arch": recipe.arch,
            "cuda": recipe.cuda,
            "interpreters": list(recipe.interpreters),
            "break_system_packages": recipe.break_system_packages,
            "repository": recipe.repository,
            "latest_tag": recipe.latest_tag(),
            "index_url": recipe.index_url,
            "indexes": {index.name: index.url for index in recipe.indexes},
            "config": config_instructions(recipe.config),
            "stages": [
                {
                    "name": stage.name,
                    "description": stage.description,
                    "smoke": stage.smoke,
                    "tag": recipe.tag(stage.name),
                    "layers": [layer_data(s, layers) for s in steps if s.stage is stage],
                }
                for stage in stages
            ],
        },
    )


def with_graph(recipe: Recipe, stages: tuple[Stage, ...], data: dict[str, Any]) -> dict[str, Any]:
    """``recipe.json``'s stage graph, present only where the recipe has one (a chain of
    stages on ``[image] base`` renders as it always did): ``args``, ``base_stage`` and per
    stage ``from`` (a stage or an image), ``target``, ``audited``."""
    if recipe.args:
        data["args"] = dict(recipe.args)
    if recipe.base_stage:
        data |= {"base_stage": recipe.base_stage, "recorded_ref": recipe.recorded_ref}
    chain = all(recipe.from_ref(s) == (recipe.stages[n - 1].name if n else recipe.base_ref)
                for n, s in enumerate(recipe.stages))  # fmt: skip
    if chain and not recipe.base_stage and not any(s.target for s in recipe.stages):
        return data
    for view, stage in zip(data["stages"], stages, strict=True):
        view.update(
            {"from": recipe.from_ref(stage), "audited": recipe.audited(stage)}
            | ({"target": stage.target} if stage.target else {})
        )
    return data


def layer_data(step: Step, layers: LayerFiles) -> dict[str, Any]:
    data: dict[str, Any] = {"slug": step.slug, "key_path": step.key_path}
    layer = step.layer
    if isinstance(layer, PipLayer):
        data |= {"kind": "pip", "requirements": layer.requirements, "index": layer.index}
        data |= {"pre": layer.pre, "lock": layers.lock(step)}
    elif isinstance(layer, RunLayer):
        data |= {"kind": "run", "command": layer.command, "stdin": layer.stdin}
    elif isinstance(layer, CopyLayer):
        data |= {"kind": "copy", "src": layer.src, "dest": layer.dest}
        data |= {"mode": layer.mode, "owner": layer.owner}
    elif isinstance(layer, EnvLayer):
        data |= {"kind": "env", "values": [list(pair) for pair in layer.values]}
        data["expand"] = layer.expand
    elif isinstance(layer, WorkdirLayer):
        data |= {"kind": "workdir", "path": layer.path}
    elif isinstance(layer, ArgLayer):
        data |= {"kind": "arg", "names": list(layer.names)}
    _graph_layer_data(layer, data)
    return data


def _graph_layer_data(layer: object, data: dict[str, Any]) -> None:
    """The keys a layer of a real Dockerfile carries beyond the recipe's first ones, each
    present only when set: a copy's ``from``, a pip layer's ``primary_index``, mounts."""
    if isinstance(layer, CopyLayer) and layer.from_:
        data["from"] = layer.from_
    if isinstance(layer, PipLayer) and layer.primary_index:
        data["primary_index"] = layer.primary_index
    if isinstance(layer, PipLayer | RunLayer) and layer.mounts:
        data["mounts"] = [mount_flag(m).removeprefix("--mount=") for m in layer.mounts]


# --- templates ------------------------------------------------------------------------------


class ProjectLoader(jinja2.BaseLoader):
    """Templates from project folders, each read by :func:`read_project_file`: regular files
    inside the project only, under the size cap (no link out, FIFO or device)."""

    def __init__(self, root: Path, folders: tuple[str, ...]) -> None:
        self.root = root
        self.folders = folders

    def get_source(
        self, environment: jinja2.Environment, template: str
    ) -> tuple[str, str, Callable[[], bool]]:
        parts = split_template_path(template)  # refuses '..'
        for folder in self.folders:
            relpath = "/".join((folder, *parts))
            if not (self.root / relpath).exists():
                continue
            try:
                data = read_project_file(self.root, relpath)
            except OSError as exc:
                raise RecipeError(relpath, f"cannot read ({exc.strerror})", _TEMPLATE_HINT) from exc
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                problem = f"not UTF-8 text ({exc.reason})"
                raise RecipeError(relpath, problem, "save it as UTF-8") from exc
            return text, str(self.root / relpath), _unchanged(self.root / relpath)
        raise jinja2.TemplateNotFound(template)


def _unchanged(path: Path) -> Callable[[], bool]:
    """Jinja's up-to-date check: True while ``path`` keeps the modification time it has now."""
    mtime = path.stat().st_mtime
    return lambda: path.stat().st_mtime == mtime


def environment(root: Path, recipe: Recipe) -> jinja2.Environment:
    """Per-image templates (``images/<image>/templates/``) first, then the project's
    ``templates/`` (both read as project files: no link out, FIFO or device), then the
    defaults shipped in the package: the first file found wins."""
    image_templates = (image_dir(root, recipe.name) / "templates").relative_to(root).as_posix()
    loader = jinja2.ChoiceLoader(
        [
            ProjectLoader(root, (image_templates, "templates")),
            jinja2.FileSystemLoader(PACKAGE_TEMPLATES),
        ]
    )
    return jinja2.Environment(
        loader=loader,
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # noqa: S701 - renders a Dockerfile, not HTML
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_dockerfile(
    root: Path,
    recipe: Recipe,
    stages: tuple[Stage, ...],
    layers: LayerFiles,
    build_args: BuildArgs = (),
) -> str:
    views = stage_views(recipe, stages, layers)
    args = arg_lines(recipe, build_args)
    try:
        template = environment(root, recipe).get_template("Dockerfile.j2")
        text = template.render(recipe=recipe, stages=views, args=args)
    except jinja2.TemplateSyntaxError as exc:
        where = f"{_template_name(root, exc.filename or exc.name or '?')}:{exc.lineno}"
        raise RecipeError(where, f"template syntax error: {exc.message}", _TEMPLATE_HINT) from exc
    except jinja2.TemplateNotFound as exc:
        raise RecipeError(str(exc.name), "template not found", _TEMPLATE_HINT) from exc
    except (jinja2.TemplateError, TypeError, AttributeError) as exc:
        where = _failing_template(root, exc.__traceback__) or "templates/Dockerfile.j2"
        raise RecipeError(where, f"template error: {exc}", _TEMPLATE_HINT) from exc
    return text.rstrip("\n") + "\n"


_TEMPLATE_HINT = (
    "fix the template (images/<image>/templates/ wins over the project's templates/, which wins"
    " over the package's audit/templates/); the variables are recipe, stages and, in layer"
    " templates, step"
)


def _failing_template(root: Path, trace: TracebackType | None) -> str | None:
    """``templates/x.j2:12`` of the innermost template frame: Jinja maps frames to templates."""
    found = None
    while trace is not None:
        filename = trace.tb_frame.f_code.co_filename
        if filename.endswith(".j2"):
            found = f"{_template_name(root, filename)}:{trace.tb_lineno}"
        trace = trace.tb_next
    return found


def _template_name(root: Path, filename: str) -> str:
    """A template's path relative to the project, or ``audit/templates/…`` for a default."""
    path = Path(filename)
    if path.is_relative_to(root):
        return path.relative_to(root).as_posix()
    if path.is_relative_to(PACKAGE_DIR):
        return path.relative_to(PACKAGE_DIR.parent).as_posix()
    return filename
