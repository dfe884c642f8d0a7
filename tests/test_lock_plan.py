"""The pure lock plan: staleness from input digests, and constraints from what came before."""

from __future__ import annotations

from pathlib import Path

import pytest

from audit.errors import LockError
from audit.history.snapshot import Distribution, Environment
from audit.lock.files import (
    BaseRecord,
    Lock,
    PinMetadata,
    lock_relpath,
    parse_lock,
    render_lock,
)
from audit.lock.format import Pin
from audit.lock.plan import (
    BASE_ORIGIN,
    RESOLVER,
    Constraint,
    Survey,
    Upgrade,
    after_inputs,
    check_locks,
    existing_pins,
    installed_before,
    layer_inputs,
    moved_pins,
    pin_blocks,
    pip_steps,
    preferred_pins,
    read_base_digest,
    read_locks,
    survey_locks,
    via_parents,
    who_asks,
)
from audit.lock.resolvers.job import ambient_ca_bundle
from audit.lock.run import known_metadata
from audit.policy.model import Policy, Waiver
from audit.project.sources import DirectorySource
from audit.recipe.model import PipLayer, Recipe, RunLayer, Stage
from tests.support.project import write_base, write_fresh_locks, write_text

BODY = "alpha==1.0 \\\n    --hash=sha256:aa\n"


def make_recipe(waivers: tuple[Waiver, ...] = ()) -> Recipe:
    stages = (
        Stage("v1", (PipLayer("requirements/v1.in"), RunLayer("true"))),
        Stage("v2", (PipLayer("requirements/v2.in", pre=True),)),
        Stage("v3", (PipLayer("requirements/v3.in"),)),
    )
    return Recipe(
        "t", Path("images/t"), "b", None, "linux/amd64", "cpu", ("/usr/bin/python3",), "r",
        "{stage}", "latest", "https://pypi.org/simple", (), stages, Policy(waivers=waivers),
    )  # fmt: skip


@pytest.fixture
def project(tmp_path: Path) -> Path:
    requirements = {
        "v1.in": "alpha\n-c common.txt\n",
        "common.txt": "alpha<3\n",
        "v2.in": "beta\n",
        "v3.in": "gamma\n",
    }
    env = Environment("/usr/bin/python3", "3.11.2", {}, ("/x",), (Distribution("pip", "23.0"),))
    for name, text in requirements.items():
        write_text(tmp_path / "images/t/requirements" / name, text)
    write_base(tmp_path, "t", BaseRecord("b", "sha256:1", None, (env,)))
    return tmp_path


def write_all_locks(root: Path, recipe: Recipe) -> None:
    """Locks whose recorded inputs match the current files, as a real run would leave them."""
    write_fresh_locks(root, recipe, dict.fromkeys(["v1", "v2", "v3"], BODY))


def statuses(root: Path, recipe: Recipe) -> list[str]:
    return [state.status for state in check_locks(DirectorySource(root), recipe)]


def test_no_locks_are_missing_and_fresh_locks_are_fresh(project: Path) -> None:
    recipe = make_recipe()
    assert statuses(project, recipe) == ["missing", "missing", "missing"]
    write_all_locks(project, recipe)
    assert statuses(project, recipe) == ["fresh", "fresh", "fresh"]


def test_an_edited_include_stales_its_layer_and_every_later_one(project: Path) -> None:
    recipe = make_recipe()
    write_all_locks(project, recipe)
    (project / "images/t/requirements/common.txt").write_text("alpha<2\n")
    states = check_locks(DirectorySource(project), recipe)
    assert [s.status for s in states] == ["stale", "stale", "stale"]
    assert states[0].reason == "inputs changed: requirements/common.txt"
    assert "an earlier layer changed: v1 layer 1" in states[2].reason


def test_a_later_edit_leaves_earlier_layers_fresh(project: Path) -> None:
    recipe = make_recipe()
    write_all_locks(project, recipe)
    (project / "images/t/requirements/v2.in").write_text("beta>=2\n")
    assert statuses(project, recipe) == ["fresh", "stale", "stale"]


