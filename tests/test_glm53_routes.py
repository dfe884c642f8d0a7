"""The seed's own routes, audited: GLM-5.3-Flash on vLLM and on SGLang, by the replica route.

Neither day-0 image can be pulled here and the FlashInfer nightly index cannot be reached, so
each base is a replica of a pinned list (vLLM's or SGLang's own requirements of the build the
field report implies, resolved from PyPI as it stood before the day-0), with stand-ins for
what no reachable index carries; the nightly is a stand-in index of metadata-only wheels that
say what the field report says of it. Everything here is offline: the committed records and
locks pass ``lock --check`` and ``audit-deps --strict`` with zero waivers, every report names
the route and the stand-ins, and a later stage that installs the nightly again without the
re-pin (the field's failure replayed) is refused by ``lock --check``, ``audit-deps`` and the
gate. The opt-in ``--network`` test compiles that stage for real and sees ``lock`` refuse it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from audit.base.replica_plan import parse_pin_list
from audit.cli.main import main
from audit.errors import EXIT_OK, EXIT_VIOLATION
from audit.history.snapshot import Distribution, linux_markers, read_snapshot
from audit.host import process as commands
from audit.lock.files import BaseRecord, parse_lock
from audit.lock.plan import read_base_digest
from audit.lock.trust import REPLICA_SOURCE
from audit.project.sources import DirectorySource
from audit.recipe.parse import load_recipe
from tests.support.gitrepo import commit_files, git
from tests.support.glm53 import (
    NIGHTLY,
    ROOT,
    ROUTES,
    Route,
    add_later_stage,
    copy_project,
    nightly_index,
)

__all__ = ["nightly_index"]  # the fixture, from tests/support/glm53.py

ARM64 = linux_markers("aarch64", "3.11.2")
NCCL = ("nvidia-nccl-cu13", "2.30.7", "2.29.7")
route_names = pytest.mark.parametrize("name", sorted(ROUTES))


def record_of(route: Route) -> BaseRecord:
    source = DirectorySource(ROOT)
    found = read_base_digest(source, load_recipe(source, route.image))
    assert found is not None, f"{route.image}: no base record"
    return found[0]


def installed(record: BaseRecord) -> dict[str, Distribution]:
    (env,) = record.environments
    return env.winners()


@route_names
def test_the_record_is_the_replica_of_the_committed_list_and_names_its_standins(name: str) -> None:
    route = ROUTES[name]
    record = record_of(route)
    assert record.source == REPLICA_SOURCE and record.standins == route.standins
    assert load_recipe(DirectorySource(ROOT), route.image).policy.waivers == ()
    dists = installed(record)
    pins = {p.name: p.version for p in parse_pin_list(route.pin_list.read_text(), "x", ARM64).pins}
    assert {n: dists[n].version for n in pins} == pins and set(dists) - set(pins) == {"pip"}
    # each stand-in holds the requirements its --metadata-from document gives it, and no
    # other distribution's version is missing from PyPI's view of the list
    (given,) = read_snapshot(route.standins_file)
    for dist in given.distributions:
        assert f"{dist.name}=={dist.version}" in route.standins
        assert dists[dist.name].requires_dist == dist.requires_dist


def test_the_day0_facts_hold_in_both_records() -> None:
    """What the lists claim: FlashInfer 0.6.17, vLLM's and SGLang's pins, and the premise of the
    field's failure with real metadata (torch 2.13.0 pins NCCL 2.29.7; the image holds 2.30.7)."""
    vllm, sglang = (installed(record_of(ROUTES[n])) for n in sorted(ROUTES, reverse=True))
    stand_in = vllm["vllm"].requires_dist or ()
    assert {"flashinfer-python==0.6.17", "torch==2.13.0", "nvidia-cutlass-dsl[cu13]==4.6.2",
            "quack-kernels==0.6.4"} <= set(stand_in)  # fmt: skip
    assert "flashinfer_python[cu13]==0.6.17" in (sglang["sglang"].requires_dist or ())
    assert sglang["sglang"].version == "0.5.18"
    for dists in (vllm, sglang):
        assert dists["flashinfer-python"].version == "0.6.17"
        assert dists["nvidia-nccl-cu13"].version == "2.30.7" and dists["torch"].version == "2.13.0"
        assert 'nvidia-nccl-cu13==2.29.7; platform_system == "Linux"' in (
            dists["torch"].requires_dist or ()
        )
        cutlass = {n: d.version for n, d in dists.items() if n.startswith("nvidia-cutlass-dsl")}
        assert set(cutlass.values()) == {"4.6.2"} and len(cutlass) == 5


