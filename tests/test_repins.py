"""No-deps re-pins fold into the resolving pip layer before them, as overrides."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from audit.errors import RecipeError
from audit.project.sources import DirectorySource
from audit.recipe.located_toml import Node
from audit.recipe.model import Layer, PipLayer, RunLayer
from audit.recipe.parse import load_recipe
from audit.recipe.repins import fold_repins

MINI = Path(__file__).resolve().parent / "data" / "recipes" / "mini"
STAGE = Node("images/x/image.toml", "stage[2]", {})
NIGHTLY = PipLayer("requirements/v2.in", "nightly", True)
REPIN = PipLayer("requirements/repin.in", None, False, True, ("nccl==2.30.7",))


def test_a_re_pin_overrides_the_nearest_resolving_layer_before_it() -> None:
    first = PipLayer("requirements/v1.in")
    layers: tuple[Layer, ...] = (first, NIGHTLY, RunLayer("echo"), REPIN)
    folded = fold_repins(STAGE, layers)
    assert folded == (
        first,
        PipLayer(NIGHTLY.requirements, "nightly", True, override=("nccl==2.30.7",)),
        RunLayer("echo"),
        REPIN,
    )


def test_re_pins_in_a_row_all_reach_the_same_layer() -> None:
    second = PipLayer("requirements/more.in", None, False, True, ("dsl==4.3.1",))
    folded = fold_repins(STAGE, (NIGHTLY, REPIN, second))
    assert folded[0] == PipLayer(
        NIGHTLY.requirements, "nightly", True, override=("nccl==2.30.7", "dsl==4.3.1")
    )
    assert folded[1:] == (REPIN, second)


def test_a_re_pin_with_nothing_to_correct_stays_as_it_is() -> None:
    layers: tuple[Layer, ...] = (RunLayer("echo"), REPIN)
    assert fold_repins(STAGE, layers) == layers


def test_the_same_pin_in_override_and_re_pin_is_one_pin() -> None:
    pinned = PipLayer(NIGHTLY.requirements, override=("nccl==2.30.7",))
    assert fold_repins(STAGE, (pinned, REPIN))[0] == pinned


def test_two_versions_of_one_package_are_an_error_at_the_override() -> None:
    pinned = PipLayer(NIGHTLY.requirements, override=("nccl==2.29.7",))
    with pytest.raises(RecipeError) as caught:
        fold_repins(STAGE, (RunLayer("echo"), pinned, REPIN))
    message = str(caught.value)
    assert "images/x/image.toml: stage[2].layer[2].override" in message
    assert "nccl==2.29.7" in message and "nccl==2.30.7" in message
    assert "requirements/repin.in" in message


def test_a_recipe_with_a_re_pin_layer_loads_folded(tmp_path: Path) -> None:
    shutil.copytree(MINI, tmp_path / "images" / "mini")
    folder = tmp_path / "images" / "mini"
    (folder / "requirements" / "repin.in").write_text("NCCL_Lib==2.30.7\n")
    toml = folder / "image.toml"
    repin = '  [[stage.layer]]\n  pip = "requirements/repin.in"\n  no_deps = true\n\n'
    toml.write_text(toml.read_text().replace("[policy]", repin + "[policy]"))
    stage = load_recipe(DirectorySource(tmp_path), "mini").stages[1]
    assert stage.layers[0] == PipLayer(
        "requirements/v2.in", "nightly", True, override=("nccl-lib==2.30.7",)
    )
    assert stage.layers[2] == PipLayer(
        "requirements/repin.in", None, False, True, ("nccl-lib==2.30.7",)
    )
