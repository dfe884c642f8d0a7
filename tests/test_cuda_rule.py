"""The CUDA-suffix rule on the real vLLM 0.33.0 arm64 stack (metadata captured from the index).

The vendor's own set must pass untouched (``nvidia-cutlass-dsl 4.8.0`` itself requires
``nvidia-cutlass-dsl-libs-cu12``), and the field's failures must still fail: a ``-cu12``
package nothing installed requires, a ``+cpu`` torch and a ``+cu12x`` build in a cu130 image.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from audit.history.snapshot import Distribution
from audit.policy.findings import Finding
from audit.policy.model import LockstepGroup, Policy
from audit.policy.verdict import check_state, required_by_metadata

DATA = Path(__file__).parent / "data" / "real_stack" / "vllm-0.33.0-arm64-cp311.json"
# The PEP 508 markers of CPython 3.11 on linux/arm64 (the replica's interpreter).
ARM64_PY311 = {
    "implementation_name": "cpython",
    "implementation_version": "3.11.2",
    "os_name": "posix",
    "platform_machine": "aarch64",
    "platform_python_implementation": "CPython",
    "platform_release": "6.1.0",
    "platform_system": "Linux",
    "platform_version": "#1 SMP",
    "python_full_version": "3.11.2",
    "python_version": "3.11",
    "sys_platform": "linux",
}
CU130 = Policy(cuda="cu130")
CUTLASS = LockstepGroup("cutlass-dsl", ("nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-*"))


def _dist(name: str, entry: dict[str, Any]) -> Distribution:
    return Distribution(
        name=name,
        version=entry["version"],
        raw_name=name,
        requires_dist=tuple(entry["requires_dist"]),
        requires_python=entry["requires_python"],
    )


@pytest.fixture(scope="module")
def captured() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DATA.read_text())
    return data


@pytest.fixture
def stack(captured: dict[str, Any]) -> dict[str, Distribution]:
    return {name: _dist(name, entry) for name, entry in captured["distributions"].items()}


def _cuda(env: dict[str, Distribution], policy: Policy = CU130) -> list[Finding]:
    found = check_state(env, policy, where="test", markers=ARM64_PY311)
    return [f for f in found if f.rule == "cuda-suffix"]


def test_the_captured_stack_is_the_real_one(stack: dict[str, Distribution]) -> None:
    assert 190 <= len(stack) <= 210
    versions = {n: stack[n].version for n in ("vllm", "torch", "nvidia-nccl-cu13")}
    assert versions == {"vllm": "0.33.0", "torch": "2.14.0", "nvidia-nccl-cu13": "2.30.7"}
    cutlass = stack["nvidia-cutlass-dsl"].requires_dist or ()
    assert "nvidia-cutlass-dsl-libs-cu12==4.8.0" in cutlass  # the vendor's own -cu12 package


def test_the_vendor_set_passes_the_cuda_rule_untouched(stack: dict[str, Distribution]) -> None:
    assert _cuda(stack) == []
    lockstep = Policy(cuda="cu130", lockstep=(CUTLASS,))
    assert check_state(stack, lockstep, where="test", markers=ARM64_PY311) == []


def test_a_cu12_package_nothing_requires_fails(stack: dict[str, Distribution]) -> None:
    stray = Distribution("nvidia-cublas-cu12", "12.9.1.4", raw_name="nvidia-cublas-cu12")
    (finding,) = _cuda({**stack, stray.name: stray})
    assert finding.package == "nvidia-cublas-cu12" and finding.fails
    assert "no installed package requires it" in finding.message


def test_the_cu12_libs_fail_once_their_requirer_is_gone(stack: dict[str, Distribution]) -> None:
    without = {n: d for n, d in stack.items() if n != "nvidia-cutlass-dsl"}
    assert [f.package for f in _cuda(without)] == ["nvidia-cutlass-dsl-libs-cu12"]


def test_cpu_and_cu12x_torch_builds_fail_in_a_cu130_image(stack: dict[str, Distribution]) -> None:
    for version, what in (("2.14.0+cpu", "a CPU build"), ("2.14.0+cu128", "build for cu128")):
        torch = dataclasses.replace(stack["torch"], version=version)
        (finding,) = _cuda({**stack, "torch": torch})
        assert finding.package == "torch" and what in finding.message and finding.fails


def test_a_requirement_whose_marker_is_false_in_the_image_vouches_for_nothing() -> None:
    env = {
        "host": Distribution("host", "1.0", requires_dist=(
            'nvidia-cufft-cu12; platform_machine == "x86_64"',)),
        "nvidia-cufft-cu12": Distribution("nvidia-cufft-cu12", "11.3"),
    }  # fmt: skip
    assert [f.package for f in _cuda(env)] == ["nvidia-cufft-cu12"]
    on_arm = dict(env, host=Distribution("host", "1.0", requires_dist=(
        'nvidia-cufft-cu12; platform_machine == "aarch64"',)))  # fmt: skip
    assert _cuda(on_arm) == []


def test_an_extra_counts_only_when_an_installed_requirement_asks_for_it() -> None:
    kit = Distribution("kit", "4.8", requires_dist=('kit-libs-cu12==4.8; extra == "legacy"',))
    libs = Distribution("kit-libs-cu12", "4.8")
    alone = {"kit": kit, "kit-libs-cu12": libs}
    assert [f.package for f in _cuda(alone)] == ["kit-libs-cu12"]
    app = Distribution("app", "1.0", requires_dist=("kit[legacy]>=4",))
    assert _cuda({**alone, "app": app}) == []


def test_a_failing_package_vouches_for_nothing() -> None:
    cudnn = Distribution("nvidia-cudnn-cu12", "9.1", requires_dist=("nvidia-cublas-cu12",))
    env = {cudnn.name: cudnn, "nvidia-cublas-cu12": Distribution("nvidia-cublas-cu12", "12.9")}
    assert sorted(f.package for f in _cuda(env)) == ["nvidia-cublas-cu12", "nvidia-cudnn-cu12"]
    user = Distribution("user", "1", requires_dist=("nvidia-cudnn-cu12",))
    assert _cuda({**env, "user": user}) == []
    assert required_by_metadata({**env, "user": user}, list(env), ARM64_PY311) == set(env)


def test_the_lockstep_skew_of_the_field_still_fails(stack: dict[str, Distribution]) -> None:
    skewed = dict(stack)
    skewed["nvidia-cutlass-dsl-libs-cu12"] = dataclasses.replace(
        stack["nvidia-cutlass-dsl-libs-cu12"], version="4.7.1"
    )
    found = check_state(
        skewed, Policy(cuda="cu130", lockstep=(CUTLASS,)), where="t", markers=ARM64_PY311
    )
    assert [f.rule for f in found] == ["lockstep"]


def test_real_torch_2_13_requires_the_older_nccl(captured: dict[str, Any]) -> None:
    torch = captured["others"]["torch"]
    assert torch["version"] == "2.13.0"
    assert 'nvidia-nccl-cu13==2.29.7; platform_system == "Linux"' in torch["requires_dist"]