def test_the_base_is_an_input_and_waivers_are_not(project: Path) -> None:
    recipe = make_recipe()
    write_all_locks(project, recipe)
    waived = make_recipe((Waiver("alpha", "1.0", "0.9", "because"),))
    # a waiver changes the verdict on what pip resolves, never the resolution: nothing to re-lock
    assert [s.status for s in check_locks(DirectorySource(project), waived)] == ["fresh"] * 3
    base = project / "locks/t/base.json"
    base.write_text(base.read_text().replace("sha256:1", "sha256:2"))
    assert check_locks(DirectorySource(project), recipe)[0].reason == "inputs changed: base"


def test_a_missing_base_makes_every_lock_missing_or_stale(project: Path) -> None:
    recipe = make_recipe()
    write_all_locks(project, recipe)
    (project / "locks/t/base.json").unlink()
    (project / lock_relpath(recipe, pip_steps(recipe)[2])).unlink()
    states = check_locks(DirectorySource(project), recipe)
    assert [s.status for s in states] == ["stale", "stale", "missing"]
    assert "no base snapshot" in states[0].reason


def test_a_hand_edited_lock_is_bad_input_not_stale(project: Path) -> None:
    recipe = make_recipe()
    write_all_locks(project, recipe)
    path = project / "locks/t/v2-01.txt"
    path.write_text(path.read_text().replace("alpha==1.0", "alpha==1.1"))
    with pytest.raises(LockError, match="edited by hand"):
        check_locks(DirectorySource(project), recipe)


def test_reading_the_locks_unjudged_finds_what_the_survey_finds_and_reads_no_input(
    project: Path,
) -> None:
    recipe = make_recipe()
    write_all_locks(project, recipe)
    (project / lock_relpath(recipe, pip_steps(recipe)[2])).unlink()
    (project / "images/t/requirements/common.txt").unlink()  # judging freshness reads it
    read = read_locks(DirectorySource(project), recipe)
    assert read.states == () and sorted(read.locks) == ["v1-01", "v2-01"]
    (project / "images/t/requirements/common.txt").write_text("alpha<3\n")
    survey = survey_locks(DirectorySource(project), recipe)
    assert (read.base, dict(read.locks)) == (survey.base, dict(survey.locks))
    path = project / "locks/t/v2-01.txt"
    path.write_text(path.read_text().replace("alpha==1.0", "alpha==1.1"))
    with pytest.raises(LockError, match=r"v2-01\.txt: edited by hand"):
        read_locks(DirectorySource(project), recipe)
    (project / "locks/t/base.json").unlink()
    assert read_locks(DirectorySource(project), recipe) == Survey((), None, {})


def lock_of(*pins: tuple[str, str]) -> Lock:
    return Lock("x", "d", {n: Pin(n, v, ("sha256:aa",)) for n, v in pins})


def test_installed_before_holds_the_base_then_each_earlier_lock_in_order() -> None:
    steps = pip_steps(make_recipe())
    base = [Constraint("alpha", "1.0", BASE_ORIGIN), Constraint("pip", "23.0", BASE_ORIGIN)]
    first = lock_of(("alpha", "2.0"), ("beta", "1.0"))
    earlier = [(steps[0], first), (steps[1], lock_of(("beta", "1.1")))]
    installed = installed_before(base, earlier)
    assert installed["alpha"] == Constraint("alpha", "2.0", steps[0].label)
    assert installed["beta"].origin == steps[1].label
    assert existing_pins(installed) == "alpha==2.0\nbeta==1.1\npip==23.0\n"


def test_preferred_pins_carry_the_previous_locks_hashes_so_unmoved_pins_are_not_rehashed() -> None:
    installed = {"pip": Constraint("pip", "23.0", BASE_ORIGIN)}
    previous = Lock("x", "d", {
        "alpha": Pin("alpha", "2.0", ("sha256:aa", "sha256:bb")),
        "beta": Pin("beta", "1.0", ("sha256:cc",), 'sys_platform == "linux"'),
    })  # fmt: skip
    text = preferred_pins(installed, previous, Upgrade())
    assert text == (
        "alpha==2.0 \\\n    --hash=sha256:aa \\\n    --hash=sha256:bb\n"
        'beta==1.0 ; sys_platform == "linux" \\\n    --hash=sha256:cc\n'
        "pip==23.0\n"
    )
    moving = preferred_pins(installed, previous, Upgrade(packages={"alpha": None}))
    assert "alpha" not in moving and "sha256:cc" in moving
    assert preferred_pins(installed, previous, Upgrade(everything=True)) == "pip==23.0\n"


