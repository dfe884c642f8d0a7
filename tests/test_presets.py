"""The ``cuda-ml`` preset against the real vLLM 0.33.0 arm64 stack and the field's failures.

``tests/data/real_stacks/vllm-0.33.0-arm64-py312.json`` holds what the index publishes for
``vllm==0.33.0`` on linux/arm64 with Python 3.12 (names, versions, Requires-Dist; how it was
captured is in its ``about``). The vendor's own set must pass the preset; the field report's
cutlass-dsl skew and NCCL downgrade must fail it, with no hand-written policy, and every
finding must name the preset rule that fired.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from audit.cli import main as cli
from audit.errors import EXIT_OK, EXIT_VIOLATION, RecipeError
from audit.history.snapshot import Distribution
from audit.host import process as commands
from audit.policy import presets
from audit.policy.findings import Finding
from audit.policy.model import FAIL, WARN, LockstepGroup, Policy
from audit.policy.verdict import evaluate
from audit.project.sources import DirectorySource
from audit.recipe.parse import load_recipe
from tests.support.project import ProjectSpec, system_base
from tests.support.project import write_project as write_project_files

REPO = Path(__file__).resolve().parents[1]
STACK = REPO / "tests" / "data" / "real_stacks" / "vllm-0.33.0-arm64-py312.json"
MINI = REPO / "tests" / "data" / "recipes" / "mini"
TODAY = dt.date(2026, 12, 1)
CUTLASS = (
    "nvidia-cutlass-dsl",
    "nvidia-cutlass-dsl-libs-base",
    "nvidia-cutlass-dsl-libs-core",
    "nvidia-cutlass-dsl-libs-cu12",
    "nvidia-cutlass-dsl-libs-cu13",
)

Env = dict[str, Distribution]


def stack() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(STACK.read_text())
    return data


def vendor_env() -> Env:
    """The vendor's resolved set, as installed distributions with their real Requires-Dist."""
    return {
        name: Distribution(name, entry["version"], requires_dist=tuple(entry["requires_dist"]))
        for name, entry in stack()["packages"].items()
    }


def moved(env: Env, versions: Mapping[str, str]) -> Env:
    """``env`` with some packages at other versions (Requires-Dist kept: same-name metadata)."""
    changed = {
        n: Distribution(n, v, requires_dist=env[n].requires_dist) for n, v in versions.items()
    }
    return {**env, **changed}


def cuda_ml(policy: Policy | None = None) -> Policy:
    return presets.merge(policy or Policy(cuda="cu130"), "cuda-ml", frozenset(), frozenset())


def judge(before: Env, after: Env, policy: Policy, declared: tuple[str, ...] = ()) -> list[Finding]:
    markers = stack()["markers"]
    found = evaluate(
        before, after, policy, where="v2 layer 1", today=TODAY, declared=declared, markers=markers
    )
    return [f for f in found if f.fails]


def test_the_captured_stack_is_the_real_one() -> None:
    """The data is the real stack as published: ~200 packages, cu12 libs beside cu13 ones."""
    packages = stack()["packages"]
    assert 150 < len(packages) < 260
    versions = {name: packages[name]["version"] for name in (*CUTLASS, "nvidia-nccl-cu13")}
    assert set(versions.values()) == {"4.8.0", "2.30.7"}
    assert "nvidia-cutlass-dsl-libs-base==4.8.0" in packages["nvidia-cutlass-dsl"]["requires_dist"]


def test_vendor_set_passes_the_preset() -> None:
    """nvidia-cutlass-dsl 4.8.0 requires nvidia-cutlass-dsl-libs-cu12: the cuda-suffix rule
    passes a -cu12 package the installed metadata requires."""
    assert judge({}, vendor_env(), cuda_ml()) == []


def test_vendor_set_breaks_no_lockstep_floor_or_ban_of_the_preset() -> None:
    found = judge({}, vendor_env(), cuda_ml())
    assert [f for f in found if f.rule != "cuda-suffix"] == []


def test_field_cutlass_skew_fails_with_the_preset_only() -> None:
    """4.4.0 beside libs 4.8.1: every move is an upgrade, so only the lockstep group sees it."""
    older = moved(vendor_env(), dict.fromkeys(CUTLASS, "4.4.0"))
    nightly = moved(older, dict.fromkeys(CUTLASS[1:], "4.8.1"))
    assert judge(older, nightly, Policy(cuda="cu130")) == []
    (finding,) = judge(older, nightly, cuda_ml())
    assert finding.rule == "lockstep"
    assert finding.message.startswith("preset cuda-ml: lockstep cutlass-dsl: ")
    assert "nvidia-cutlass-dsl 4.4.0" in finding.message
    assert "nvidia-cutlass-dsl-libs-base 4.8.1" in finding.message
    assert 'preset_skip = ["lockstep cutlass-dsl"]' in finding.hint
    assert finding.preset_rule == "lockstep cutlass-dsl"  # typed: the hint never reads the message


