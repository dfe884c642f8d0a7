"""An ``init`` repository's CI, replayed: the workflow's ``run:`` lines in order, job by job,
with the workflow's environment, in a fresh virtual environment that installs layer-audit by the
spec ``init`` wrote (a wheel built from this checkout). The first pull request (the scaffold
itself) passes every job; a second that moves a pin down fails the gate with exit 1.

Also: the local pre-commit hooks without layer-audit on PATH (exit 3 and what to install, never
127), ``init`` into a read-only folder (exit 3, nothing written), and where the default spec
comes from.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from audit.cli.main import main
from audit.errors import EXIT_ENVIRONMENT, EXIT_OK, EXIT_VIOLATION
from audit.lock.plan import resolver_label
from audit.project.self_spec import _from_local
from audit.project.sources import DirectorySource
from audit.recipe.parse import load_recipe
from tests.support.gitrepo import git
from tests.support.project import lock_body, write_fresh_locks
from tests.support.release import tagged_sources

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = ".github/workflows/dependency-gate.yml"
# What GitHub fills in for a pull request against main (the only expressions the env uses).
EXPRESSIONS = {
    "${{ github.base_ref || github.event.merge_group.base_ref }}": "main",
    "${{ github.event.pull_request.number }}": "1",
}
EXAMPLE_PINS = {
    "certifi": "2026.10.19.post1",
    "charset-normalizer": "3.5.3",
    "idna": "3.20",
    "urllib3": "2.8.0",
}


def run(cwd: Path, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=900
    )


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A wheel built from these sources, and the ``bin/`` of an empty venv (setup-python)."""
    tmp = tmp_path_factory.mktemp("runner")
    tagged_sources(tmp)  # tmp/src: the version comes from a tag, as in a release
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", "dist", "./src"]
    built = run(tmp, pip_wheel, clean)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp / "dist").glob("layer_audit-*.whl")
    made = run(tmp, [sys.executable, "-m", "venv", str(tmp / "venv")], clean)
    assert made.returncode == 0, made.stderr
    return wheel, tmp / "venv" / "bin"


def expand(value: object) -> str:
    """An ``env:`` value as GitHub would give it; an expression the test does not know fails."""
    text = str(value)
    for expression, result in EXPRESSIONS.items():
        text = text.replace(expression, result)
    assert "${{" not in text, f"unknown expression in the workflow's env: {text}"
    return text


def replay(repo: Path, bin_dir: Path) -> dict[str, int]:
    """Each job's ``run:`` steps in order, as the runner runs them (``bash -e``): a failed step
    ends the job except for steps that run ``always()``; the job's code is its first failure."""
    workflow: dict[str, Any] = yaml.safe_load((repo / WORKFLOW).read_text(encoding="utf-8"))
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    base |= {"PATH": path, "GITHUB_STEP_SUMMARY": ""}
    base |= {key: expand(value) for key, value in workflow.get("env", {}).items()}
    codes: dict[str, int] = {}
    for name, job in workflow["jobs"].items():
        code = 0
        for step in job["steps"]:
            if "run" not in step or (code and "always()" not in str(step.get("if", ""))):
                continue
            env = base | {key: expand(value) for key, value in step.get("env", {}).items()}
            done = run(repo, ["bash", "-e", "-c", step["run"]], env)
            if done.returncode and not code:
                code = done.returncode
                print(f"{name}: {step['name']}: exit {code}\n{done.stdout[-4000:]}{done.stderr}")
        codes[name] = code
    return codes


@pytest.fixture
def fresh(tmp_path: Path, runner: tuple[Path, Path]) -> Iterator[Path]:
    """A repository whose main holds a README; branch ``pr`` adds what ``init`` wrote."""
    wheel, _ = runner
    repo = tmp_path / "images-repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("our images\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "start")
    git(repo, "update-ref", "refs/remotes/origin/main", "main")
    git(repo, "checkout", "-q", "-b", "pr")
    assert main(["init", str(repo), "--spec", str(wheel)]) == EXIT_OK
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "layer-audit init")
    yield repo


