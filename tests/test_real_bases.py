"""Real ML bases: the field's vLLM route replayed with real pip-tools against tiny wheels.

The base record holds what a vendor image holds: a source-built ``vllm …dev5+gabc1234.cu130``
and ``torch 2.9.0+cu130`` that no index carries, ``nvidia-nccl-cu13 2.30.7`` and
``nvidia-cutlass-dsl`` 4.3.1 with its libs. The local index serves the FlashInfer nightly, which
asks ``nvidia-nccl-cu13==2.29.7`` and cutlass-dsl >= 4.4. Compiled on the host (``--host``:
the base record names this machine's Python); ``tests/test_real_bases_docker.py`` replays the
same route in a real image and a real build.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Mapping
from pathlib import Path

import pytest

from audit.cli import main as cli
from audit.history.snapshot import Distribution
from audit.lock.files import parse_lock
from tests.support.field_stack import (
    BASE,
    NIGHTLY,
    OVERRIDE,
    POLICY,
    REQUIREMENTS,
    TORCH,
    field_index,
)
from tests.support.fixtures import Wheelhouse
from tests.support.pkgindex import serve_index, yank
from tests.support.project import ProjectSpec, base_record, write_project

SITE = "/usr/local/lib/python3/dist-packages"
FIELD_BASE = "example/vllm-openai:glm53-flash"
ZERO = "sha256:" + "0" * 64


def field_base() -> tuple[Distribution, ...]:
    return tuple(
        Distribution(name, version, SITE, "pip", ZERO, name, requires_dist=requires)
        for name, version, requires in BASE
    )


def recipe(
    index: str, stages: Mapping[str, str], policy: str = POLICY, resolver: str = "pip-tools"
) -> str:
    """``stages``: stage name -> the TOML of its one pip layer (after ``pip = ...``)."""
    head = (
        f'[image]\nbase = "{FIELD_BASE}"\nplatform = "linux/amd64"\n'
        f'cuda = "cu130"\ninterpreters = ["/opt/venv/bin/python"]\nrepository = "local/field"\n'
        f'index_url = "{index}"\nresolver = "{resolver}"\n{policy}'
    )
    body = "".join(
        f'\n[[stage]]\nname = "{name}"\n  [[stage.layer]]\n  pip = "requirements/{name}.in"\n'
        f"{layer}\n"
        for name, layer in stages.items()
    )
    return head + body


def make_field_project(
    root: Path,
    index: str,
    stages: Mapping[str, str],
    policy: str = POLICY,
    resolver: str = "pip-tools",
) -> Path:
    spec = ProjectSpec(
        "field",
        recipe(index, stages, policy, resolver),
        REQUIREMENTS,
        base_record(*field_base(), python=platform.python_version(), image=FIELD_BASE),
    )
    return write_project(root, spec)


@pytest.fixture
def field(
    tmp_path: Path, wheelhouse: Wheelhouse, local_index: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, str]:
    field_index(wheelhouse)
    monkeypatch.chdir(tmp_path)
    return tmp_path, local_index


BACKENDS = {"pip-tools": ["--host"], "uv": []}  # uv: [image] resolver = "uv" in the recipe


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> str:
    """Both resolver backends replay the route: their locks must agree."""
    return str(request.param)


def lock(*argv: str, backend: str = "pip-tools") -> int:
    return cli.main(["lock", "field", *BACKENDS[backend], *argv])


def pins(root: Path, slug: str) -> dict[str, str]:
    lock_file = parse_lock((root / f"locks/field/{slug}.txt").read_bytes(), slug)
    return {name: pin.version for name, pin in lock_file.pins.items()}


def audit_json(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, object]]:
    capsys.readouterr()
    report = root / "report.json"
    code = cli.main(["audit-deps", "field", "--format", "json", "--output", str(report)])
    return code, json.loads(report.read_text())


def findings(document: Mapping[str, object]) -> list[dict[str, str]]:
    sections = document["sections"]
    assert isinstance(sections, list)
    return [f for section in sections for f in section["findings"]]


@pytest.mark.slow
def test_a_layer_on_off_index_packages_locks_and_pins_neither(
    field: tuple[Path, str], capsys: pytest.CaptureFixture[str], backend: str
) -> None:
    root, index = field
    make_field_project(root, index, {"v1": ""}, resolver=backend)
    assert lock(backend=backend) == 0, capsys.readouterr().err
    # vllm-router asks for the installed vllm (on no index) and torch==2.9.0+cu130: both stay
    assert pins(root, "v1-01") == {"vllm-router": "1.0"}
    text = (root / "locks/field/v1-01.txt").read_text()
    assert "# requires vllm-router: " in text and f"torch=={TORCH}" in text


@pytest.mark.slow
def test_the_nightly_layer_reports_every_conflict_in_one_run(
    field: tuple[Path, str], capsys: pytest.CaptureFixture[str], backend: str
) -> None:
    root, index = field
    make_field_project(root, index, {"v1": "", "v2": "  pre = true"}, resolver=backend)
    assert lock(backend=backend) == 1
    err = capsys.readouterr().err
    assert "v2 layer 1 (requirements/v2.in): 3 violations, nothing written" in err
    assert "downgraded: nvidia-nccl-cu13 2.30.7 -> 2.29.7 (installed by the base image)" in err
    assert f"flashinfer-python {NIGHTLY} requires nvidia-nccl-cu13==2.29.7" in err
    assert "lockstep" in err and "requirement: nvidia-nccl-cu13" in err
    assert "Traceback" not in err
    assert (root / "locks/field/v1-01.txt").exists()
    assert not (root / "locks/field/v2-01.txt").exists()


@pytest.mark.slow
def test_the_re_pin_override_locks_and_audits_with_zero_waivers(
    field: tuple[Path, str], capsys: pytest.CaptureFixture[str], backend: str
) -> None:
    root, index = field
    make_field_project(root, index, {"v1": "", "v2": OVERRIDE}, resolver=backend)
    assert lock(backend=backend) == 0, capsys.readouterr().err
    # the nightly moves; NCCL and cutlass-dsl stay where the base has them: not pinned
    assert pins(root, "v2-01") == {"flashinfer-python": NIGHTLY}
    code, report = audit_json(root, capsys)
    assert code == 0, report
    overrides = [f for f in findings(report) if f["rule"] == "override"]
    assert {f["package"] for f in overrides} == {"nvidia-nccl-cu13", "nvidia-cutlass-dsl"}
    nccl = next(f for f in overrides if f["package"] == "nvidia-nccl-cu13")
    assert (
        f"flashinfer-python {NIGHTLY} has requirement nvidia-nccl-cu13==2.29.7, "
        "but you have nvidia-nccl-cu13 2.30.7" in nccl["message"]
    )
    assert nccl["severity"] == "warning"


@pytest.mark.slow
def test_an_override_to_another_version_is_pinned_and_still_judged(
    field: tuple[Path, str], capsys: pytest.CaptureFixture[str], wheelhouse: Wheelhouse
) -> None:
    root, index = field
    skewed = '  pre = true\n  override = ["nvidia-nccl-cu13==2.30.7", "nvidia-cutlass-dsl==4.4.0"]'
    make_field_project(root, index, {"v1": "", "v2": skewed})
    # cutlass-dsl 4.4.0 against its libs 4.3.1: an override does not excuse the lockstep rule
    assert lock() == 1
    assert "lockstep" in capsys.readouterr().err
    both = skewed.replace('4.4.0"]', '4.4.0", "nvidia-cutlass-dsl-libs-base==4.4.0"]')
    make_field_project(root, index, {"v1": "", "v2": both})
    assert lock() == 0, capsys.readouterr().err
    assert pins(root, "v2-01") == {
        "flashinfer-python": NIGHTLY,
        "nvidia-cutlass-dsl": "4.4.0",
        "nvidia-cutlass-dsl-libs-base": "4.4.0",
    }
    libs = parse_lock((root / "locks/field/v2-01.txt").read_bytes(), "v2").pins
    wheel = wheelhouse.path / "nvidia_cutlass_dsl_libs_base-4.4.0-py3-none-any.whl"
    assert libs["nvidia-cutlass-dsl-libs-base"].hashes == (f"sha256:{sha256_of(wheel)}",)


def sha256_of(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_a_later_stage_that_drags_nccl_back_fails_lock(
    field: tuple[Path, str], capsys: pytest.CaptureFixture[str], backend: str
) -> None:
    root, index = field
    make_field_project(root, index, {"v1": "", "v2": OVERRIDE, "v3": ""}, resolver=backend)
    assert lock(backend=backend) == 1
    err = capsys.readouterr().err
    assert "v3 layer 1 (requirements/v3.in)" in err
    assert "downgraded: nvidia-nccl-cu13 2.30.7 -> 2.29.7" in err
    assert f"flashinfer-python {NIGHTLY} requires nvidia-nccl-cu13==2.29.7" in err
    assert not (root / "locks/field/v3-01.txt").exists()


@pytest.mark.slow
def test_a_waiver_is_a_verdict_not_an_input_and_audit_deps_applies_it(
    field: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    root, index = field
    waiver = (
        '[[policy.waiver]]\npackage = "nvidia-nccl-cu13"\nfrom = "2.30.7"\nto = "2.29.7"\n'
        'stage = "v3"\nreason = "sglang-kernel needs it"\n'
        '[[policy.waiver]]\npackage = "nvidia-nccl-cu13"\nfrom = "*"\nto = "2.29.7"\n'
        'rule = "requirement"\nstage = "v3"\nreason = "sglang-kernel needs it"\n'
        '[[policy.waiver]]\npackage = "cutlass-dsl"\nfrom = "*"\nto = "*"\n'
        'rule = "lockstep"\nstage = "v3"\nreason = "the nightly needs it"\n'
    )
    make_field_project(root, index, {"v1": "", "v2": OVERRIDE, "v3": ""}, POLICY + waiver)
    assert lock() == 0, capsys.readouterr().err
    assert pins(root, "v3-01")["nvidia-nccl-cu13"] == "2.29.7"
    code, report = audit_json(root, capsys)
    assert code == 0
    waived = [f for f in findings(report) if f["waiver"]]
    assert {f["rule"] for f in waived} == {"downgraded", "requirement", "lockstep"}
    # without the waivers the locks stay fresh (pip resolves the same), and lock --check and
    # audit-deps both fail on today's verdict
    make_field_project(root, index, {"v1": "", "v2": OVERRIDE, "v3": ""})
    capsys.readouterr()
    assert cli.main(["lock", "field", "--check"]) == 1
    out = capsys.readouterr().out
    assert "stale" not in out and "missing" not in out
    assert "policy: field v3 layer 1 (requirements/v3.in): downgraded: nvidia-nccl-cu13" in out
    code, report = audit_json(root, capsys)
    assert code == 1
    failing = [f for f in findings(report) if f["severity"] == "error"]
    assert {f["where"] for f in failing} == {"field v3 layer 1 (requirements/v3.in)"}


@pytest.mark.slow
def test_a_downgrade_waiver_does_not_waive_the_floor(
    field: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    root, index = field
    waiver = (
        '[[policy.waiver]]\npackage = "nvidia-nccl-cu13"\nfrom = "2.30.7"\nto = "2.29.7"\n'
        'reason = "only the downgrade"\n'
    )
    make_field_project(root, index, {"v1": "", "v2": OVERRIDE, "v3": ""}, POLICY + waiver)
    assert lock() == 1
    err = capsys.readouterr().err
    listed = err.split("nothing written")[1].split("hint")[0]
    assert "requirement: nvidia-nccl-cu13" in listed and "downgraded" not in listed


@pytest.mark.slow
def test_a_waiver_between_local_versions_works_and_not_for_the_cuda_rule(
    field: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    root, index = field
    variant = (
        '[[policy.waiver]]\npackage = "torch"\nfrom = "2.9.0+cu130"\nto = "2.9.0+cpu"\n'
        'reason = "CPU smoke image"\n'
    )
    spec_v1 = {"v1": ""}
    make_field_project(root, index, spec_v1, POLICY + variant)
    (root / "images/field/requirements/v1.in").write_text("torch==2.9.0+cpu\n")
    assert lock() == 1  # the variant is waived, the CUDA suffix rule is not
    err = capsys.readouterr().err
    assert (
        "cuda-suffix" in err and "variant" not in err.split("nothing written")[1].split("hint")[0]
    )
    cuda = variant.replace('reason = "CPU smoke image"', 'rule = "cuda-suffix"\nreason = "ok"')
    make_field_project(root, index, spec_v1, POLICY + variant + cuda)
    (root / "images/field/requirements/v1.in").write_text("torch==2.9.0+cpu\n")
    assert lock() == 0, capsys.readouterr().err
    assert pins(root, "v1-01") == {"torch": "2.9.0+cpu"}


@pytest.mark.slow
def test_uv_locks_for_an_arm64_target_on_this_host_with_aarch64_hashes(
    tmp_path: Path,
    wheelhouse: Wheelhouse,
    local_index: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    wheelhouse("native", "1.0")
    arm = wheelhouse("native", "2.0", tag="py3-none-manylinux2014_aarch64")
    wheelhouse("native", "3.0", tag="py3-none-manylinux2014_x86_64")  # not for the target
    markers = {"platform_machine": "aarch64", "python_version": "3.12", "sys_platform": "linux"}
    toml = recipe(local_index, {"v1": ""}, "", "uv").replace("linux/amd64", "linux/arm64")
    record = base_record(python="3.12.3", markers=markers, image=FIELD_BASE)
    write_project(tmp_path, ProjectSpec("field", toml, {"v1.in": "native\n"}, record))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["lock", "field"]) == 0, capsys.readouterr().err
    lock_file = parse_lock((tmp_path / "locks/field/v1-01.txt").read_bytes(), "v1")
    assert {n: p.version for n, p in lock_file.pins.items()} == {"native": "2.0"}
    assert lock_file.pins["native"].hashes == (f"sha256:{sha256_of(arm)}",)


# --- deliberate moves ------------------------------------------------------------------------


def moves_project(root: Path, index: str, policy: str = "", resolver: str = "pip-tools") -> Path:
    spec = ProjectSpec(
        "field",
        recipe(index, {"v1": ""}, policy, resolver),
        {"v1.in": "beta\ngamma\n"},
        base_record(python=platform.python_version(), image=FIELD_BASE),
    )
    return write_project(root, spec)


@pytest.mark.slow
def test_a_re_lock_keeps_earlier_pins_and_upgrade_package_moves_one(
    field: tuple[Path, str],
    wheelhouse: Wheelhouse,
    backend: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root, index = field
    wheelhouse("beta", "1.0")
    wheelhouse("gamma", "1.0")
    moves_project(root, index, resolver=backend)
    assert lock(backend=backend) == 0
    wheelhouse("beta", "1.1")  # newer releases appear on the index
    wheelhouse("gamma", "1.1")
    wheelhouse("delta", "1.0")
    (root / "images/field/requirements/v1.in").write_text("beta\ngamma\ndelta\n")
    assert lock(backend=backend) == 0  # one edit: delta comes, beta and gamma stay
    assert pins(root, "v1-01") == {"beta": "1.0", "gamma": "1.0", "delta": "1.0"}
    capsys.readouterr()
    assert lock("--upgrade-package", "beta", backend=backend) == 0
    assert pins(root, "v1-01") == {"beta": "1.1", "gamma": "1.0", "delta": "1.0"}
    out = capsys.readouterr().out
    assert "moved: v1 layer 1 (requirements/v1.in): beta 1.0 -> 1.1 (upgraded)" in out
    assert lock("--upgrade-package", "gamma==1.0", "--upgrade", backend=backend) == 0
    assert pins(root, "v1-01") == {"beta": "1.1", "gamma": "1.0", "delta": "1.0"}


@pytest.mark.slow
def test_an_upgrade_the_policy_forbids_is_refused(
    field: tuple[Path, str], wheelhouse: Wheelhouse, capsys: pytest.CaptureFixture[str]
) -> None:
    root, index = field
    wheelhouse("beta", "1.0")
    wheelhouse("gamma", "1.0")
    moves_project(root, index, '[policy]\nforbid = ["beta>=1.1"]\n')
    assert lock() == 0
    wheelhouse("beta", "1.1")
    capsys.readouterr()
    assert lock("--upgrade-package", "beta") == 1
    assert "forbidden" in capsys.readouterr().err
    assert pins(root, "v1-01")["beta"] == "1.0"  # the refused run wrote nothing


def test_upgrade_package_refuses_what_is_not_a_name_or_pin(
    field: tuple[Path, str], wheelhouse: Wheelhouse, capsys: pytest.CaptureFixture[str]
) -> None:
    root, index = field
    moves_project(root, index)
    assert lock("--upgrade-package", "beta>=2") == 2
    assert "only == pins a version" in capsys.readouterr().err


# --- several indexes ---------------------------------------------------------------------------


@pytest.mark.slow
def test_a_package_on_the_extra_index_never_comes_from_the_primary_one(
    tmp_path: Path,
    wheelhouse: Wheelhouse,
    local_index: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    backend: str,
) -> None:
    wheelhouse("flashy", "9.9")  # published on the public index by someone else
    nightly = Wheelhouse(tmp_path / "nightly")
    nightly("flashy", "1.0.dev1")
    with serve_index(nightly.path) as extra:
        indexes = f'[indexes]\nnightly = "{extra}"\n'
        layer = '  index = "nightly"\n  pre = true'
        toml = recipe(local_index, {"v1": layer}, indexes, backend)
        record = base_record(python=platform.python_version(), image=FIELD_BASE)
        write_project(tmp_path, ProjectSpec("field", toml, {"v1.in": "flashy\n"}, record))
        monkeypatch.chdir(tmp_path)
        code = lock(backend=backend)
    err = capsys.readouterr().err
    if backend == "uv":  # first-index: the declared extra index wins by itself
        assert code == 0, err
        assert pins(tmp_path, "v1-01") == {"flashy": "1.0.dev1"}
    else:  # pip merges indexes and takes 9.9: refused, nothing written
        assert code == 1, err
        assert "flashy 9.9 exists on the layer's extra index" in err
        assert "dependency confusion" in err
        assert not (tmp_path / "locks/field/v1-01.txt").exists()


# --- the two backends agree --------------------------------------------------------------------


def differential_index(wheelhouse: Wheelhouse) -> None:
    """Markers, extras, a package with only pre-releases, local versions and a yanked file."""
    wheelhouse("plat", "1.0", requires=['winonly; sys_platform == "win32"',
                                        'linonly; sys_platform == "linux"'])  # fmt: skip
    wheelhouse("winonly", "1.0")
    wheelhouse("linonly", "1.0")
    wheelhouse("extrad", "1.0", requires=['speedup; extra == "fast"'])
    wheelhouse("speedup", "1.0")
    wheelhouse("preonly", "2.0rc1")
    wheelhouse("localpkg", "1.0+cpu")
    wheelhouse("localpkg", "1.0+cu130")
    wheelhouse("yanky", "1.0")
    yank(wheelhouse("yanky", "2.0"))
    wheelhouse("oldpy", "1.0")
    wheelhouse("oldpy", "2.0", requires=[])  # Requires-Python is not written by the helper


DIFFERENTIAL_IN = "plat\nextrad[fast]\npreonly\nlocalpkg==1.0+cu130\nyanky\noldpy<2\n"


@pytest.mark.slow
def test_both_backends_lock_the_same_pins_for_the_same_layer(
    tmp_path: Path,
    wheelhouse: Wheelhouse,
    local_index: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    differential_index(wheelhouse)
    found: dict[str, dict[str, str]] = {}
    for backend in BACKENDS:
        root = tmp_path / backend
        toml = recipe(local_index, {"v1": ""}, "", backend)
        record = base_record(python=platform.python_version(), image=FIELD_BASE,
                             markers={"sys_platform": "linux", "platform_machine": "x86_64",
                                      "python_version": "3.11"})  # fmt: skip
        write_project(root, ProjectSpec("field", toml, {"v1.in": DIFFERENTIAL_IN}, record))
        monkeypatch.chdir(root)
        assert lock(backend=backend) == 0, capsys.readouterr().err
        found[backend] = pins(root, "v1-01")
    assert found["pip-tools"] == found["uv"]
    assert found["uv"] == {
        "plat": "1.0", "linonly": "1.0", "extrad": "1.0", "speedup": "1.0",
        "preonly": "2.0rc1", "localpkg": "1.0+cu130", "yanky": "1.0", "oldpy": "1.0",
    }  # fmt: skip


@pytest.mark.slow
def test_a_no_deps_re_pin_layer_after_the_nightly_needs_no_waiver_either(
    field: tuple[Path, str], capsys: pytest.CaptureFixture[str], backend: str
) -> None:
    root, index = field
    stages = {"v1": "", "v2": "  pre = true"}
    toml = recipe(index, stages, POLICY, backend) + (
        '  [[stage.layer]]\n  pip = "requirements/v2-repin.in"\n  no_deps = true\n'
    )
    record = base_record(*field_base(), python=platform.python_version(), image=FIELD_BASE)
    repin = "nvidia-nccl-cu13==2.30.7\nnvidia-cutlass-dsl==4.3.1\n"
    files = {**REQUIREMENTS, "v2-repin.in": repin}
    write_project(root, ProjectSpec("field", toml, files, record))
    assert lock(backend=backend) == 0, capsys.readouterr().err
    # the nightly's lock already holds the re-pinned versions: no image layer has NCCL 2.29.7
    assert pins(root, "v2-01") == {"flashinfer-python": NIGHTLY}
    assert pins(root, "v2-02") == {}
    code, report = audit_json(root, capsys)
    assert code == 0, report
    overrides = {f["package"] for f in findings(report) if f["rule"] == "override"}
    assert overrides == {"nvidia-nccl-cu13", "nvidia-cutlass-dsl"}
