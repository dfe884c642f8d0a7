"""The policy engine: change severities, state rules, waivers, hints."""

from __future__ import annotations

import datetime

import pytest

from audit.errors import BadInput
from audit.history.snapshot import Distribution, Environment
from audit.policy.findings import ERROR, INFO, WARNING, Finding
from audit.policy.model import ALLOW, WARN, LockstepGroup, Policy, Waiver
from audit.policy.verdict import (
    Scope,
    WaiverLedger,
    broken_requirements,
    check_state,
    cuda_major,
    evaluate,
    evaluate_shadowed,
)

TODAY = datetime.date(2026, 6, 1)
CU130 = Policy(cuda="cu130")


def env(**versions: str) -> dict[str, Distribution]:
    found = {}
    for key, version in versions.items():
        name = key.replace("_", "-")
        found[name] = Distribution(name, version, "/site", "pip", f"sha256:{version}", name)
    return found


def run(
    before: dict[str, Distribution], after: dict[str, Distribution], policy: Policy = CU130
) -> list[Finding]:
    return evaluate(before, after, policy, where="demo v2 layer 1", today=TODAY)


def only(findings: list[Finding], rule: str) -> Finding:
    (finding,) = [f for f in findings if f.rule == rule]
    return finding


@pytest.mark.parametrize(
    ("before", "after", "rule", "severity"),
    [
        ({}, {"six": "1.16"}, "added", INFO),
        ({"six": "1.15"}, {"six": "1.16"}, "upgraded", INFO),
        ({"six": "1.16"}, {"six": "1.15"}, "downgraded", ERROR),
        ({"six": "1.16"}, {}, "removed", ERROR),
        ({"torch": "2.9.0+cu130"}, {"torch": "2.9.0+cpu"}, "variant", ERROR),
        ({"six": "1.16"}, {"six": "1!x"}, "unparsable-version", WARNING),
    ],
)
def test_each_change_gets_one_finding(
    before: dict[str, str], after: dict[str, str], rule: str, severity: str
) -> None:
    finding = only(run(env(**before), env(**after)), rule)
    assert finding.severity == severity and finding.where == "demo v2 layer 1"
    assert (finding.hint != "") == (severity == ERROR)


def test_rebuilt_warns_by_default() -> None:
    before = env(six="1.16")
    after = {"six": Distribution("six", "1.16", "/site", "pip", "sha256:other", "six")}
    assert only(run(before, after), "rebuilt").severity == WARNING


@pytest.mark.parametrize(("action", "severity"), [(WARN, WARNING), (ALLOW, INFO)])
def test_policy_actions_set_severity(action: str, severity: str) -> None:
    policy = Policy(downgrade=action, removal=action)
    findings = run(env(a="2", b="1"), env(a="1"), policy)
    assert {f.rule: f.severity for f in findings} == {"downgraded": severity, "removed": severity}


def test_lockstep_with_globs_fails_once_at_the_layer_that_broke_it() -> None:
    group = LockstepGroup("cutlass-dsl", ("nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-*"))
    policy = Policy(lockstep=(group,), cuda="cu130")
    good = env(nvidia_cutlass_dsl="4.3.0", nvidia_cutlass_dsl_libs_cu13="4.3.0")
    skewed = env(nvidia_cutlass_dsl="4.3.0", nvidia_cutlass_dsl_libs_cu13="4.2.1")
    finding = only(run(good, skewed, policy), "lockstep")
    assert finding.severity == ERROR and "nvidia-cutlass-dsl-libs-cu13 4.2.1" in finding.message
    still = dict(skewed, six=Distribution("six", "1.16", "/site"))
    assert not [f for f in run(skewed, still, policy) if f.rule == "lockstep"]
    assert (
        check_state(
            env(nvidia_cutlass_dsl="4.3.0+cu130", nvidia_cutlass_dsl_libs_x="4.3.0"),
            policy,
            where="",
        )
        == []
    )