def load_make() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nightly_make", NIGHTLY / "make.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass resolves annotations through it
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_the_nightly_stand_in_index_is_what_its_maker_writes_and_says_the_field_report() -> None:
    files: dict[str, bytes] = load_make().build()
    committed = {
        p.relative_to(NIGHTLY).as_posix(): p.read_bytes()
        for p in NIGHTLY.rglob("*")
        if p.is_file() and p.name != "make.py" and "__pycache__" not in p.parts
    }
    assert committed == files  # byte for byte, nothing stale left beside them
    metadata = next(d for n, d in files.items() if n.startswith("files/flashinfer_python-")
                    and n.endswith(".metadata")).decode()  # fmt: skip
    assert "Version: 0.6.18.dev20260819+standin" in metadata
    assert "Requires-Dist: nvidia-nccl-cu13==2.29.7\n" in metadata
    assert "Requires-Dist: nvidia-cutlass-dsl>=4.7.0\n" in metadata
    wheels = {n.rsplit("/", 1)[1]: hashlib.sha256(d).hexdigest() for n, d in files.items()
              if n.endswith(".whl")}  # fmt: skip
    for route in ROUTES.values():
        slug = f"{route.nightly_stage}-01"
        lock = parse_lock((ROOT / f"locks/{route.image}/{slug}.txt").read_bytes(), slug)
        pinned = {(n, p.version) for n, p in lock.pins.items()}
        assert pinned == {("flashinfer-python", "0.6.18.dev20260819+standin"),
                          ("flashinfer-cubin", "0.6.18.dev20260819+standin"),
                          ("flashinfer-jit-cache", "0.6.18.dev20260819+cu130.standin")}  # fmt: skip
        hashes = {h for p in lock.pins.values() for h in p.hashes}
        assert hashes == {f"sha256:{h}" for h in wheels.values()}


