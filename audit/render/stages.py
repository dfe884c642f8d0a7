"""What the rendered Dockerfile says around a stage's layers: the build arguments before the
first FROM, the USER/SHELL reset a stage needs, its configuration, and why a stage is built
without the guard.

Invariants: every layer of a rendered stage runs as root with ``/bin/sh`` (the guard needs
both), so a stage that inherits another USER or SHELL from the stage it builds on switches
back first and restores them after its layers, leaving the image's configuration what Docker
would have left; a ``--build-arg`` value is written literally (its ``$`` escaped), a default
may name the arguments above it.
"""

from __future__ import annotations

import dataclasses

from audit.errors import UsageError
from audit.recipe.build_args import arg_name_problem
from audit.recipe.model import PLATFORM_ARGS, ImageConfig, Recipe, Stage
from audit.suggest import did_you_mean

BuildArgs = tuple[tuple[str, str], ...]  # --build-arg NAME=VALUE, in order
ROOT_USERS = ("root", "0", "root:root", "0:0")
DEFAULT_SHELL = ("/bin/sh", "-c")


def _quote(value: str, expand: bool) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped if expand else escaped.replace("$", chr(92) + "$")}"'


def check_build_args(recipe: Recipe, build_args: BuildArgs) -> None:
    """Exit 2 for a ``--build-arg`` the recipe does not declare (or may not take)."""
    declared = [name for name, _ in recipe.args]
    declared += [n for stage in recipe.stages for n in recipe.args_of(stage)]
    for name, _ in build_args:
        problem = arg_name_problem(name)
        if name in PLATFORM_ARGS:
            problem = f"{name} is BuildKit's: it follows --platform"
        elif not problem and name not in declared:
            problem = f"{recipe.source.as_posix()} declares no build argument {name!r}"
            problem += did_you_mean(name, declared)
        if problem:
            known = ", ".join(sorted(set(declared) - set(PLATFORM_ARGS))) or "none"
            raise UsageError(f"--build-arg {name}: {problem}", f"the recipe's arguments: {known}")


def arg_lines(recipe: Recipe, build_args: BuildArgs) -> list[str]:
    """``NAME="value"`` for each ``ARG`` before the first FROM: ``[args]`` with their defaults
    (or the ``--build-arg`` value), then arguments given a value only on the command line."""
    check_build_args(recipe, build_args)
    given = dict(build_args)
    lines = [
        f"{name}={_quote(given[name], False) if name in given else _quote(default, True)}"
        for name, default in recipe.args
    ]
    defaults = {name for name, _ in recipe.args}
    lines += [
        f"{name}={_quote(value, False)}" for name, value in given.items() if name not in defaults
    ]
    return lines


def _inherited(recipe: Recipe, stage: Stage) -> tuple[str | None, tuple[str, ...]]:
    """The USER and SHELL the stage starts with, from the stages it builds on."""
    user: str | None = None
    shell: tuple[str, ...] = ()
    for ancestor in recipe.lineage(stage)[:-1]:
        user = ancestor.config.user or user
        shell = ancestor.config.shell or shell
    return user, shell


def stage_reset(recipe: Recipe, stage: Stage) -> list[str]:
    """``USER root`` / ``SHELL ["/bin/sh", "-c"]`` right after FROM, when the stage inherits
    another user or shell: its layers (and the guard) run as root with /bin/sh."""
    user, shell = _inherited(recipe, stage)
    lines = ["USER root"] if user and user not in ROOT_USERS else []
    lines += ['SHELL ["/bin/sh", "-c"]'] if shell and shell != DEFAULT_SHELL else []
    return lines


def stage_config(recipe: Recipe, stage: Stage) -> tuple[ImageConfig | None, str]:
    """The configuration rendered after the stage's layers (its own; ``[config]`` for the
    last stage), with the inherited USER and SHELL the reset set aside put back; and the
    key it comes from."""
    last = stage is recipe.stages[-1]
    config = recipe.config if last and not recipe.config.empty else stage.config
    origin = (
        "[config]"
        if last and not recipe.config.empty
        else f"stage[{_number(recipe, stage)}].config"
    )
    user, shell = _inherited(recipe, stage)
    if user and user not in ROOT_USERS and not config.user:
        config = dataclasses.replace(config, user=user)
    if shell and shell != DEFAULT_SHELL and not config.shell:
        config = dataclasses.replace(config, shell=shell)
    return (None if config.empty else config), origin


def _number(recipe: Recipe, stage: Stage) -> int:
    return recipe.stages.index(stage) + 1


def unguarded_reason(recipe: Recipe, stage: Stage) -> str:
    """Why the guard does not run in ``stage`` ('' when it does)."""
    if recipe.audited(stage):
        return ""
    root = recipe.root_ref(stage)
    if root == recipe.base_ref:
        return f"the prelude: {recipe.base} has no Python before {recipe.base_stage}"
    return f"it builds on {root}, which no base record describes"


def parse_build_arg(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` of ``--build-arg`` (the value may be empty); exit 2 otherwise."""
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise UsageError(
            f"--build-arg {text.partition('=')[0]!r}: expected NAME=VALUE",
            "e.g. --build-arg CUDA_VERSION=13.0.2 (the recipe's [args] and arg layers name them)",
        )
    return name, value