@pytest.mark.parametrize(
    ("name", "version", "bad"),
    [
        ("nvidia-nccl-cu12", "2.29.7", True),
        ("nvidia-nccl-cu13", "2.29.7", False),
        ("torch", "2.9.0+cu128", True),
        ("torch", "2.9.0+cu130", False),
        ("torch", "2.9.0", False),
        ("torch", "2.9.0+cpu", True),
    ],
)
def test_cuda_suffix_in_a_cu130_image(name: str, version: str, bad: bool) -> None:
    findings = check_state({name: Distribution(name, version)}, CU130, where="")
    assert [f.severity for f in findings] == ([ERROR] if bad else [])


def test_cuda_marks_in_a_cpu_image_warn() -> None:
    after = {"torch": Distribution("torch", "2.9.0+cu130")}
    for cuda in (None, "cpu"):
        (finding,) = check_state(after, Policy(cuda=cuda), where="")
        assert finding.severity == WARNING and finding.rule == "cuda-suffix"
    assert check_state(after, Policy(cuda="cu128", cuda_suffix=False), where="") == []
    cpu_build = {"torch": Distribution("torch", "2.9.0+cpu")}
    assert check_state(cpu_build, Policy(cuda="cpu"), where="") == []


def test_cuda_major() -> None:
    assert [cuda_major(t) for t in ("cu130", "cu128", "cu118", "cpu")] == ["13", "12", "11", None]


def test_requirement_floor_fails_when_broken_and_missing_is_fine() -> None:
    policy = Policy(requirements=("nvidia-nccl-cu13>=2.30",), cuda="cu130")
    finding = only(run(env(), env(nvidia_nccl_cu13="2.29.7"), policy), "requirement")
    assert finding.severity == ERROR and "nvidia-nccl-cu13>=2.30" in finding.message
    assert check_state(env(nvidia_nccl_cu13="2.30.1"), policy, where="") == []
    assert check_state(env(six="1"), policy, where="") == []


def test_forbidden_bare_name_and_range() -> None:
    policy = Policy(forbidden=("opencv-python", "numpy<2"))
    rules = [
        (f.package, f.rule)
        for f in check_state(env(opencv_python="4.10", numpy="1.26"), policy, where="")
    ]
    assert rules == [("opencv-python", "forbidden"), ("numpy", "forbidden")]
    assert check_state(env(numpy="2.1"), policy, where="") == []


def test_bad_policy_requirement_is_bad_input() -> None:
    with pytest.raises(BadInput, match=r"require\[0\]"):
        check_state(env(), Policy(requirements=("nccl >>= 2",)), where="")


def test_waiver_allows_a_downgrade_with_its_reason() -> None:
    waiver = Waiver("triton", "3.5.0", "3.4.0", "3.5.0 miscompiles KDA on sm_121", TODAY)
    finding = only(
        run(env(triton="3.5.0"), env(triton="3.4.0"), Policy(waivers=(waiver,))), "downgraded"
    )
    assert finding.severity == INFO and finding.waiver is not None
    assert finding.waiver.startswith(waiver.reason) and "triton 3.5.0 -> 3.4.0" in finding.waiver


def test_waiver_for_other_versions_does_not_apply() -> None:
    waiver = Waiver("triton", "3.5.0", "3.3.0", "no")
    finding = only(
        run(env(triton="3.5.0"), env(triton="3.4.0"), Policy(waivers=(waiver,))), "downgraded"
    )
    assert finding.severity == ERROR


def test_expired_waiver_fails_with_its_date() -> None:
    waiver = Waiver("triton", "*", "*", "temporary", datetime.date(2026, 5, 31))
    findings = run(env(triton="3.5.0"), env(triton="3.4.0"), Policy(waivers=(waiver,)))
    assert only(findings, "downgraded").severity == ERROR
    expired = only(findings, "waiver-expired")
    assert expired.severity == ERROR and "2026-05-31" in expired.message and expired.hint


def test_a_waiver_naming_a_state_rule_covers_it_by_target_version() -> None:
    waiver = Waiver("nvidia-nccl-cu12", "*", "2.27.3", "vllm pins it", rule="cuda-suffix")
    policy = Policy(cuda="cu130", waivers=(waiver,))
    finding = only(run(env(), env(nvidia_nccl_cu12="2.27.3"), policy), "cuda-suffix")
    assert finding.severity == INFO and (finding.waiver or "").startswith("vllm pins it")


