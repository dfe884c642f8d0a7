"""Predicted environments: base winners with each earlier lock's pins applied in build order."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

import pytest

from audit.errors import LockError
from audit.history.predict import apply_lock, base_environment, predict, predict_from
from audit.history.snapshot import Distribution, Environment
from audit.lock.files import BaseRecord, Lock
from audit.lock.format import Pin
from audit.lock.plan import survey_locks
from audit.project.frontdoor import CONSOLE_SCRIPT
from audit.project.memo import Memo
from audit.project.sources import DirectorySource
from audit.recipe.model import Recipe
from audit.recipe.parse import load_recipe
from tests.support.vllm_project import BASE, Project, write_project


def lock_of(**pins: str) -> Lock:
    table = {name: Pin(name, version, ("sha256:" + "0" * 64,)) for name, version in pins.items()}
    return Lock("v1-01", "sha256:x", MappingProxyType(table))


def test_apply_lock_replaces_and_adds_never_removes() -> None:
    before = {"a": Distribution("a", "1.0"), "b": Distribution("b", "2.0")}
    after = apply_lock(before, lock_of(a="0.9", c="3.0"))
    assert {name: d.version for name, d in after.items()} == {"a": "0.9", "b": "2.0", "c": "3.0"}
    assert before["a"].version == "1.0"  # the input is left alone


def test_apply_lock_keeps_the_same_object_for_unchanged_pins() -> None:
    kept = Distribution("a", "1.0")
    assert apply_lock({"a": kept}, lock_of(a="1.0"))["a"] is kept


@pytest.fixture
def recipe(tmp_path: Path) -> Recipe:
    write_project(tmp_path, Project())
    return load_recipe(DirectorySource(tmp_path), "vllm")


def test_base_environment_strips_location_and_digest_and_keeps_winners(recipe: Recipe) -> None:
    first = Distribution("a", "2.0", "/venv/site", "pip", "sha256:1", "A")
    hidden = Distribution("a", "1.0", "/usr/lib/site", "pip", "sha256:2", "a")
    env = Environment(
        "/venv/bin/python", "3.11", {}, ("/venv/site", "/usr/lib/site"), (first, hidden)
    )
    record = BaseRecord("img", "sha256:1", None, (env,))
    venv_recipe = replace(recipe, interpreters=("/venv/bin/python",))
    [(name, dist)] = base_environment(record, venv_recipe, _NoSource()).items()
    assert (name, dist.version, dist.location, dist.digest) == ("a", "2.0", "", "")


def test_base_environment_needs_the_first_interpreter_when_several(recipe: Recipe) -> None:
    envs = tuple(Environment(p, "3.11", {}, (), ()) for p in ("/usr/bin/python3", "/opt/x/python"))
    record = BaseRecord("img", "sha256:1", None, envs)
    with pytest.raises(LockError, match="no snapshot of /venv/bin/python"):
        base_environment(record, replace(recipe, interpreters=("/venv/bin/python",)), _NoSource())


def test_predict_applies_locks_in_order(tmp_path: Path) -> None:
    write_project(tmp_path, Project(pins={"v2": {"torch": "2.9.1+cu130"}, "v3": {"x": "1"}}))
    source = DirectorySource(tmp_path)
    steps = predict(source, load_recipe(source, "vllm"))
    assert [(p.step.slug, p.lock) for p in steps] == [
        ("v1-01", None),
        ("v2-01", "locks/vllm/v2-01.txt"),
        ("v3-01", None),
        ("v3-02", "locks/vllm/v3-02.txt"),
    ]
    assert steps[0].before is steps[0].after  # a run layer changes nothing predictable
    assert steps[1].before["torch"].version == BASE["torch"]
    assert steps[1].after["torch"].version == "2.9.1+cu130"
    assert steps[3].before["torch"].version == "2.9.1+cu130"
    assert set(steps[3].after) == {*BASE, "x"}


def test_predict_from_surveyed_locks_reads_no_lock_again(tmp_path: Path) -> None:
    write_project(tmp_path, Project(pins={"v2": {"torch": "2.9.1+cu130"}, "v3": {"x": "1"}}))
    source = DirectorySource(tmp_path)
    recipe = load_recipe(source, "vllm")
    survey = survey_locks(source, recipe)
    assert survey.base is not None
    base = base_environment(survey.base[0], recipe, source)
    for lock in tmp_path.glob("locks/vllm/v*.txt"):
        lock.unlink()  # whatever is predicted now came from the survey
    steps = predict_from(base, source, recipe, survey.locks)
    assert [(p.step.slug, p.lock) for p in steps] == [
        ("v1-01", None),
        ("v2-01", "locks/vllm/v2-01.txt"),
        ("v3-01", None),
        ("v3-02", "locks/vllm/v3-02.txt"),
    ]
    assert steps[1].after["torch"].version == "2.9.1+cu130"
    assert set(steps[3].after) == {*BASE, "x"}


def test_predict_without_a_base_snapshot_is_bad_input(tmp_path: Path) -> None:
    write_project(tmp_path, Project())
    (tmp_path / "locks/vllm/base.json").unlink()
    source = DirectorySource(tmp_path)
    with pytest.raises(LockError, match=r"base\.json: missing"):
        predict(source, load_recipe(source, "vllm"))


class _NoSource:
    """A Source with no files, for functions that only name paths in messages."""

    memo = Memo()
    front = CONSOLE_SCRIPT

    def read_bytes(self, relpath: str) -> bytes:
        raise FileNotFoundError(relpath)

    def exists(self, relpath: str) -> bool:
        return False

    def listdir(self, relpath: str) -> list[str]:
        return []

    def describe(self, relpath: str) -> str:
        return relpath
