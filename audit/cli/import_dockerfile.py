"""``layer-audit import DOCKERFILE``: write a recipe folder from a multi-stage Dockerfile.

The mapping is :func:`audit.dockerfile.importer.plan_import`. This module reads the
Dockerfile, copies the files its ``COPY`` layers name from the build context, and writes the
recipe into a temporary project first: it is loaded with the recipe parser (so what lands in
``images/`` is a recipe that validates) and only then renamed into ``images/<image>/``. An
existing recipe folder is never touched.

Hostile input ends in exit 2 or 3 with the path named, nothing half-written: a Dockerfile over
``MAX_DOCKERFILE`` bytes, binary or not a regular file; a link in a copied folder that leaves
the build context, dangles or loops; a FIFO or device; an unwritable ``images/`` (exit 3).
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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rich.markup import escape

from audit.cli.context import RunContext
from audit.dockerfile import dockerignore
from audit.dockerfile.dockerignore import Ignored
from audit.dockerfile.importer import ImportPlan, plan_import, unmapped_lines
from audit.errors import (
    EXIT_OK,
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

NAME_PART = re.compile(r"[^a-z0-9._-]+")
MAX_DOCKERFILE = 1 << 20  # 1 MiB: real Dockerfiles are a few KiB; parsing is not linear
PROJECT_FOLDERS = ("images", "build", "locks")  # never copied into a recipe by COPY .
CONTEXT_SKIPPED = (".git", ".nox")
LINK_HINT = "replace the link by the file it names, or leave it out of the COPY"


NEEDS_PROJECT = False
HELP = "turn a multi-stage Dockerfile into a recipe under images/"
DESCRIPTION = (
    "Read DOCKERFILE and write images/IMAGE/: image.toml (FROM of the first stage as the base, "
    "one recipe stage per Dockerfile stage), one requirements file per pip install, and the "
    "files its COPY lines bring in. Lines with no recipe equivalent are listed with their line "
    "numbers and kept as run layers."
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
        "--interpreter", help="the Python pip layers install with (default: /usr/bin/python3)"
    )


def handle(args: argparse.Namespace, run: RunContext) -> int:
    dockerfile: Path = args.dockerfile
    data = read_dockerfile(dockerfile)
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
    plan = plan_import(
        data,
        image,
        lambda relpath: _in_context(context, relpath, leaves_out),
        where=str(dockerfile),
        platform=args.platform,
        cuda=args.cuda,
        interpreter=args.interpreter,
    )
    skip = frozenset((root / name).resolve() for name in PROJECT_FOLDERS)
    seen = _Context(context, skip, leaves_out)
    copies = {relpath: list(_files(seen, source)) for relpath, source in plan.copies.items()}
    write_recipe(root, plan, copies, dockerfile)
    show(root, dockerfile, plan)
    return EXIT_OK


def read_dockerfile(dockerfile: Path) -> bytes:
    """The Dockerfile's bytes: a regular text file of at most ``MAX_DOCKERFILE`` bytes (the
    size is checked before anything is read)."""
    hint = "give the path of a Dockerfile to import"
    try:
        info = dockerfile.stat()
    except OSError as exc:
        raise UsageError(f"{dockerfile}: no such file ({exc.strerror})", hint) from exc
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{dockerfile}: not a regular file", hint)
    if info.st_size > MAX_DOCKERFILE:
        raise UsageError(
            f"{dockerfile}: {info.st_size} bytes, over the {MAX_DOCKERFILE} (1 MiB) import reads",
            "is it the Dockerfile? real ones are a few KiB; split generated parts out of it",
        )
    try:
        data = dockerfile.read_bytes()
        if b"\0" in data:
            raise UnicodeError("a NUL byte")
        data.decode("utf-8")
    except UnicodeError as exc:
        raise UsageError(f"{dockerfile}: not a UTF-8 text file ({exc})", hint) from exc
    except OSError as exc:
        raise UsageError(f"{dockerfile}: cannot read ({exc.strerror})", hint) from exc
    return data


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
    (folder / "requirements").mkdir(parents=True)
    atomic.write_text(folder / "image.toml", plan.recipe_toml())
    for relpath, data in [*plan.requirements.items(), *plan.files.items()]:
        (folder / relpath).parent.mkdir(parents=True, exist_ok=True)
        atomic.write_bytes(folder / relpath, redact(data.decode()).encode())
    for relpath, files in copies.items():
        (folder / relpath).mkdir(parents=True, exist_ok=True)  # an empty folder stays one
        for inner, real in files:
            target = folder / relpath / inner if inner else folder / relpath
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_dir():
                target.rmdir()
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


def show(root: Path, dockerfile: Path, plan: ImportPlan) -> None:
    """What was written, every unmapped line with its number, and what to do next."""
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
    )
    for note in plan.notes:
        where = f"line {note.line}: " if note.line else ""
        text = escape(redact(f"{where}{note.instruction}: {note.reason}"))
        console.stdout.print(f"  [dim]note: {text}[/]")
    if plan.unmapped:
        console.stdout.print(
            f"[yellow]{len(plan.unmapped)} line(s) not mapped[/] (kept as run layers marked "
            "UNMAPPED in image.toml):"
        )
        for line in unmapped_lines(plan):
            console.stdout.print(f"  [yellow]{escape(redact(line))}[/]")
    console.stdout.print(
        f"next: layer-audit render {plan.image}, review image.toml, "
        f"then layer-audit lock {plan.image}"
    )