def test_a_waiver_without_a_rule_never_waives_a_state_rule() -> None:
    policy = Policy(
        cuda="cu130", waivers=(Waiver("nvidia-nccl-cu12", "*", "2.27.3", "vllm pins it"),)
    )
    finding = only(run(env(), env(nvidia_nccl_cu12="2.27.3"), policy), "cuda-suffix")
    assert finding.severity == ERROR


def test_error_hints_carry_a_waiver_snippet() -> None:
    finding = only(run(env(six="1.16"), env(six="1.15")), "downgraded")
    assert '"six==1.16"' in finding.hint
    assert '[[policy.waiver]]\npackage = "six"\nfrom = "1.16"\nto = "1.15"' in finding.hint


def test_new_shadowed_copies_only() -> None:
    def environment(*dists: Distribution) -> Environment:
        return Environment("/usr/bin/python3", "3.11", {}, ("/a", "/b"), dists)

    old = environment(Distribution("six", "1.16", "/b"))
    new = environment(Distribution("six", "1.17", "/a"), Distribution("six", "1.16", "/b"))
    (finding,) = evaluate_shadowed(old, new, Policy(), where="x", today=TODAY)
    assert (
        finding.rule == "shadowed"
        and finding.severity == WARNING
        and "1.17 in /a wins" in finding.message
    )
    assert evaluate_shadowed(new, new, Policy(), where="x", today=TODAY) == []


# --- scoped waivers and overrides (the real-bases issue) ------------------------------------

NCCL_BACK = Waiver("nvidia-nccl-cu13", "2.30.7", "2.29.7", "the v2 nightly needs it")


def staged(stage: str, ledger: WaiverLedger, policy: Policy) -> list[Finding]:
    before, after = env(nvidia_nccl_cu13="2.30.7"), env(nvidia_nccl_cu13="2.29.7")
    return evaluate(
        before, after, policy, where=f"x {stage}", today=TODAY, scope=Scope(stage, 1),
        ledger=ledger,
    )  # fmt: skip


def test_an_unscoped_waiver_waives_the_first_stage_only() -> None:
    ledger, policy = WaiverLedger(), Policy(waivers=(NCCL_BACK,))
    assert only(staged("v2", ledger, policy), "downgraded").severity == INFO
    assert only(staged("v2", ledger, policy), "downgraded").severity == INFO  # same stage: yes
    later = staged("v5", ledger, policy)
    assert only(later, "downgraded").severity == ERROR
    assert "was used in stage v2" in only(later, "waiver-spent").message


def test_a_waiver_scoped_to_a_stage_or_layer_waives_only_there() -> None:
    scoped = Waiver("nvidia-nccl-cu13", "2.30.7", "2.29.7", "r", stage="v5", layer=1)
    policy = Policy(waivers=(scoped,))
    assert only(staged("v2", WaiverLedger(), policy), "downgraded").severity == ERROR
    assert only(staged("v5", WaiverLedger(), policy), "downgraded").severity == INFO
    other_layer = Waiver("nvidia-nccl-cu13", "2.30.7", "2.29.7", "r", stage="v5", layer=2)
    policy = Policy(waivers=(other_layer,))
    assert only(staged("v5", WaiverLedger(), policy), "downgraded").severity == ERROR


def test_the_ledger_replays_what_earlier_findings_used() -> None:
    ledger = WaiverLedger()
    ledger.replay([Finding("downgraded", INFO, "x", "2", "1", "m", waiver_index=0)], "v2")
    policy = Policy(waivers=(NCCL_BACK,))
    assert only(staged("v3", ledger, policy), "downgraded").severity == ERROR


def test_a_downgrade_waiver_never_waives_a_floor() -> None:
    policy = Policy(requirements=("nvidia-nccl-cu13>=2.30",), waivers=(NCCL_BACK,))
    found = staged("v2", WaiverLedger(), policy)
    assert only(found, "downgraded").severity == INFO
    assert only(found, "requirement").severity == ERROR