def test_the_preset_hint_follows_the_typed_rule_not_the_message() -> None:
    """The hint names the preset rule the finding carries; a recipe rule whose message merely
    starts like a preset's gets no preset note."""
    from dataclasses import replace

    from audit.policy.verdict import apply_waivers

    older = moved(vendor_env(), dict.fromkeys(CUTLASS, "4.4.0"))
    nightly = moved(older, dict.fromkeys(CUTLASS[1:], "4.8.1"))
    (finding,) = judge(older, nightly, cuda_ml())
    bare = replace(finding, hint="")
    (again,) = apply_waivers([bare], cuda_ml(), dt.date(2026, 6, 1))
    assert 'preset_skip = ["lockstep cutlass-dsl"]' in again.hint
    own = replace(bare, preset_rule=None)
    (plain,) = apply_waivers([own], cuda_ml(), dt.date(2026, 6, 1))
    assert "preset_skip" not in plain.hint


def test_field_nccl_downgrade_fails_even_as_an_override() -> None:
    """The nightly's NCCL 2.29.7, re-pinned on purpose (--no-deps), still breaks the ban."""
    vendor = vendor_env()
    nightly = moved(vendor, {"nvidia-nccl-cu13": "2.29.7"})
    (finding,) = judge(vendor, nightly, cuda_ml(), declared=("nvidia-nccl-cu13",))
    assert (finding.rule, finding.package, finding.after) == (
        "forbidden",
        "nvidia-nccl-cu13",
        "2.29.7",
    )
    assert finding.message.startswith("preset cuda-ml: forbid nvidia-nccl-cu13: ")
    assert "internal error" in finding.hint


def test_variant_names_the_preset() -> None:
    before = {"torch": Distribution("torch", "2.9.0+cu130")}
    after = {"torch": Distribution("torch", "2.9.0+cpu")}
    found = judge(before, after, cuda_ml())
    assert [f.rule for f in found] == ["variant", "cuda-suffix"]
    assert found[0].message.startswith("preset cuda-ml: variant: ")


def test_flashinfer_and_nvcc_groups() -> None:
    base = moved(vendor_env(), {})
    base["flashinfer-cubin"] = Distribution("flashinfer-cubin", "0.7.2.post1")
    after = moved(base, {"flashinfer-cubin": "0.7.3", "nvidia-cuda-crt": "13.6.0"})
    found = judge(base, after, cuda_ml())
    assert sorted(f.message.split(":")[1].strip() for f in found) == [
        "lockstep cuda-nvcc",
        "lockstep flashinfer",
    ]


def test_policy_json_keeps_the_preset() -> None:
    policy = cuda_ml()
    again = Policy.from_json(json.loads(json.dumps(policy.to_json())))
    assert again == policy
    assert Policy.from_json({**Policy().to_json(), "preset": None}).preset_rules == ()


# --- the recipe keys --------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copytree(MINI, tmp_path / "images" / "mini")
    path = tmp_path / "images" / "mini" / "image.toml"
    text = path.read_text().replace('cuda = "cpu"', 'cuda = "cu130"')
    path.write_text(text.replace("[policy]\n", '[policy]\npreset = "cuda-ml"\n'))
    return tmp_path


def policy_of(project: Path, extra: str = "", tables: str = "") -> Policy:
    path = project / "images" / "mini" / "image.toml"
    text = path.read_text().replace('preset = "cuda-ml"\n', f'preset = "cuda-ml"\n{extra}')
    path.write_text(text + tables)
    return load_recipe(DirectorySource(project), "mini").policy


def test_recipe_turns_the_preset_on(project: Path) -> None:
    policy = policy_of(project)
    assert policy.preset == "cuda-ml"
    assert policy.preset_rules == presets.rule_ids("cuda-ml")
    assert policy.forbidden == ("nvidia-nccl-cu13==2.29.7",)
    assert policy.requirements == ("foo-bar>=1",)
    assert [g.name for g in policy.lockstep] == ["cutlass-dsl", "flashinfer", "cuda-nvcc"]


