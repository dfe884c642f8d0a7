"""``layer-audit import DOCKERFILE``: write a recipe folder from a multi-stage Dockerfile.

The mapping is :func:`audit.plan.dockerfile_import.plan_import`. This module reads the
Dockerfile, copies the files its ``COPY`` layers name from the build context, and writes the
recipe into a temporary project first: it is loaded with the recipe parser (so what lands in
``images/`` is a recipe that validates) and only then renamed into ``images/<image>/``. An
existing recipe folder is never touched.
"""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from rich.markup import escape

from audit.core.errors import EXIT_OK, AuditError, RecipeError, UsageError
from audit.engines import atomic, console
from audit.plan import paths
from audit.plan.dockerfile_import import ImportPlan, plan_import, unmapped_lines
from audit.plan.recipe_parse import load_recipe
from audit.plan.sources import DirectorySource

NAME_PART = re.compile(r"[^a-z0-9._-]+")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "import",
        help="turn a multi-stage Dockerfile into a recipe under images/",
        description="Read DOCKERFILE and write images/IMAGE/: image.toml (FROM of the first "
        "stage as the base, one recipe stage per Dockerfile stage), one requirements file per "
        "pip install, and the files its COPY lines bring in. Lines with no recipe equivalent "
        "are listed with their line numbers and kept as run layers.",
    )
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
    parser.set_defaults(handler=handle, needs_project=False)


def handle(args: argparse.Namespace) -> int:
    dockerfile: Path = args.dockerfile
    if not dockerfile.is_file():
        raise UsageError(f"{dockerfile}: no such file", "give the path of a Dockerfile to import")
    context = (args.context or dockerfile.parent).resolve()
    if not context.is_dir():
        raise UsageError(f"--context {args.context}: not a folder", "give the build context")
    image = args.image or default_image_name(dockerfile)
    check_image_name(image)
    root = project_root(args)
    target = paths.image_dir(root, image)
    if target.exists():
        raise UsageError(
            f"{target}: a recipe folder already exists",
            "choose another name with --image, or move that folder away first",
        )
    plan = plan_import(
        dockerfile.read_bytes(),
        image,
        lambda relpath: _in_context(context, relpath),
        where=str(dockerfile),
        platform=args.platform,
        cuda=args.cuda,
        interpreter=args.interpreter,
    )
    write_recipe(root, plan, context)
    show(root, dockerfile, plan)
    return EXIT_OK


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


def project_root(args: argparse.Namespace) -> Path:
    """--project, else the project around the working folder, else the working folder."""
    if getattr(args, "project", None):
        return Path(args.project).resolve()
    try:
        return paths.find_root()
    except AuditError:
        return Path.cwd().resolve()


def _in_context(context: Path, relpath: str) -> bool:
    """Whether ``relpath`` is a file or folder inside the context (links may not leave it)."""
    path = (context / relpath).resolve()
    return path.is_relative_to(context) and path.exists()


def write_recipe(root: Path, plan: ImportPlan, context: Path) -> None:
    """Write the recipe into a scratch project, validate it, then rename it into images/."""
    images = root / "images"
    images.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".import-{plan.image}-", dir=images))
    try:
        folder = scratch / "images" / plan.image
        (folder / "requirements").mkdir(parents=True)
        atomic.write_text(folder / "image.toml", plan.recipe_toml())
        for relpath, data in plan.requirements.items():
            atomic.write_bytes(folder / relpath, data)
        for relpath, source in plan.copies.items():
            _copy(context / source, folder / relpath)
        try:
            load_recipe(DirectorySource(scratch), plan.image)
        except RecipeError as error:
            raise RecipeError(
                "import", f"the imported recipe does not validate: {error.message}",
                "report this Dockerfile to layer-audit; meanwhile edit the input line it names",
            ) from error  # fmt: skip
        folder.rename(paths.image_dir(root, plan.image))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, target, symlinks=False)
    else:
        shutil.copy2(source, target)


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
        console.stdout.print(f"  [dim]note: {where}{escape(note.instruction)}: {note.reason}[/]")
    if plan.unmapped:
        console.stdout.print(
            f"[yellow]{len(plan.unmapped)} line(s) not mapped[/] (kept as run layers marked "
            "UNMAPPED in image.toml):"
        )
        for line in unmapped_lines(plan):
            console.stdout.print(f"  [yellow]{escape(line)}[/]")
    console.stdout.print(
        f"next: layer-audit render {plan.image}, review image.toml, "
        f"then layer-audit lock {plan.image}"
    )