def with_requires(name: str, version: str, *requires: str) -> Distribution:
    return Distribution(name, version, "/site", "pip", "", name, requires_dist=requires)


def test_an_override_reports_what_it_breaks_as_pip_check_would() -> None:
    before = {
        "flashinfer-python": with_requires(
            "flashinfer-python", "0.6.18", "nvidia-nccl-cu13==2.29.7"
        ),
        "nvidia-nccl-cu13": with_requires("nvidia-nccl-cu13", "2.29.7"),
    }
    after = dict(before, **{"nvidia-nccl-cu13": with_requires("nvidia-nccl-cu13", "2.30.7")})
    markers = {"python_version": "3.12", "sys_platform": "linux"}
    found = evaluate(
        before, after, Policy(), where="x v3", today=TODAY, declared=("nvidia-nccl-cu13",),
        markers=markers,
    )  # fmt: skip
    override = only(found, "override")
    assert override.severity == WARNING
    assert (
        "flashinfer-python 0.6.18 has requirement nvidia-nccl-cu13==2.29.7, but you have "
        "nvidia-nccl-cu13 2.30.7" in override.message
    )


def test_an_override_is_still_subject_to_floors_and_lockstep() -> None:
    policy = Policy(
        requirements=("nvidia-nccl-cu13>=2.30",),
        lockstep=(LockstepGroup("cutlass", ("nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-*")),),
    )
    before = env(nvidia_nccl_cu13="2.30.7", nvidia_cutlass_dsl="4.3.1",
                 nvidia_cutlass_dsl_libs_base="4.3.1")  # fmt: skip
    after = dict(before, **env(nvidia_nccl_cu13="2.29.7", nvidia_cutlass_dsl="4.4.0"))
    found = evaluate(
        before, after, policy, where="x", today=TODAY,
        declared=("nvidia-nccl-cu13", "nvidia-cutlass-dsl"),
    )  # fmt: skip
    assert {f.rule for f in found if f.fails} == {"requirement", "lockstep"}
    assert not [f for f in found if f.rule == "downgraded"]


def test_broken_requirements_honour_markers_and_extras() -> None:
    env_ = {
        "a": with_requires("a", "1.0", "b<2; python_version < '3.0'", "b<2; extra == 'x'"),
        "b": with_requires("b", "2.0"),
        "c": with_requires("c", "1.0", "B (<2)"),
    }
    broken = broken_requirements(env_, "b", {"python_version": "3.12"})
    assert broken == ["c 1.0 has requirement B<2, but you have b 2.0"]


def test_asked_for_by_lists_only_requirements_that_pin_the_new_version() -> None:
    """A downgrade's ``askers`` are typed (no renderer reads them out of the message) and hold
    only requirements that allow the new version and refuse the old one: one that allows both
    (``>=2.20``) or whose marker is false in this image asked for nothing."""
    nccl = "nvidia-nccl-cu13"
    before = {nccl: with_requires(nccl, "2.30.7")}
    after = {
        nccl: with_requires(nccl, "2.29.7"),
        "torch": with_requires("torch", "2.13.0", f"{nccl}==2.29.7"),
        "vllm": with_requires("vllm", "0.33.0", f"{nccl}>=2.20"),
        "jax": with_requires("jax", "0.9.0", f"{nccl}<2.30; sys_platform == 'win32'"),
        "cupy": with_requires("cupy", "14.0", f"{nccl}<2.30"),
    }
    found = evaluate(
        before, after, Policy(), where="x v3", today=TODAY, markers={"sys_platform": "linux"}
    )
    downgrade = only(found, "downgraded")
    assert downgrade.askers == (
        f"cupy 14.0 requires {nccl}<2.30",
        f"torch 2.13.0 requires {nccl}==2.29.7",
    )
    assert "asked for by" not in downgrade.message
    assert downgrade.told == f"{downgrade.message} (asked for by: {'; '.join(downgrade.askers)})"
    assert Finding.from_json(downgrade.to_json()) == downgrade  # the guard trail reads it back
    older = {k: v for k, v in downgrade.to_json().items() if k != "askers"}
    assert Finding.from_json(older).askers == ()  # a document from before askers existed
