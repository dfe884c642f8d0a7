"""``layer-audit import DOCKERFILE``: write a recipe folder from a multi-stage Dockerfile.

The mapping is :func:`audit.dockerfile.importer.plan_import`. This module reads the
Dockerfile, copies the files its ``COPY`` layers and bind mounts name from the build context,
and writes the recipe into a temporary project first: it is loaded with the recipe parser (so
what lands in ``images/`` is a recipe that validates) and only then renamed into
``images/<image>/``. An existing recipe folder is never touched.

Exit codes: 0 written (what it could not keep listed, each with its Dockerfile line); 1 with
``--strict`` when it could not keep something (the recipe is written all the same, so it can
be reviewed); 2 bad input; 3 an unwritable project or unreadable context.

Hostile input ends in exit 2 or 3 with the path named, nothing half-written: a Dockerfile that
:func:`audit.dockerfile.importer.read_dockerfile` refuses (over 1 MiB, binary, not a regular
file); a link in a copied folder that leaves the build context, dangles or loops; a FIFO or
device; an unwritable ``images/`` (exit 3).
``COPY .`` never copies the project's own ``images/``, ``build/``, ``locks/`` nor ``.git``, and no
COPY copies what the context's ``.dockerignore`` leaves out (:mod:`audit.dockerfile.dockerignore`).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from rich.markup import escape

from audit.cli.context import RunContext
from audit.dockerfile import dockerignore
from audit.dockerfile.dockerignore import Ignored
from audit.dockerfile.importer import (
    ImportOptions,
    ImportPlan,
    plan_import,
    read_dockerfile,
    unmapped_lines,
)
from audit.errors import (
    EXIT_OK,
    EXIT_VIOLATION,
    BadInput,
    EnvironmentProblem,
    RecipeError,
    UsageError,
)
from audit.host import atomic, console
from audit.project import paths
from audit.project.sources import DirectorySource
from audit.recipe.parse import load_recipe
from audit.redact import redact
from audit.render.stages import parse_build_arg

NAME_PART = re.compile(r"[^a-z0-9._-]+")
MAX_SCRIPT = 1 << 20  # a script a RUN runs, read to see whether it installs packages
PROJECT_FOLDERS = ("images", "build", "locks")  # never copied into a recipe by COPY .
CONTEXT_SKIPPED = (".git", ".nox")
LINK_HINT = "replace the link by the file it names, or leave it out of the COPY"


NEEDS_PROJECT = False
HELP = "turn a multi-stage Dockerfile into a recipe under images/"
DESCRIPTION = (
    "Read DOCKERFILE and write images/IMAGE/: image.toml (one recipe stage per Dockerfile "
    "stage, each starting where its FROM says; the image the last stage ships from as the "
    "base), one requirements file per pip install it can lock, and the files its COPY lines "
    "and bind mounts bring in. What it cannot keep is listed with its line and reason (exit 1 "
    "with --strict); installs kept as run layers are listed as not locked. See docs/import.md."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dockerfile", type=Path, help="the Dockerfile to read")
    parser.add_argument("--image", help="the recipe's name (default: from the Dockerfile's folder)")
    parser.add_argument(
        "--context", type=Path, help="the build context COPY reads from (default: its folder)"
    )
    parser.add_argument("--platform", help="linux/amd64 unless FROM --platform says otherwise")
    parser.add_argument("--cuda", help="cuNNN or cpu (default: from the base image's tag)")
    parser.add_argument(
        "--interpreter",
        help="the Python pip layers install with (default: one a RUN names, else where the "
        "base usually has it: /usr/bin/python3)",
    )
    parser.add_argument(
        "--build-arg",
        dest="build_args",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="import as built with this argument: the value FROM, paths and locked "
        "requirements take (repeatable)",
    )
    parser.add_argument(
        "--base-without-python",
        dest="base_has_python",
        action="store_const",
        const=False,
        help="the base has no Python (known for nvidia/cuda, ubuntu, debian …): the base record "
        "is taken after the step that installs one (base_stage)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when a line could not be kept (the recipe is still written, for review)",
    )


def handle(args: argparse.Namespace, run: RunContext) -> int:
    dockerfile: Path = args.dockerfile
    data = read_dockerfile(dockerfile, "give the path of a Dockerfile to import")
    context = (args.context or dockerfile.parent).resolve()
    if not context.is_dir():
        raise UsageError(f"--context {args.context}: not a folder", "give the build context")
    image = args.image or default_image_name(dockerfile)
    check_image_name(image)
    root = project_root(args, run)
    target = paths.image_dir(root, image)
    if target.exists():
        raise UsageError(
            f"{target}: a recipe folder already exists",
            "choose another name with --image, or move that folder away first",
        )
    leaves_out = dockerignore.ignored(context, dockerfile)
    options = ImportOptions(
        where=str(dockerfile),
        platform=args.platform,
        cuda=args.cuda,
        interpreter=args.interpreter,
        base_has_python=args.base_has_python,
        build_args=tuple(parse_build_arg(text) for text in args.build_args),
    )
    plan = plan_import(
        data,
        image,
        lambda relpath: _in_context(context, relpath, leaves_out),
        options,
        lambda relpath: _read_script(context, relpath, leaves_out),
    )
    skip = frozenset((root / name).resolve() for name in PROJECT_FOLDERS)
    seen = _Context(context, skip, leaves_out)
    copies = {relpath: list(_files(seen, source)) for relpath, source in plan.copies.items()}
    write_recipe(root, plan, copies, dockerfile)
    show(root, dockerfile, plan)
    return EXIT_VIOLATION if args.strict and plan.unmapped else EXIT_OK


def default_image_name(dockerfile: Path) -> str:
    """A recipe name from ``dir/Dockerfile`` (``dir``) or ``name.Dockerfile`` (``name``)."""
    stem = dockerfile.name.removesuffix(".Dockerfile").removeprefix("Dockerfile.")
    word = stem if stem.lower() != "dockerfile" else dockerfile.resolve().parent.name
    return NAME_PART.sub("-", word.lower()).strip("-._") or "imported"


def check_image_name(image: str) -> None:
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", image):
        raise UsageError(
            f"--image {image!r}: not a recipe name",
            "use lower case letters, digits, '.', '_' and '-', starting with a letter or digit",
        )


def project_root(args: argparse.Namespace, run: RunContext) -> Path:
    """--project, else the project around the working folder, else the working folder."""
    if getattr(args, "project", None):
        return Path(args.project).resolve()
    return run.root_or_none() or run.cwd.resolve()


def _in_context(context: Path, relpath: str, ignored: Ignored) -> bool:
    """Whether ``relpath`` names an entry Docker would send in the context (one its ignore
    file leaves out is not there for COPY either; a link is judged when copied)."""
    return os.path.lexists(context / relpath) and not ignored(os.path.normpath(relpath))


def _read_script(context: Path, relpath: str, ignored: Ignored) -> str | None:
    """A small text file of the context (a script a RUN runs), or None: missing, left out by
    the ignore file, a link out of the context, not a regular file, large or not text."""
    path = context / relpath
    try:
        real = path.resolve(strict=True)
        if not real.is_relative_to(context) or ignored(os.path.normpath(relpath)):
            return None
        info = real.stat()
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_SCRIPT:
            return None
        return real.read_bytes().decode("utf-8")
    except (OSError, RuntimeError, UnicodeDecodeError):
        return None


@dataclass(frozen=True)
class _Context:
    """The build context as a COPY sees it: its resolved root, the project folders it never
    copies into a recipe, and what its ignore file leaves out."""

    root: Path
    skip: frozenset[Path]
    ignored: Ignored

    def left_out(self, path: Path, real: Path) -> bool:
        relpath = path.relative_to(self.root).as_posix()
        top = real.parent == self.root and real.name in CONTEXT_SKIPPED
        return real in self.skip or top or (relpath != "." and self.ignored(relpath))


def _files(context: _Context, relpath: str) -> Iterator[tuple[str, Path]]:
    """(path under the copied source, real file) for every file it brings in, links followed
    only while they stay inside the context; a link out, a loop or a special file refuses;
    what the ignore file leaves out is not copied."""
    yield from _walk(context, context.root / relpath, "", frozenset())


def _walk(
    context: _Context, path: Path, shown: str, above: frozenset[Path]
) -> Iterator[tuple[str, Path]]:
    name = str(path)
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError) as exc:  # a dangling link, or a loop of links
        raise UsageError(f"{name}: a broken link or a loop of links ({exc})", LINK_HINT) from exc
    if not real.is_relative_to(context.root):
        raise UsageError(
            f"{name}: a link to {real}, outside the build context {context.root}", LINK_HINT
        )
    if real in above:
        raise UsageError(f"{name}: a link back to a folder that contains it (a loop)", LINK_HINT)
    if context.left_out(path, real):
        return
    mode = real.stat().st_mode
    if stat.S_ISDIR(mode):
        for child in sorted(real.iterdir()):
            inner = f"{shown}/{child.name}" if shown else child.name
            yield from _walk(context, path / child.name, inner, above | {real})
    elif stat.S_ISREG(mode):
        yield shown, real
    else:
        raise UsageError(f"{name}: not a regular file (a FIFO, socket or device)", LINK_HINT)


def write_recipe(
    root: Path, plan: ImportPlan, copies: dict[str, list[tuple[str, Path]]], dockerfile: Path
) -> None:
    """Write the recipe into a scratch project, validate it, then rename it into images/;
    on any failure nothing stays behind (not even an ``images/`` this run created)."""
    images = root / "images"
    created = not images.exists()
    try:
        images.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".import-{plan.image}-", dir=images))
    except OSError as exc:
        raise _unwritable(images, exc) from exc
    try:
        _write(scratch / "images" / plan.image, plan, copies)
        _validate(scratch, plan, dockerfile)
        (scratch / "images" / plan.image).rename(paths.image_dir(root, plan.image))
    except OSError as exc:
        raise _unwritable(images, exc) from exc
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if created and images.is_dir() and not any(images.iterdir()):
            images.rmdir()


def _write(folder: Path, plan: ImportPlan, copies: dict[str, list[tuple[str, Path]]]) -> None:
    folder.mkdir(parents=True)  # requirements/ only with a pip layer's file: none stays empty
    atomic.write_text(folder / "image.toml", plan.recipe_toml())
    for relpath, data in [*plan.requirements.items(), *plan.files.items()]:
        (folder / relpath).parent.mkdir(parents=True, exist_ok=True)
        atomic.write_bytes(folder / relpath, redact(data.decode()).encode())
    for relpath, files in copies.items():
        if not (len(files) == 1 and files[0][0] == ""):  # a folder (an empty one stays one)
            (folder / relpath).mkdir(parents=True, exist_ok=True)
        for inner, real in files:
            # COPY . . and then COPY sub/path: both name the same context file, written once
            target = folder / relpath / inner if inner else folder / relpath
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.is_file():
                shutil.copy2(real, target)


def _validate(scratch: Path, plan: ImportPlan, dockerfile: Path) -> None:
    try:
        load_recipe(DirectorySource(scratch), plan.image)
    except BadInput as error:  # named after the Dockerfile: the scratch recipe is gone
        problem = error.problem if isinstance(error, RecipeError) else error.message
        problem = problem.replace(f"{scratch}/", "")
        raise RecipeError(
            str(dockerfile),
            f"the recipe imported from it does not validate: {problem}",
            "report this Dockerfile to layer-audit; meanwhile edit the line the problem names",
        ) from error


def _unwritable(images: Path, exc: OSError) -> EnvironmentProblem:
    """Exit 3, naming the folder (or a context file that could not be read)."""
    where = exc.filename if exc.filename and not str(exc.filename).startswith(str(images)) else ""
    return EnvironmentProblem(
        f"{images}: cannot write the recipe ({exc.strerror or exc}"
        + (f": {where})" if where else ")"),
        "import writes images/<name>/ in the project and reads the build context: "
        "make both accessible, or give --project",
    )


def _listing(heading: str, lines: Iterable[str], style: str = "") -> None:
    """``heading`` (console markup), then each line indented, escaped, in ``style``."""
    console.stdout.print(heading)
    for line in lines:
        text = escape(line)
        console.stdout.print(f"  [{style}]{text}[/]" if style else f"  {text}")


def show(root: Path, dockerfile: Path, plan: ImportPlan) -> None:
    """What was written, every listed line with its number, and what to do next."""
    folder = paths.image_dir(root, plan.image)
    layers = sum(len(stage.layers) for stage in plan.stages)
    console.stdout.print(
        f"[green]imported[/] {escape(str(dockerfile))} -> {escape(str(folder))}/: "
        f"{len(plan.stages)} stages, {layers} layers, {len(plan.requirements)} pip layers, "
        f"{len(plan.copies)} copied files"
    )
    console.stdout.print(
        f"  base {escape(plan.base)}, platform {plan.platform}, cuda {plan.cuda}, "
        f"interpreter {escape(plan.interpreter)}"
        + (f", base_stage {plan.base_stage}" if plan.base_stage else "")
    )
    for line in unmapped_lines(plan.notes):
        console.stdout.print(f"  [dim]note: {escape(line)}[/]")
    if plan.unlocked:
        _listing(
            f"{len(plan.unlocked)} install(s) not locked (kept as run layers; the build guard "
            "and the layer walk audit them):",
            unmapped_lines(plan.unlocked),
        )
    if plan.unmapped:
        _listing(
            f"[yellow]{len(plan.unmapped)} line(s) not kept as written[/] (marked UNMAPPED in "
            "image.toml where they stand):",
            unmapped_lines(plan.unmapped),
            "yellow",
        )
    console.stdout.print(
        f"next: layer-audit render {plan.image}, review image.toml, "
        f"then layer-audit lock {plan.image}"
    )
