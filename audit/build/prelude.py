"""The prelude of a base without Python, built for ``lock``: ``base_stage`` of the recipe, with
no guard (nothing to audit yet), tagged as :attr:`~audit.recipe.model.Recipe.recorded_ref`,
the image the base record describes and the pip-tools compile runs in.

``build`` builds the same stage as the first build of its plan (:mod:`audit.build.plan`), with
the same Dockerfile, so BuildKit answers one from the other's cache; ``build`` then checks the
result against the record before any guarded layer.

Invariant: the image is tagged only when its build passed; a failed build raises
:class:`~audit.errors.BuildFailed` (exit 3, the log tail in its hint) and moves no tag.
"""

from __future__ import annotations

import os
from pathlib import Path

from audit.build.plan import (
    BuildOptions,
    DockerClient,
    build_command,
    choose_network,
    secret_sources,
)
from audit.build.run import secret_files
from audit.docker import host as docker_host
from audit.docker.registry import ensure_image
from audit.errors import EXIT_ENVIRONMENT, BuildFailed
from audit.host import console, process
from audit.project.paths import build_dir
from audit.recipe.model import Recipe
from audit.render.write import render

TAIL = 25


def prelude_argv(
    root: Path, recipe: Recipe, client: DockerClient, secrets: dict[str, Path]
) -> list[str]:
    """``docker build --target <base_stage> -t <recorded_ref>`` of the rendered context."""
    assert recipe.base_stage is not None
    context = build_dir(root, recipe.name)
    argv = [*build_command(client), "--progress=plain", "--platform", recipe.platform]
    argv += ["--target", recipe.base_stage, "-t", recipe.recorded_ref]
    for key in sorted(secrets):
        argv += ["--secret", f"id={key},src={secrets[key]}"]
    network = choose_network(recipe, "auto")
    argv += ["--network", network] if network else []
    return [*argv, "-f", str(context / "Dockerfile"), str(context)]


def build_prelude(root: Path, recipe: Recipe, why: str) -> str:
    """Render the recipe and build its prelude; the tag it moved (``recorded_ref``)."""
    assert recipe.base_stage is not None
    ensure_image(recipe.base_ref, why)
    render(root, recipe)  # the whole recipe, as build renders it: one Dockerfile, one cache
    client = docker_host.detect_client(None)
    console.stderr.print(
        f"building the prelude of {recipe.name} ({recipe.base} has no Python; "
        f"{recipe.base_stage} gives it one) as {recipe.recorded_ref}",
        markup=False,
    )
    sources = secret_sources(BuildOptions(image=recipe.name), os.environ, Path.home())
    with secret_files(recipe, sources) as secrets:
        argv = prelude_argv(root, recipe, client, secrets)
        done = process.run(argv, env=docker_host.client_env(client), check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-TAIL:])
        raise BuildFailed(
            f"{recipe.name}: the prelude up to {recipe.base_stage} did not build",
            f"fix the stage the log names; no tag was moved\n{tail}",
            exit_code=EXIT_ENVIRONMENT,
        )
    return recipe.recorded_ref


def ensure_prelude(root: Path, recipe: Recipe, why: str) -> None:
    """The prelude image, built when the engine lacks it (a fresh machine, a pruned engine)."""
    if recipe.base_stage is not None and not docker_host.image_exists(recipe.recorded_ref):
        build_prelude(root, recipe, why)