def test_recipe_overrides_each_rule(project: Path) -> None:
    policy = policy_of(
        project,
        'variant = "warn"\ncuda_suffix = false\nforbid = ["nvidia-nccl-cu13<2.30"]\n'
        'preset_skip = ["lockstep flashinfer"]\n',
        "\n[policy.lockstep]\n"
        'cutlass-dsl = ["nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base"]\n',
    )
    assert (policy.variant, policy.cuda_suffix) == (WARN, False)
    assert policy.forbidden == ("nvidia-nccl-cu13<2.30",)
    assert policy.lockstep == (
        LockstepGroup("cutlass-dsl", ("nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base")),
        LockstepGroup("cuda-nvcc", ("nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm")),
    )
    assert policy.preset_rules == ("lockstep cuda-nvcc",)
    assert policy.downgrade == FAIL


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ('preset = "cuda-mI"\n', "no preset 'cuda-mI' (did you mean 'cuda-ml'?)"),
        ('preset_skip = ["lockstep flashinfr"]\n', "(did you mean 'lockstep flashinfer'?)"),
    ],
)
def test_bad_preset_keys_are_located(project: Path, extra: str, words: str) -> None:
    path = project / "images" / "mini" / "image.toml"
    text = path.read_text()
    if extra.startswith("preset ="):
        text = text.replace('preset = "cuda-ml"\n', extra)
    else:
        text = text.replace('preset = "cuda-ml"\n', f'preset = "cuda-ml"\n{extra}')
    path.write_text(text)
    with pytest.raises(RecipeError) as caught:
        load_recipe(DirectorySource(project), "mini")
    assert "images/mini/image.toml: policy.preset" in str(caught.value)
    assert words in str(caught.value)


def test_skip_without_a_preset_is_refused(project: Path) -> None:
    path = project / "images" / "mini" / "image.toml"
    path.write_text(path.read_text().replace('preset = "cuda-ml"\n', 'preset_skip = ["variant"]\n'))
    with pytest.raises(RecipeError, match="no preset is set"):
        load_recipe(DirectorySource(project), "mini")


# --- audit-deps, end to end ----------------------------------------------------------------

PRESET_RECIPE = """\
[image]
base = "example/vllm:day0"
platform = "linux/arm64"
cuda = "cu130"
interpreters = ["/usr/bin/python3"]
repository = "local/vllm"

[[stage]]
name = "v1"
  [[stage.layer]]
  pip = "requirements/v1.in"
{policy}"""


def write_field_project(root: Path, policy: str) -> None:
    """The vendor's base with cutlass-dsl 4.4.0 throughout; v1 is the nightly that moves the
    libs to 4.8.1 (the field's skew)."""
    base = {name: entry["version"] for name, entry in stack()["packages"].items()}
    base.update(dict.fromkeys(CUTLASS, "4.4.0"))
    # Without its metadata here, the -cu12 libs would fail cuda-suffix (test_vendor_set_passes_…)
    del base["nvidia-cutlass-dsl-libs-cu12"]
    record = system_base(
        base,
        site="/usr/local/lib/python3.12/dist-packages",
        python="3.12.3",
        interpreter="/usr/bin/python3",
        image="example/vllm:day0",
    )
    pins = {
        "v1": dict.fromkeys(
            ("nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl-libs-core"), "4.8.1"
        )
    }
    recipe = PRESET_RECIPE.format(policy=policy)
    write_project_files(root, ProjectSpec.locked("vllm", recipe, record, pins))


def audit_deps(root: Path) -> tuple[int, list[dict[str, Any]]]:
    output = root / "report.json"
    code = cli.main(["audit-deps", "--format", "json", "--output", str(output)])
    report = json.loads(output.read_text())
    found = [f for s in report["sections"] for f in s["findings"] if f["severity"] == "error"]
    return code, found


@pytest.mark.parametrize(
    ("policy", "expected"), [("", EXIT_OK), ('\n[policy]\npreset = "cuda-ml"\n', EXIT_VIOLATION)]
)
def test_audit_deps_fails_the_field_skew_with_the_preset_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str, expected: int
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(commands.QUIET_ENV, "1")
    write_field_project(tmp_path, policy)
    code, found = audit_deps(tmp_path)
    assert code == expected
    if expected == EXIT_VIOLATION:
        (finding,) = found
        assert finding["rule"] == "lockstep"
        assert finding["message"].startswith("preset cuda-ml: lockstep cutlass-dsl: ")
