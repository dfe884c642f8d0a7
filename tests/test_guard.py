"""The build guard, run for real: a ``_guard/`` folder written by audit.render.guard, a real
virtual environment changed by real pip between "layers", the guard run with that venv's Python.

No Docker: the venv stands in for the image. Each test walks layers the way a build does and
checks exit codes, the violation marker line and the trail files.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import venv
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from audit.errors import RecipeError
from audit.history.snapshot import Environment, canonical_name, parse_snapshot
from audit.lock.files import BaseRecord, render_base
from audit.policy.model import LockstepGroup, Policy, Waiver
from audit.recipe.model import DEFAULT_LATEST_PATTERN, DEFAULT_TAG_PATTERN, PipLayer, Recipe, Stage
from audit.render.guard import GUARD_DIR, PackagingCopy, check_vendored_python
from audit.render.write import write_guard_context
from tests.support.fixtures import Wheelhouse

VIOLATION = "LAYER-AUDIT-VIOLATION "


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str

    @property
    def violations(self) -> list[dict[str, object]]:
        return [
            json.loads(line[len(VIOLATION) :])
            for line in self.stdout.splitlines()
            if line.startswith(VIOLATION)
        ]


def make_recipe(python: Path, policy: Policy) -> Recipe:
    return Recipe(
        name="g",
        directory=Path("images/g"),
        base="layer-audit/base:bookworm-amd64",
        base_digest=None,
        platform="linux/amd64",
        cuda="cpu",
        interpreters=(str(python),),
        repository="local/g",
        tag_pattern=DEFAULT_TAG_PATTERN,
        latest_tag_pattern=DEFAULT_LATEST_PATTERN,
        index_url="https://pypi.org/simple",
        indexes=(),
        stages=(Stage("v1", (PipLayer("requirements/v1.in"),)),),
        policy=policy,
    )


class Image:
    """A venv standing in for an image: pip installs change it, the guard audits it."""

    def __init__(self, root: Path, wheels: Wheelhouse) -> None:
        self.root = root
        self.wheels = wheels
        self.venv = root / "venv"
        venv.EnvBuilder(with_pip=False).create(self.venv)
        self.python = self.venv / "bin" / "python"
        self.trail = root / "trail"
        self.context = root / "build" / "g"

    def pip(self, *requirements: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
        subprocess.run(
            [sys.executable, "-m", "pip", "--isolated", "--python", str(self.python), "install",
             "--quiet", "--no-index", "--find-links", str(self.wheels.path), "--no-deps",
             *requirements],
            check=True, env=env, capture_output=True,
        )  # fmt: skip

    def snapshot_bytes(self) -> bytes:
        script = self.context / GUARD_DIR / "snapshot.py"
        return subprocess.run(
            [str(self.python), str(script)], check=True, capture_output=True
        ).stdout

    def record_base(self) -> None:
        envs = parse_snapshot(self.snapshot_bytes(), "base")
        record = BaseRecord("layer-audit/base:bookworm-amd64", "sha256:00", None, envs)
        path = self.root / "locks" / "g" / "base.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_base(record))

    def write_context(self, policy: Policy | None = None) -> None:
        recipe = make_recipe(self.python, policy or Policy())
        write_guard_context(self.root, recipe, self.context)

    def lock(self, name: str, *pins: str) -> Path:
        path = self.root / f"{name}.txt"
        body = "".join(f"{pin} \\\n    --hash=sha256:{'0' * 64}\n" for pin in pins)
        path.write_text("# a pip-compile lock\n" + body)
        return path

    def guard(self, step: str, lock: Path | None = None, today: str = "2026-06-01") -> Run:
        argv = [str(self.python), str(self.context / GUARD_DIR / "guard.py"), "--step", step,
                "--trail", str(self.trail), "--today", today]  # fmt: skip
        if lock is not None:
            argv += ["--lock", str(lock)]
        env = {"PATH": "/usr/bin"}  # nothing of the host's Python set-up leaks in
        done = subprocess.run(argv, check=False, capture_output=True, text=True, env=env)
        return Run(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def image(tmp_path: Path, wheelhouse: Wheelhouse) -> Image:
    wheelhouse("alpha", "1.0")
    wheelhouse("alpha", "0.9")
    wheelhouse("nccl-like", "2.30.0")
    wheelhouse("nccl-like", "2.29.7")
    image = Image(tmp_path, wheelhouse)
    image.write_context()
    image.record_base()
    image.write_context()  # now with base.json
    return image


@pytest.mark.slow
def test_a_clean_layer_passes_and_leaves_its_snapshot_and_findings(image: Image) -> None:
    image.pip("alpha==1.0")
    run = image.guard("v1-01", image.lock("v1-01", "alpha==1.0"))
    assert run.code == 0, run.stdout + run.stderr
    assert "v1-01 (vs base)" in run.stdout
    envs = parse_snapshot((image.trail / "v1-01.snapshot.json").read_bytes(), "trail")
    assert "alpha" in envs[0].winners()
    findings = json.loads((image.trail / "v1-01.findings.json").read_text())
    assert findings["compared_with"] == "base"
    assert [(f["rule"], f["package"]) for f in findings["findings"]] == [("added", "alpha")]


@pytest.mark.slow
def test_a_downgrade_in_a_later_layer_fails_naming_package_and_both_versions(
    image: Image,
) -> None:
    image.pip("nccl-like==2.30.0")
    assert image.guard("v1-01", image.lock("v1-01", "nccl-like==2.30.0")).code == 0
    image.pip("nccl-like==2.29.7")
    run = image.guard("v2-01", image.lock("v2-01", "nccl-like==2.29.7"))
    assert run.code == 1
    assert "v2-01 (vs v1-01)" in run.stdout
    (violation,) = run.violations
    assert violation["rule"] == "downgraded"
    assert (violation["package"], violation["before"], violation["after"]) == (
        "nccl-like", "2.30.0", "2.29.7",
    )  # fmt: skip
    assert violation["step"] == "v2-01"
    assert "[[policy.waiver]]" in str(violation["hint"])


@pytest.mark.slow
def test_the_previous_layer_is_the_latest_earlier_snapshot_in_build_order(image: Image) -> None:
    image.pip("alpha==1.0")
    assert image.guard("v2-01").code == 0
    image.pip("alpha==0.9")
    assert image.guard("v10-02").violations[0]["before"] == "1.0"


@pytest.mark.slow
def test_the_lock_must_be_installed_exactly(image: Image) -> None:
    image.pip("alpha==1.0")
    run = image.guard("v1-01", image.lock("v1-01", "alpha==1.0", "nccl-like==2.30.0"))
    assert run.code == 1
    (violation,) = run.violations
    assert violation["rule"] == "lock-mismatch"
    assert violation["package"] == "nccl-like"


@pytest.mark.slow
def test_lock_pins_for_other_platforms_are_skipped(image: Image) -> None:
    image.pip("alpha==1.0")
    lock = image.lock("v1-01", "alpha==1.0", 'nccl-like==2.30.0 ; sys_platform == "win32"')
    assert image.guard("v1-01", lock).code == 0


@pytest.mark.slow
def test_a_waiver_allows_the_change_until_it_expires(image: Image) -> None:
    waiver = Waiver("alpha", "1.0", "0.9", "0.9 is the tested one", dt.date(2026, 12, 31))
    image.write_context(Policy(waivers=(waiver,)))
    image.pip("alpha==1.0")
    assert image.guard("v1-01").code == 0
    image.pip("alpha==0.9")
    assert image.guard("v2-01", today="2026-06-01").code == 0
    expired = image.guard("v2-01", today="2027-01-01")
    assert expired.code == 1
    assert "waiver-expired" in {v["rule"] for v in expired.violations}


@pytest.mark.slow
def test_a_lockstep_skew_fails(image: Image, wheelhouse: Wheelhouse) -> None:
    wheelhouse("cutlass-dsl", "4.3.0")
    wheelhouse("cutlass-dsl-libs-base", "4.3.0")
    wheelhouse("cutlass-dsl-libs-base", "4.2.1")
    group = LockstepGroup("cutlass-dsl", ("cutlass-dsl", "cutlass-dsl-libs-*"))
    image.write_context(Policy(lockstep=(group,), downgrade="allow"))
    image.pip("cutlass-dsl==4.3.0", "cutlass-dsl-libs-base==4.3.0")
    assert image.guard("v1-01").code == 0
    image.pip("cutlass-dsl-libs-base==4.2.1")
    run = image.guard("v2-01")
    assert run.code == 1
    assert [v["rule"] for v in run.violations] == ["lockstep"]
    assert "cutlass-dsl-libs-base 4.2.1" in str(run.violations[0]["message"])
    (line,) = [line for line in run.stdout.splitlines() if line.startswith("  error   lockstep")]
    assert line.endswith(
        "lockstep group cutlass-dsl: members must share one version: "
        "cutlass-dsl 4.3.0, cutlass-dsl-libs-base 4.2.1"
    )
    assert "(none)" not in line


@pytest.mark.slow
def test_a_cpu_torch_names_its_versions_in_every_summary_line(
    image: Image, wheelhouse: Wheelhouse
) -> None:
    """The field's variant: torch 2.9.0+cu130 replaced by 2.9.0+cpu. The cuda-suffix line
    used to read "torch (none) -> 2.9.0+cpu"."""
    wheelhouse("torch", "2.9.0+cu130")
    wheelhouse("torch", "2.9.0+cpu")
    image.write_context(Policy(cuda="cu130"))
    image.pip("torch==2.9.0+cu130")
    assert image.guard("v1-01").code == 0
    image.pip("torch==2.9.0+cpu")
    run = image.guard("v2-01")
    lines = [
        line.split(maxsplit=2) for line in run.stdout.splitlines() if line.startswith("  error")
    ]
    assert [(rule, text) for _, rule, text in lines] == [
        ("variant", "torch 2.9.0+cu130 -> 2.9.0+cpu"),
        ("cuda-suffix", "torch 2.9.0+cpu: a CPU build in an image built for cu130"),
    ]


@pytest.mark.slow
def test_a_base_that_changed_under_its_tag_is_caught_at_the_first_layer(image: Image) -> None:
    image.pip("alpha==1.0")
    image.record_base()  # the recorded base has alpha 1.0 ...
    image.write_context()
    image.pip("alpha==0.9")  # ... but the image the build starts from has 0.9
    run = image.guard("v1-01")
    assert run.code == 1
    assert (run.violations[0]["before"], run.violations[0]["after"]) == ("1.0", "0.9")


def test_without_a_base_snapshot_the_guard_reports_bad_input(image: Image) -> None:
    (image.root / "locks" / "g" / "base.json").unlink()
    image.write_context()
    run = image.guard("v1-01")
    assert run.code == 2
    assert "LAYER-AUDIT-GUARD-ERROR v1-01" in run.stderr
    assert "--record-base" in run.stderr


@pytest.mark.slow
def test_a_tampered_trail_snapshot_is_refused(image: Image) -> None:
    image.pip("alpha==1.0")
    assert image.guard("v1-01").code == 0
    path = image.trail / "v1-01.snapshot.json"
    path.write_text(path.read_text().replace('"1.0"', '"1.1"'))
    run = image.guard("v2-01")
    assert run.code == 2
    assert "digest" in run.stderr


def test_the_guard_context_is_deterministic_and_drops_stale_files(image: Image) -> None:
    folder = image.context / GUARD_DIR
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}
    (folder / "lib" / "stale.py").write_text("x = 1\n")
    image.write_context()
    after = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}
    assert after == before
    assert (folder / "lib" / "packaging" / "version.py").is_file()
    vendored = folder / "lib" / "audit"
    assert {p.name for p in (vendored / "policy").iterdir()} >= {"__init__.py", "verdict.py"}
    assert {p.name for p in (vendored / "history").iterdir()} >= {"diff.py", "snapshot.py"}


def test_guard_config_holds_image_interpreters_and_policy(image: Image) -> None:
    image.write_context(replace(Policy(), forbidden=("chardet",)))
    config = json.loads((image.context / GUARD_DIR / "guard.json").read_text())
    assert config["image"] == "g"
    assert config["interpreters"] == [str(image.python)]
    assert config["policy"]["forbidden"] == ["chardet"]


def base_json_of(python: str) -> bytes:
    env = Environment("/opt/venv/bin/python", python, {}, ("/opt/venv/lib",), ())
    record = BaseRecord("layer-audit/base:bullseye-amd64", "sha256:00", None, (env,))
    return render_base(record).encode()


def test_a_vendored_packaging_the_base_python_cannot_run_fails_the_render() -> None:
    recipe = make_recipe(Path("/opt/venv/bin/python"), Policy())
    base = base_json_of("3.9.2")
    check_vendored_python(recipe, base, PackagingCopy("26.3", ">=3.9", {}), "locks/g/base.json")
    with pytest.raises(RecipeError) as caught:
        copy = PackagingCopy("26.4", ">=3.10", {})
        check_vendored_python(recipe, base, copy, "locks/g/base.json")
    message = str(caught.value)
    assert "image.base" in message and "3.9.2" in message and ">=3.10" in message


def test_the_guard_parses_its_own_command_line(image: Image) -> None:
    script = str(image.context / GUARD_DIR / "guard.py")
    python = str(image.python)
    missing = subprocess.run([python, script, "--step", "v1-01"], check=False, capture_output=True)
    assert missing.returncode == 2 and b"missing --trail" in missing.stderr
    unknown = subprocess.run([python, script, "--stpe=v1-01"], check=False, capture_output=True)
    assert unknown.returncode == 2 and b"--stpe=v1-01" in unknown.stderr
    run = image.guard("v1-01", today="2026-13-01")
    assert run.code == 2 and "YYYY-MM-DD" in run.stderr


@pytest.mark.parametrize(
    "spelling",
    ["Foo_Bar", "foo.bar", "FOO--bar__baz", "a-_.b", "nvidia-cutlass-dsl-libs-*", "x", "Ä_b.C"],
)
def test_the_pep503_rule_of_the_pure_core_is_packagings(spelling: str) -> None:
    assert canonical_name(spelling) == canonicalize_name(spelling)


def guard_imports(image: Image, step: str, lock: Path) -> tuple[int, set[str]]:
    """Exit code and every module the guard imported (``-X importtime``)."""
    argv = [str(image.python), "-X", "importtime", str(image.context / GUARD_DIR / "guard.py"),
            "--step", step, "--trail", str(image.trail), "--lock", str(lock)]  # fmt: skip
    done = subprocess.run(argv, check=False, capture_output=True, text=True, env={})
    lines = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
    return done.returncode, {line.rsplit("|", 1)[1].strip() for line in lines}


@pytest.mark.slow
def test_plain_pins_and_unmoved_floors_spare_the_pep508_parser(image: Image) -> None:
    image.write_context(Policy(requirements=("nccl-like>=2.30",)))
    image.pip("alpha==1.0")
    code, modules = guard_imports(image, "v1-01", image.lock("v1-01", "alpha==1.0"))
    assert code == 0
    assert {"packaging.utils", "packaging.tags", "packaging.requirements"}.isdisjoint(modules)
    image.pip("nccl-like==2.29.7")  # the floor's package moves: now it is parsed and checked
    code, modules = guard_imports(image, "v2-01", image.lock("v2-01", "nccl-like==2.29.7"))
    assert code == 1
    assert "packaging.requirements" in modules


@pytest.mark.slow
def test_the_guard_applies_a_preset_and_names_it(image: Image, wheelhouse: Wheelhouse) -> None:
    """The preset travels in guard.json and the vendored core: the field's cutlass-dsl skew
    (4.4.0 beside libs 4.8.1: only upgrades) fails the layer, naming the preset rule."""
    from audit.policy.presets import merge

    for version in ("4.4.0", "4.8.1"):
        wheelhouse("nvidia-cutlass-dsl-libs-base", version)
    wheelhouse("nvidia-cutlass-dsl", "4.4.0")
    preset = merge(Policy(cuda="cu130"), "cuda-ml", frozenset(), frozenset())
    image.write_context(preset)
    image.pip("nvidia-cutlass-dsl==4.4.0", "nvidia-cutlass-dsl-libs-base==4.4.0")
    assert image.guard("v1-01").code == 0
    image.pip("nvidia-cutlass-dsl-libs-base==4.8.1")
    run = image.guard("v2-01")
    assert run.code == 1
    (violation,) = run.violations
    assert str(violation["message"]).startswith("preset cuda-ml: lockstep cutlass-dsl: ")
    assert "nvidia-cutlass-dsl-libs-base 4.8.1" in str(violation["message"])