def test_installed_pins_carry_their_stand_in_hash_unless_the_previous_lock_pins_them() -> None:
    installed = {
        "pip": Constraint("pip", "23.0", BASE_ORIGIN),
        "alpha": Constraint("alpha", "1.0", "v1 layer 1"),
    }
    previous = Lock("x", "d", {"alpha": Pin("alpha", "2.0", ("sha256:aa",))})
    given = {"pip": "sha256:p1", "alpha": "sha256:a1"}
    text = preferred_pins(installed, previous, Upgrade(), given)
    assert text == "alpha==2.0 \\\n    --hash=sha256:aa\npip==23.0 \\\n    --hash=sha256:p1\n"
    assert preferred_pins(installed, None, Upgrade(), {}) == "alpha==1.0\npip==23.0\n"


def test_only_what_a_layer_installs_or_moves_is_pinned() -> None:
    installed = {
        "torch": Constraint("torch", "2.9.0+cu130", BASE_ORIGIN),
        "nccl": Constraint("nccl", "2.30.7", BASE_ORIGIN),
    }
    pins = {
        "torch": Pin("torch", "2.9.0+CU130", ("sha256:aa",)),  # the same version, spelt otherwise
        "nccl": Pin("nccl", "2.29.7", ("sha256:bb",)),
        "new": Pin("new", "1.0", ("sha256:cc",)),
    }
    assert sorted(moved_pins(installed, pins)) == ["nccl", "new"]


COMPILED = """\
flashinfer-python==0.6.18 \\
    --hash=sha256:aa
    # via -r requirements/v2.in
nvidia-nccl-cu13==2.29.7 \\
    --hash=sha256:bb
    # via
    #   flashinfer-python
    #   torch
# a top-level comment belongs to no pin
"""


def test_pip_compile_output_splits_into_pin_blocks_with_their_parents() -> None:
    blocks = pin_blocks(COMPILED)
    assert sorted(blocks) == ["flashinfer-python", "nvidia-nccl-cu13"]
    assert "top-level" not in blocks["nvidia-nccl-cu13"]
    assert via_parents(blocks["flashinfer-python"]) == ["-r requirements/v2.in"]
    assert via_parents(blocks["nvidia-nccl-cu13"]) == ["flashinfer-python", "torch"]


def test_who_asks_names_the_requirement_of_each_parent() -> None:
    after = {
        "flashinfer-python": Constraint(
            "flashinfer-python", "0.6.18", "v2", ("nvidia-nccl-cu13==2.29.7", "numpy")
        ),
        "torch": Constraint("torch", "2.9.0", BASE_ORIGIN, ("nvidia-nccl-cu13; extra == 'x'",)),
    }
    asks = who_asks("nvidia-nccl-cu13", ["flashinfer-python", "-r requirements/v2.in"], after)
    assert asks == [
        "flashinfer-python 0.6.18 requires nvidia-nccl-cu13==2.29.7",
        "requirements/v2.in asks for it directly",
    ]


def test_the_ambient_ca_bundle_is_the_first_named_file_that_exists(tmp_path: Path) -> None:
    first, second = tmp_path / "first.pem", tmp_path / "second.pem"
    first.write_text("pem")
    second.write_text("pem")
    gone = str(tmp_path / "gone.pem")
    assert ambient_ca_bundle({"PIP_CERT": str(second), "SSL_CERT_FILE": str(first)}) == first
    assert ambient_ca_bundle({"SSL_CERT_FILE": gone, "REQUESTS_CA_BUNDLE": str(second)}) == second
    assert ambient_ca_bundle({"SSL_CERT_FILE": gone}) is None


def test_a_previous_locks_metadata_is_known_by_name_and_version() -> None:
    previous = Lock(
        "x", "d", {"alpha": Pin("alpha", "2.0", ("sha256:aa",))},
        metadata={"alpha": PinMetadata(("beta>=1",), ">=3.9")},
    )  # fmt: skip
    assert known_metadata(previous) == {("alpha", "2.0"): (("beta>=1",), ">=3.9")}
    assert known_metadata(None) == {}


VIA_BODY = "alpha==1.0 \\\n    --hash=sha256:aa\n    # via -r requirements/v1.in\n"