@pytest.fixture
def in_repo(monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv(commands.QUIET_ENV, "1")
    return ROOT


def findings(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for s in report["sections"] for f in s["findings"]]


@route_names
def test_lock_check_and_audit_deps_strict_pass_with_zero_waivers_naming_route_and_standins(
    name: str, in_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    route = ROUTES[name]
    assert main(["lock", route.image, "--check"]) == EXIT_OK
    capsys.readouterr()
    assert main(["audit-deps", route.image, "--strict", "--format", "json"]) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    found = findings(report)
    assert report["counts"]["error"] == 0 and not [f for f in found if f.get("waiver")]
    (source,) = [f for f in found if f["rule"] == "base-source"]
    assert "replica" in source["message"] and all(s in source["message"] for s in route.standins)
    kept = {f["package"]: f["message"] for f in found if f["rule"] == "override"}
    libs = {f"nvidia-cutlass-dsl-libs-{part}" for part in ("base", "core", "cu12")}
    assert set(kept) == {"nvidia-nccl-cu13", "nvidia-cutlass-dsl", *libs}
    nccl = kept["nvidia-nccl-cu13"]
    assert "torch 2.13.0 has requirement nvidia-nccl-cu13==2.29.7" in nccl
    assert "0.6.18.dev20260819+standin has requirement nvidia-nccl-cu13==2.29.7" in nccl
    assert "has requirement nvidia-cutlass-dsl>=4.7.0" in kept["nvidia-cutlass-dsl"]
    assert not [m for m in kept.values() if "changes nothing" in m]


def later_stage_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: Route) -> Path:
    """A git repository of the route at ``main``; branch ``pr`` (checked out, the working
    folder) adds the later stage that installs the nightly again, with its lock."""
    monkeypatch.setenv(commands.QUIET_ENV, "1")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    root = copy_project(tmp_path / "repo", route)
    git(root, "init", "-q", "-b", "main")
    commit_files(root, {}, f"main: {route.image}")
    git(root, "checkout", "-q", "-b", "pr")
    add_later_stage(root, route)
    commit_files(root, {}, "pr: the nightly again, without the re-pin")
    monkeypatch.chdir(root)
    return root


@route_names
def test_a_later_stage_without_the_override_is_refused_by_lock_check_audit_deps_and_gate(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    route = ROUTES[name]
    root = later_stage_repo(tmp_path, monkeypatch, route)
    assert main(["lock", route.image, "--check"]) == EXIT_VIOLATION  # fresh, but judged
    checked = capsys.readouterr()
    assert "nvidia-nccl-cu13" in checked.out + checked.err
    assert main(["audit-deps", route.image, "--format", "json"]) == EXIT_VIOLATION
    errors = [f for f in findings(json.loads(capsys.readouterr().out)) if f["severity"] == "error"]
    moved = {(f["rule"], f["package"], f["before"], f["after"]) for f in errors}
    assert ("downgraded", *NCCL) in moved
    assert ("requirement", "nvidia-nccl-cu13", None, "2.29.7") in moved
    assert any(f["rule"] == "lockstep" and f["package"] == "cutlass-dsl" for f in errors)
    nccl = next(f for f in errors if f["rule"] == "downgraded")
    assert route.later_stage in str(nccl["where"])
    assert any(
        a.startswith("torch 2.13.0 requires nvidia-nccl-cu13==2.29.7") for a in nccl["askers"]
    )
    markdown = tmp_path / "gate.md"
    argv = ["gate", "--base", "main", "--repo", str(root), "--format", "markdown"]
    argv += ["--output", str(markdown)]
    assert main(argv) == EXIT_VIOLATION
    text = markdown.read_text()
    assert "nvidia-nccl-cu13" in text and "2.30.7" in text and "2.29.7" in text
    assert "recorded from a replica" in text and "stand-ins" in text


@pytest.mark.network
@pytest.mark.slow
@route_names
def test_lock_refuses_the_later_stage_naming_the_downgrade_its_askers_and_the_skew(
    name: str, tmp_path: Path, nightly_index: str
) -> None:
    """The fixture's origin, for real: uv against PyPI and the stand-in index (opt-in)."""
    route = ROUTES[name]
    root = copy_project(tmp_path, route)
    add_later_stage(root, route, lock=False)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_PROXY": "127.0.0.1,localhost",
           "no_proxy": "127.0.0.1,localhost"}  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "audit", "lock", route.image], cwd=root, env=env,
                          capture_output=True, text=True, check=False, timeout=900)  # fmt: skip
    assert done.returncode == EXIT_VIOLATION, done.stderr[-3000:]
    said = re.sub(r"\s+", " ", done.stderr)
    assert "downgraded: nvidia-nccl-cu13 2.30.7 -> 2.29.7 (installed by the base image)" in said
    assert "flashinfer-python 0.6.18.dev20260819+standin requires nvidia-nccl-cu13==2.29.7" in said
    assert "torch 2.13.0 requires nvidia-nccl-cu13==2.29.7" in said
    assert "nvidia-cutlass-dsl 4.8.1" in said and "nvidia-cutlass-dsl-libs-cu13 4.6.2" in said
    assert not (root / f"locks/{route.image}/{route.later_stage}-01.txt").exists()


def test_the_pull_request_that_records_a_route_passes_the_gate_unless_the_base_stays_broken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recording a route adds its whole base at once. The base holds flashinfer-python 0.6.17,
    which the policy forbids and v2 replaces: as in audit-deps, no finding of the base. A rule
    the last stage still breaks (here a floor on torch) stays an error of the base."""
    monkeypatch.setenv(commands.QUIET_ENV, "1")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    route = ROUTES["glm53-flash-vllm"]
    root = copy_project(tmp_path / "repo", route)
    locks = root / "locks"
    recorded = {p.relative_to(root).as_posix(): p.read_bytes() for p in locks.rglob("*.*")}
    for path in recorded:
        (root / path).unlink()
    git(root, "init", "-q", "-b", "main")
    commit_files(root, {}, "main: the route, not audited")
    git(root, "checkout", "-q", "-b", "pr")
    commit_files(root, recorded, "pr: record it")
    markdown = tmp_path / "gate.md"
    argv = ["gate", "--base", "main", "--repo", str(root), "--markdown", str(markdown)]
    monkeypatch.chdir(root)
    assert main(argv) == EXIT_OK, markdown.read_text()[-3000:]
    text = markdown.read_text()
    assert "forbidden" not in text and "stand-ins (on no reachable index)" in text
    toml = root / "images" / route.image / "image.toml"
    nccl = 'require = ["nvidia-nccl-cu13>=2.30"'
    floor = toml.read_text().replace(nccl, f'{nccl}, "torch>=2.14"')
    commit_files(root, {toml.relative_to(root).as_posix(): floor.encode()}, "pr: a floor")
    assert main(argv) == EXIT_VIOLATION
    (row,) = [line for line in markdown.read_text().splitlines() if "| requirement |" in line]
    assert "`torch` | – → 2.13.0 | base image | torch 2.13.0 breaks the policy" in row
