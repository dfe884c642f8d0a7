"""The policy below Python: OS package changes in Debian's version order, and shadowed native
libraries (pure logic on recorded ``system`` objects; the recording is tested in
test_system_snapshot.py, the build in test_system_docker.py)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from audit.cli.main import main
from audit.history.snapshot import Environment, dump_snapshot
from audit.history.system import NativeCopy, NativeLibrary, NativeLoad, OsPackage, System
from audit.policy.model import Policy, Waiver
from audit.policy.system_rules import SHADOWED_NATIVE, evaluate_system, native_findings
from audit.policy.verdict import Scope, WaiverLedger

TODAY = dt.date(2026, 12, 1)
CUDA = Policy(cuda="cu130")
WHEEL = "/opt/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"
SYSTEM = "/usr/lib/x86_64-linux-gnu/libnccl.so.2.29.7"
LOADER = "/opt/venv/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so"


def system(*packages: tuple[str, str], native: tuple[NativeLibrary, ...] = ()) -> System:
    found = tuple(OsPackage(name, version, "amd64", name) for name, version in packages)
    return System("dpkg", "", found, native)


def nccl(loaded: str, *, system_version: str = "2.29.7") -> NativeLibrary:
    copies = (
        NativeCopy(WHEEL, "wheel", "nvidia-nccl-cu13 2.30.7", "libnccl.so.2", ""),
        NativeCopy(SYSTEM, "system", "", "libnccl.so.2", system_version),
    )
    return NativeLibrary("libnccl.so.2", copies, (NativeLoad(LOADER, loaded),))


def rules(before: System | None, after: System, policy: Policy | None = None) -> dict[str, str]:
    found = evaluate_system(before, after, policy or Policy(), where="img v2-02", today=TODAY)
    return {f"{f.rule} {f.package}": f.severity for f in found}


def test_debian_downgrade_and_removal_fail() -> None:
    before = system(("libssl3", "3.0.17-1~deb12u2"), ("curl", "7.88.1-10+deb12u14"))
    after = system(("libssl3", "3.0.11-1~deb12u2"), ("jq", "1.6-2.1"))
    assert rules(before, after) == {
        "downgraded deb:libssl3": "error",
        "removed deb:curl": "error",
        "added deb:jq": "info",
    }


def test_debian_order_not_text_order() -> None:
    """``deb12u10`` after ``deb12u4``, an epoch beats everything, ``~`` sorts first."""
    assert rules(system(("libc6", "2.36-9+deb12u4")), system(("libc6", "2.36-9+deb12u10"))) == {
        "upgraded deb:libc6": "info"
    }
    assert rules(system(("x", "1:1.0")), system(("x", "2.0"))) == {"downgraded deb:x": "error"}
    assert rules(system(("x", "1.0")), system(("x", "1.0~rc1"))) == {"downgraded deb:x": "error"}


def test_a_waiver_names_the_os_package() -> None:
    waiver = Waiver("deb:libssl3", "3.0.17-1~deb12u2", "3.0.11-1~deb12u2", "vendor pin")
    policy = Policy(waivers=(waiver,))
    before, after = system(("libssl3", "3.0.17-1~deb12u2")), system(("libssl3", "3.0.11-1~deb12u2"))
    (finding,) = evaluate_system(before, after, policy, where="w", today=TODAY)
    assert finding.severity == "info" and finding.waiver and "vendor pin" in finding.waiver


def test_the_hint_says_how_to_keep_the_package_and_how_to_waive() -> None:
    before, after = system(("libssl3", "3.0.17-1")), system(("libssl3", "3.0.11-1"))
    (finding,) = evaluate_system(before, after, Policy(), where="w", today=TODAY)
    assert "apt-get install libssl3=3.0.17-1" in finding.hint
    assert 'package = "deb:libssl3"' in finding.hint


def test_multiarch_names_carry_the_architecture() -> None:
    packages = (OsPackage("libc6", "2.36-9", "amd64", "glibc"),
                OsPackage("libc6", "2.36-9", "i386", "glibc"))  # fmt: skip
    assert sorted(System("dpkg", "", packages).keyed()) == ["deb:libc6:amd64", "deb:libc6:i386"]


def test_nothing_below_python_without_a_recorded_system() -> None:
    assert rules(None, system(("libc6", "2.36-9"))) == {}
    assert evaluate_system(system(), None, Policy(), where="w", today=TODAY) == []


def test_shadowed_native_fails_in_a_cuda_image_naming_both_copies() -> None:
    (finding,) = native_findings(system(native=(nccl(SYSTEM),)), CUDA, "img v3-01")
    assert finding.rule == SHADOWED_NATIVE and finding.severity == "error"
    assert (finding.package, finding.before, finding.after) == (
        "nvidia-nccl-cu13",
        "2.30.7",
        "2.29.7",
    )
    assert WHEEL in finding.message and SYSTEM in finding.message and LOADER in finding.message
    assert 'rule = "shadowed-native"' in finding.hint


def test_shadowed_native_is_a_warning_outside_cuda_images_and_can_be_set() -> None:
    state = system(native=(nccl(SYSTEM),))
    assert native_findings(state, Policy(cuda="cpu"), "w")[0].severity == "warning"
    assert native_findings(state, Policy(cuda="cpu", native_shadowed="fail"), "w")[0].fails
    assert not native_findings(state, Policy(cuda="cu130", native_shadowed="allow"), "w")[0].fails


def test_the_wheel_copy_loaded_or_the_same_version_elsewhere_is_fine() -> None:
    assert native_findings(system(native=(nccl(WHEEL),)), CUDA, "w") == []
    same = nccl(SYSTEM, system_version="2.30.7")
    assert native_findings(system(native=(same,)), CUDA, "w") == []
    unknown = nccl(SYSTEM, system_version="")
    (finding,) = native_findings(system(native=(unknown,)), CUDA, "w")
    assert "version unknown" in finding.message and finding.after is None


def test_shadowing_is_reported_at_the_layer_that_made_it() -> None:
    clean, shadowed = system(native=(nccl(WHEEL),)), system(native=(nccl(SYSTEM),))
    assert rules(clean, shadowed, CUDA) == {"shadowed-native nvidia-nccl-cu13": "error"}
    assert rules(shadowed, shadowed, CUDA) == {}


def test_a_waiver_for_the_shadowed_library() -> None:
    waiver = Waiver("nvidia-nccl-cu13", "2.30.7", "2.29.7", "NGC's NCCL on purpose",
                    rule=SHADOWED_NATIVE)  # fmt: skip
    policy = Policy(cuda="cu130", waivers=(waiver,))
    found = evaluate_system(system(native=(nccl(WHEEL),)), system(native=(nccl(SYSTEM),)),
                            policy, where="w", today=TODAY, scope=Scope("v3", 1),
                            ledger=WaiverLedger())  # fmt: skip
    assert [f.severity for f in found] == ["info"]


# --- the diff command reads what the snapshot files hold below Python ------------------------


def _snapshot_file(path: Path, state: System | None) -> Path:
    env = Environment("/usr/bin/python3", "3.11.2", {}, ("/usr/lib/python3/dist-packages",), (),
                      "", state)  # fmt: skip
    path.write_bytes(dump_snapshot([env]))
    return path


def test_diff_of_two_snapshot_files_fails_on_a_debian_downgrade(tmp_path: Path) -> None:
    before = _snapshot_file(tmp_path / "a.json", system(("libssl3", "3.0.17-1~deb12u2")))
    after = _snapshot_file(tmp_path / "b.json", system(("libssl3", "3.0.11-1~deb12u2")))
    report = tmp_path / "report.json"
    argv = ["diff", str(before), str(after), "--format", "json", "--output", str(report)]
    assert main(argv) == 1
    sections = json.loads(report.read_text())["sections"]
    (finding,) = [f for s in sections for f in s["findings"]]
    assert (finding["rule"], finding["package"]) == ("downgraded", "deb:libssl3")
    assert sections[-1]["title"].startswith("below Python")


def test_diff_of_files_recorded_before_the_system_existed_is_clean(tmp_path: Path) -> None:
    before = _snapshot_file(tmp_path / "a.json", None)
    after = _snapshot_file(tmp_path / "b.json", None)
    assert main(["diff", str(before), str(after)]) == 0


# --- the recipe's keys --------------------------------------------------------------------


def _mini(tmp_path: Path, policy_lines: str) -> Path:
    import shutil

    source = Path(__file__).resolve().parent / "data" / "recipes" / "mini"
    shutil.copytree(source, tmp_path / "images" / "mini")
    recipe = tmp_path / "images" / "mini" / "image.toml"
    recipe.write_text(recipe.read_text().replace("[policy]\n", "[policy]\n" + policy_lines, 1))
    return tmp_path


def test_recipe_keys_below_python(tmp_path: Path) -> None:
    from audit.project.sources import DirectorySource
    from audit.recipe.parse import load_recipe

    lines = 'native_shadowed = "warn"\nnative_libraries = ["libmooncake", "libnixl"]\n'
    recipe = load_recipe(DirectorySource(_mini(tmp_path, lines)), "mini")
    assert recipe.policy.native_shadowed == "warn"
    assert recipe.policy.native_libraries == ("libmooncake", "libnixl")
    assert Policy.from_json(recipe.policy.to_json()) == recipe.policy


def test_a_library_prefix_that_is_not_one_is_located(tmp_path: Path) -> None:
    import pytest

    from audit.errors import RecipeError
    from audit.project.sources import DirectorySource
    from audit.recipe.parse import load_recipe

    root = _mini(tmp_path, 'native_libraries = ["mooncake/../x"]\n')
    with pytest.raises(RecipeError) as caught:
        load_recipe(DirectorySource(root), "mini")
    assert "policy.native_libraries[1]" in str(caught.value)


def test_a_policy_written_before_these_keys_reads_with_the_defaults() -> None:
    old = Policy(cuda="cu130").to_json()
    assert "native_shadowed" not in old and "native_libraries" not in old
    assert Policy.from_json(old).native_shadowed is None
