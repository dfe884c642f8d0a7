"""The recipe's stage graph, checked once all stages are read.

Each stage was read on its own (its parent and the stages its layers name are earlier ones:
:mod:`audit.recipe.context`); what needs the whole recipe is decided here. Invariants once
:func:`check_graph` returns: some stage's chain starts from ``[image] base``; ``base_stage``
(when set) names a stage whose chain starts there; every pip layer is in an audited stage
(:meth:`~audit.recipe.model.Recipe.audited`), since a lock resolves against what the base record
holds and nothing records another image; the ``target`` names are unique.
"""

from __future__ import annotations

from audit.recipe.located_toml import Node
from audit.recipe.model import PipLayer, Recipe


def check_graph(root: Node, recipe: Recipe) -> Recipe:
    """``recipe`` when its graph holds the invariants above; a located error otherwise."""
    stages = root.tables("stage")
    if not any(recipe.root_ref(stage) == recipe.base_ref for stage in recipe.stages):
        raise root.table("image").error(
            "base",
            f"no stage starts from {recipe.base_ref}",
            "start a stage from it (leave out its base and from), or name the image you build "
            "on as [image] base",
        )
    if recipe.base_stage is not None:
        _check_base_stage(root, recipe)
    targets: dict[str, str] = {}
    for node, stage in zip(stages, recipe.stages, strict=True):
        if stage.target is not None and stage.target in targets:
            raise node.error("target", f"{stage.target!r} already names {targets[stage.target]}")
        targets[stage.target or stage.name] = stage.name
        _check_pip_layers(node, recipe, stage.name)
    return recipe


def _check_base_stage(root: Node, recipe: Recipe) -> None:
    head = root.table("image")
    name = recipe.base_stage or ""
    try:
        stage = recipe.stage(name)
    except KeyError:
        names = ", ".join(s.name for s in recipe.stages)
        raise head.error("base_stage", f"no stage {name!r}", f"stages: {names}") from None
    if recipe.root_ref(stage) != recipe.base_ref:
        raise head.error(
            "base_stage",
            f"{name} does not build on {recipe.base_ref}",
            "name the stage whose layers give [image] base its Python",
        )


def _check_pip_layers(node: Node, recipe: Recipe, name: str) -> None:
    stage = recipe.stage(name)
    if recipe.audited(stage):
        return
    for position, layer in enumerate(stage.layers, start=1):
        if isinstance(layer, PipLayer):
            why = (
                f"it is part of the prelude up to base_stage {recipe.base_stage}, before any "
                "Python is recorded"
                if recipe.root_ref(stage) == recipe.base_ref
                else f"its stage builds on {recipe.root_ref(stage)}, not on the recorded base "
                f"{recipe.base_ref}"
            )
            raise node.error(
                f"layer[{position}].pip",
                f"a pip layer here cannot be locked: {why}",
                "make it a run layer (the layer walk audits it), or build the stage on the "
                "recorded base",
            )