def _rewrite_lock(root: Path, recipe: Recipe, slug: str, body: str) -> None:
    """``slug``'s lock compiled again as ``lock`` writes it: current inputs, ``body``."""
    source = DirectorySource(root)
    found = read_base_digest(source, recipe)
    assert found is not None
    steps = pip_steps(recipe)
    index = [s.slug for s in steps].index(slug)
    earlier = {s.slug: parse_lock(source.read_bytes(lock_relpath(recipe, s)), s.slug)
               for s in steps[:index]}  # fmt: skip
    inputs = layer_inputs(source, recipe, steps[index], found[1], after_inputs(earlier)[0])
    text = render_lock(recipe.name, steps[index], RESOLVER, inputs.digests, body)
    (root / inputs.relpath).write_text(text)


def test_a_line_that_moves_only_comments_of_an_earlier_lock_leaves_later_layers_fresh(
    project: Path,
) -> None:
    """v1.in names a package v1 already installs: v1's lock changes only its ``# via`` comment,
    what it installs does not, and v2, v3 (maybe minutes of pip-compile each) stay fresh."""
    recipe = make_recipe()
    write_fresh_locks(project, recipe, {"v1": VIA_BODY, "v2": BODY, "v3": BODY})
    (project / "images/t/requirements/v1.in").write_text("alpha\nzeta\n-c common.txt\n")
    assert statuses(project, recipe) == ["stale", "stale", "stale"]  # v1 must be compiled
    _rewrite_lock(project, recipe, "v1-01", VIA_BODY + "    #   zeta\n")
    assert statuses(project, recipe) == ["fresh", "fresh", "fresh"]
    _rewrite_lock(project, recipe, "v1-01", VIA_BODY.replace("1.0", "1.1"))  # it moved
    states = check_locks(DirectorySource(project), recipe)
    assert [s.status for s in states] == ["fresh", "stale", "stale"]
    assert states[1].reason == "inputs changed: after v1-01"


def test_a_lock_recording_an_earlier_locks_whole_text_digest_is_still_fresh(
    project: Path,
) -> None:
    """Locks written before ``after`` inputs were effect digests recorded the earlier lock's
    text digest: they stay fresh while that text is unchanged, and go stale when it changes."""
    recipe = make_recipe()
    write_all_locks(project, recipe)
    source = DirectorySource(project)
    found = read_base_digest(source, recipe)
    assert found is not None
    steps = pip_steps(recipe)
    text_digests = {s.slug: parse_lock(source.read_bytes(lock_relpath(recipe, s)), s.slug)
                    .content_digest for s in steps}  # fmt: skip
    for index, step in enumerate(steps[1:], start=1):
        earlier = {s.slug: text_digests[s.slug] for s in steps[:index]}
        inputs = layer_inputs(source, recipe, step, found[1], earlier)
        assert all(v.startswith("sha256:") for k, v in inputs.digests.items() if "after" in k)
        text = render_lock(recipe.name, step, RESOLVER, inputs.digests, BODY)
        (project / inputs.relpath).write_text(text)
    assert statuses(project, recipe) == ["fresh", "fresh", "fresh"]
    _rewrite_lock(project, recipe, "v1-01", BODY + "    # via -r requirements/v1.in\n")
    assert statuses(project, recipe) == ["fresh", "stale", "stale"]  # the old record can't tell


def test_the_effect_digest_covers_pins_hashes_markers_and_metadata_not_comments() -> None:
    pin = Pin("alpha", "1.0", ("sha256:aa",))
    lock = Lock("v1-01", "sha256:x", {"alpha": pin}, "sha256:text")
    same = Lock("v1-01", "sha256:y", {"alpha": pin}, "sha256:other-text")
    assert lock.effect_digest == same.effect_digest and lock.effect_digest.startswith("effect:")
    others = [
        Lock("v1-01", "x", {"alpha": Pin("alpha", "1.1", ("sha256:aa",))}),
        Lock("v1-01", "x", {"alpha": Pin("alpha", "1.0", ("sha256:bb",))}),
        Lock("v1-01", "x", {"alpha": Pin("alpha", "1.0", ("sha256:aa",), "python_version<'4'")}),
        Lock("v1-01", "x", {"alpha": pin}, metadata={"alpha": PinMetadata(("beta",))}),
    ]
    assert len({lock.effect_digest, *(other.effect_digest for other in others)}) == 5