def test_the_first_pull_request_passes_and_a_downgrade_fails_exit_1(
    fresh: Path, runner: tuple[Path, Path]
) -> None:
    _, bin_dir = runner
    assert replay(fresh, bin_dir) == {"gate": 0, "lock-check": 0, "audit-deps": 0}
    report = (fresh / "gate-report/gate.md").read_text(encoding="utf-8")
    assert "PASS" in report and "Not audited" not in report  # the example is audited
    assert (fresh / "gate-report/pr-number").read_text() == "1\n"
    # the first pull request merged; the second moves requests down and re-locks
    git(fresh, "update-ref", "refs/remotes/origin/main", "HEAD")
    requirements = fresh / "images/example/requirements/v1.in"
    requirements.write_text(requirements.read_text().replace("requests>=2.31", "requests==2.31.0"))
    recipe = load_recipe(DirectorySource(fresh), "example")
    body = lock_body({**EXAMPLE_PINS, "requests": "2.31.0"})  # as `lock` writes it
    write_fresh_locks(fresh, recipe, {"v1": body}, resolver=resolver_label(recipe))
    git(fresh, "add", "-A")
    git(fresh, "commit", "-q", "-m", "pin requests 2.31.0")
    assert replay(fresh, bin_dir) == {"gate": EXIT_VIOLATION, "lock-check": 0, "audit-deps": 0}
    report = (fresh / "gate-report/gate.md").read_text(encoding="utf-8")
    assert "FAIL" in report and "downgraded" in report and "2.34.2 → 2.31.0" in report


def hook_entries(repo: Path) -> list[str]:
    config = yaml.safe_load((repo / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    return [hook["entry"] for hook in config["repos"][0]["hooks"]]


def test_local_hooks_say_what_to_install_when_layer_audit_is_missing(
    fresh: Path, runner: tuple[Path, Path]
) -> None:
    wheel, bin_dir = runner
    bare = {"PATH": "/usr/bin:/bin", "HOME": str(fresh)}
    for entry in hook_entries(fresh):
        done = run(fresh, ["bash", "-c", entry], bare)
        assert done.returncode == EXIT_ENVIRONMENT, done.stderr
        assert "layer-audit is not on PATH" in done.stderr and str(wheel) in done.stderr
    installed = run(fresh, [str(bin_dir / "python"), "-m", "pip", "install", "-q", str(wheel)],
                    dict(os.environ))  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    with_tool = {**bare, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    for entry in hook_entries(fresh):
        done = run(fresh, ["bash", "-c", entry], with_tool)
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    """A folder nobody may write into: a read-only bind mount as root, mode 555 otherwise."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    mounted = subprocess.run(["mount", "--bind", str(folder), str(folder)], check=False)
    remounted = subprocess.run(
        ["mount", "-o", "remount,ro,bind", str(folder)], check=False, capture_output=True
    )
    if mounted.returncode or remounted.returncode:
        subprocess.run(["umount", str(folder)], check=False)
        pytest.skip("cannot make a read-only folder here (no bind mounts)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_init_into_a_read_only_folder_is_exit_3_and_writes_nothing(
    read_only: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", str(read_only), "--spec", "layer-audit==0.1.0"]) == EXIT_ENVIRONMENT
    err = capsys.readouterr().err
    assert "not writable" in err and "Traceback" not in err
    assert list(read_only.iterdir()) == []


def test_the_default_spec_is_the_public_origin_at_its_commit(tmp_path: Path) -> None:
    checkout = tmp_path / "layer-audit"
    checkout.mkdir()
    git(checkout, "init", "-q")
    git(
        checkout,
        "remote",
        "add",
        "origin",
        "https://ci-token:s3cr3t@git.example.com/ml/layer-audit.git",
    )
    (checkout / "x").write_text("x")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", "x")
    commit = git(checkout, "rev-parse", "HEAD")
    found = _from_local(str(checkout))
    assert found.portable
    assert found.spec == f"layer-audit @ git+https://git.example.com/ml/layer-audit@{commit}"
    alone = _from_local(str(tmp_path))  # no git, no remote: a path, said to be local only
    assert alone.spec == str(tmp_path) and not alone.portable
