"""A policy for an image with no recipe: a ``[policy]`` table in a file of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from audit.errors import RecipeError
from audit.project.sources import DirectorySource
from audit.recipe.policy_parse import read_policy_file

POLICY = """\
[policy]
preset = "cuda-ml"
[[policy.waiver]]
package = "nvidia-nccl-cu13"
from = "2.30.7"
to = "2.29.7"
reason = "the nightly needs it until 0.6.19"
stage = "runtime"
layer = 3
"""


def test_waivers_name_the_dockerfiles_stages(tmp_path: Path) -> None:
    (tmp_path / "policy.toml").write_text(POLICY)
    policy = read_policy_file(DirectorySource(tmp_path), "policy.toml", "cu130", {"runtime": 5})
    (waiver,) = policy.waivers
    assert (waiver.stage, waiver.layer, policy.cuda, policy.preset) == (
        "runtime", 3, "cu130", "cuda-ml",
    )  # fmt: skip


def test_a_stage_the_dockerfile_lacks_is_refused_with_the_close_match(tmp_path: Path) -> None:
    (tmp_path / "policy.toml").write_text(POLICY.replace('"runtime"', '"runtme"'))
    with pytest.raises(RecipeError, match="runtime"):
        read_policy_file(DirectorySource(tmp_path), "policy.toml", "cu130", {"runtime": 5})


def test_unknown_top_level_keys_are_refused(tmp_path: Path) -> None:
    (tmp_path / "policy.toml").write_text("[polcy]\n")
    with pytest.raises(RecipeError, match="unknown key"):
        read_policy_file(DirectorySource(tmp_path), "policy.toml", "cpu", {})
