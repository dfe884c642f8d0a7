"""A recipe's steps: every layer in build order, numbered, stopping after a named stage."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from audit.policy.model import Policy
from audit.recipe.model import PipLayer, Recipe, RunLayer, Stage


def make_recipe() -> Recipe:
    stages = (
        Stage("v1", (PipLayer("requirements/v1.in"), RunLayer("true"))),
        Stage("v2", (RunLayer("echo two"),)),
        Stage("v3", (PipLayer("requirements/v3.in"), RunLayer("false"))),
    )
    return Recipe(
        "t", Path("images/t"), "b", None, "linux/amd64", "cpu", ("/usr/bin/python3",), "r",
        "{stage}", "latest", "https://pypi.org/simple", (), stages, Policy(),
    )  # fmt: skip


def test_steps_number_every_layer_in_build_order() -> None:
    recipe = make_recipe()
    found = [(s.stage.name, s.stage_number, s.position, s.slug) for s in recipe.steps()]
    assert found == [
        ("v1", 1, 1, "v1-01"),
        ("v1", 1, 2, "v1-02"),
        ("v2", 2, 1, "v2-01"),
        ("v3", 3, 1, "v3-01"),
        ("v3", 3, 2, "v3-02"),
    ]
    assert all(step.layer is recipe.stages[step.stage_number - 1].layers[step.position - 1]
               for step in recipe.steps())  # fmt: skip


def test_steps_stop_after_the_named_stage_and_an_unknown_name_stops_nowhere() -> None:
    recipe = make_recipe()
    assert [s.slug for s in recipe.steps("v1")] == ["v1-01", "v1-02"]
    assert [s.slug for s in recipe.steps("v2")] == ["v1-01", "v1-02", "v2-01"]
    assert list(recipe.steps("v3")) == list(recipe.steps()) == list(recipe.steps("v9"))


def test_steps_are_made_once_per_recipe_and_a_changed_recipe_has_its_own() -> None:
    recipe = make_recipe()
    first, again = list(recipe.steps()), list(recipe.steps())
    assert all(a is b for a, b in zip(first, again, strict=True))
    shorter = replace(recipe, stages=recipe.stages[:1])
    assert [s.slug for s in shorter.steps()] == ["v1-01", "v1-02"]
    assert recipe == make_recipe() and hash(recipe) == hash(make_recipe())
