"""``lock`` end to end with a real pip-tools (on the host) against a local index of tiny wheels."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from audit.cli import main as cli
from audit.history.snapshot import Distribution
from audit.host import atomic
from audit.host import process as commands
from audit.lock import stamp as lock_stamp
from audit.lock.files import parse_lock
from tests.support.cli import REPO, run_lock, spawn_audit
from tests.support.fixtures import Wheelhouse
from tests.support.pkgindex import serve_index
from tests.support.project import ProjectSpec, base_record, pip_recipe_toml
from tests.support.project import write_project as write_project_files


def write_project(
    root: Path, index: str, v1: str, v2: str, base: tuple[tuple[str, str], ...] = ()
) -> Path:
    """A project with recipe ``t`` and a base record matching this host's Python."""
    dists = (Distribution(name, version, requires_dist=()) for name, version in base)
    spec = ProjectSpec(
        "t",
        pip_recipe_toml(["v1", "v2"], index_url=index),
        {"v1.in": v1, "v2.in": v2},
        base_record(*dists, python=platform.python_version()),
    )
    return write_project_files(root, spec)


@pytest.fixture
def wheels(wheelhouse: Wheelhouse) -> Wheelhouse:
    wheelhouse("alpha", "1.0")
    wheelhouse("alpha", "2.0")
    wheelhouse("beta", "1.0", requires=["alpha>=2"])
    wheelhouse("gamma", "1.0", requires=["alpha<2"])
    wheelhouse("delta", "1.0", requires=["alpha"])
    return wheelhouse


@pytest.fixture
def project(
    tmp_path: Path, wheels: Wheelhouse, local_index: str, monkeypatch: pytest.MonkeyPatch
) -> Path:
    root = write_project(tmp_path / "project", local_index, "beta\n", "delta\n")
    monkeypatch.chdir(root)
    return root


def lock_bytes(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / "locks" / "t").glob("v*.txt"))}


@pytest.mark.slow
def test_a_clean_layered_lock_then_nothing_recompiled(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_lock("t", "--host") == 0
    v1 = parse_lock((project / "locks/t/v1-01.txt").read_bytes(), "v1")
    v2 = parse_lock((project / "locks/t/v2-01.txt").read_bytes(), "v2")
    assert {n: p.version for n, p in v1.pins.items()} == {"alpha": "2.0", "beta": "1.0"}
    # v2 installs delta; alpha 2.0 (installed by v1) satisfies it and stays: not re-pinned
    assert {n: p.version for n, p in v2.pins.items()} == {"delta": "1.0"}
    assert all(pin.hashes for pin in v2.pins.values())
    text = (project / "locks/t/v2-01.txt").read_text()
    assert "127.0.0.1" not in text and str(project) not in text and "/tmp" not in text

    def no_commands(*args: object, **kwargs: object) -> None:
        raise AssertionError("an unchanged run must not compile")

    monkeypatch.setattr(commands, "run", no_commands)
    # the compiling run looked again and stamped what it saw: the next one needs no parser
    answer = lock_stamp.fresh_answer(str(project), "t", None, check=False)
    assert answer == "all 2 locks are fresh: nothing to compile"
    assert run_lock("t", "--host") == 0
    assert "nothing to compile" in capsys.readouterr().out
    assert run_lock("t", "--check") == 0


QUICK_RUN = """\
import sys
before = set(sys.modules)
from audit.cli import main as cli
code = cli.main(["lock", *sys.argv[1:]])
loaded = {name.split(".")[0] for name in set(sys.modules) - before}
print("heavy:", sorted(loaded & {"rich", "docker", "jinja2", "filelock", "certifi"}))
sys.exit(code)
"""


@pytest.mark.slow
def test_an_unchanged_rerun_takes_no_file_lock_and_loads_nothing_heavy(project: Path) -> None:
    assert run_lock("t", "--host") == 0
    (project / "locks/t/.lock").unlink()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    for argv in (["t", "--host"], ["t", "--check"]):
        done = subprocess.run(
            [sys.executable, "-c", QUICK_RUN, *argv],
            cwd=project, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "all 2 locks are fresh" in done.stdout
        assert "heavy: []" in done.stdout
    assert not (project / "locks/t/.lock").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda text: text.replace("alpha==2.0", "alpha==1.0"), "edited by hand"),
        (lambda text: text[: text.rindex("# end of")], "truncated"),
    ],
)
def test_the_quick_look_still_refuses_a_damaged_lock(
    project: Path, capsys: pytest.CaptureFixture[str], damage: Any, problem: str
) -> None:
    assert run_lock("t", "--host") == 0
    path = project / "locks/t/v1-01.txt"
    path.write_text(damage(path.read_text()))
    capsys.readouterr()
    assert run_lock("t", "--host") == 2
    assert f"locks/t/v1-01.txt: {problem}" in capsys.readouterr().err


@pytest.mark.slow
def test_a_layer_that_needs_a_lower_version_fails_with_the_clear_message(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "images/t/requirements/v2.in").write_text("gamma\n")
    assert run_lock("t", "--host") == 1
    err = capsys.readouterr().err
    assert "v2 layer 1 (requirements/v2.in): 1 violation, nothing written" in err
    assert "downgraded: alpha 2.0 -> 1.0 (installed by v1 layer 1 (requirements/v1.in))" in err
    assert "gamma 1.0 requires alpha<2" in err
    assert "Traceback" not in err
    assert not (project / "locks/t/v2-01.txt").exists()
    # why is kept, typed, beside the missing lock: audit-deps (and the gate) show it
    record = json.loads((project / "locks/t/v2-01.refused.json").read_text())
    assert [(f["rule"], f["package"]) for f in record["findings"]] == [("downgraded", "alpha")]
    assert cli.main(["audit-deps", "t", "--format", "json"]) == 1
    shown = json.loads(capsys.readouterr().out)
    rules = [
        f["rule"] for s in shown["sections"] for f in s["findings"] if f["severity"] == "error"
    ]
    assert sorted(rules) == ["downgraded", "missing-lock"]
    (project / "images/t/requirements/v2.in").write_text("delta\n")
    assert run_lock("t", "--host") == 0
    assert not (project / "locks/t/v2-01.refused.json").exists()  # locked: the record goes


@pytest.mark.slow
def test_an_installed_package_that_must_move_up_is_upgraded_and_pinned(
    tmp_path: Path,
    wheels: Wheelhouse,
    local_index: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = write_project(tmp_path, local_index, "beta\n", "delta\n", base=(("alpha", "1.0"),))
    monkeypatch.chdir(root)
    # beta needs alpha>=2: pip install would upgrade the base's alpha 1.0, and so does lock
    assert run_lock("t", "--host") == 0
    v1 = parse_lock((root / "locks/t/v1-01.txt").read_bytes(), "v1")
    assert {n: p.version for n, p in v1.pins.items()} == {"alpha": "2.0", "beta": "1.0"}
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.slow
def test_a_one_line_edit_hashes_no_installed_pin_and_reads_only_new_pins_metadata(
    tmp_path: Path, wheels: Wheelhouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    # alpha 2.0 (installed by v1) also has a wheel no resolution for this host picks: only
    # hashing every file of alpha 2.0 would fetch it
    wheels("alpha", "2.0", tag="cp39-cp39-win_amd64")
    wheels("epsilon", "1.0")
    served: list[str] = []
    with serve_index(wheels.path, served=served) as index:
        root = write_project(tmp_path / "project", index, "beta\n", "delta\n")
        monkeypatch.chdir(root)
        assert run_lock("t", "--host") == 0
        assert any("win_amd64" in name for name in served)  # v1 pins alpha: every file hashed
        (root / "images/t/requirements/v2.in").write_text("delta\nepsilon\n")
        served.clear()
        assert run_lock("t", "--host") == 0
    v2 = parse_lock((root / "locks/t/v2-01.txt").read_bytes(), "v2")
    assert {n: p.version for n, p in v2.pins.items()} == {"delta": "1.0", "epsilon": "1.0"}
    assert all(pin.hashes for pin in v2.pins.values())
    assert not [name for name in served if "win_amd64" in name]
    # delta did not move: its metadata comes from the previous lock, pip reads epsilon's only
    log = (root / "build/.layer-audit/lock-logs/t/v2-01.log").read_text()
    assert "Would install epsilon-1.0\n" in log
    assert v2.metadata["delta"].requires_dist == ("alpha",)


@pytest.mark.slow
def test_an_earlier_lock_that_comes_out_the_same_leaves_later_layers_uncompiled(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_lock("t", "--host") == 0
    before = lock_bytes(project)
    (project / "images/t/requirements/v1.in").write_text("# what v2 builds on\nbeta\n")
    capsys.readouterr()
    assert run_lock("t", "--host", "--format", "json") == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["written"] == ["locks/t/v1-01.txt"] and summary["fresh"] == 1
    after = lock_bytes(project)
    assert after["v2-01.txt"] == before["v2-01.txt"]  # v1's body is the same: v2 was kept
    assert after["v1-01.txt"] != before["v1-01.txt"]  # its header names the new input
    assert run_lock("t", "--check") == 0


def test_an_undeclared_index_is_refused(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    v1 = project / "images/t/requirements/v1.in"
    v1.write_text("--extra-index-url http://127.0.0.1:9/simple/\nbeta\n")
    assert run_lock("t", "--host") == 2
    err = capsys.readouterr().err
    assert "requirements/v1.in" in err and "127.0.0.1:9" in err
    assert not (project / "locks/t/v1-01.txt").exists()


@pytest.mark.slow
def test_check_names_an_edited_requirements_file(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_lock("t", "--host") == 0
    (project / "images/t/requirements/v2.in").write_text("delta>=1\n")
    capsys.readouterr()
    assert run_lock("t", "--check") == 1
    out = capsys.readouterr().out
    assert "stale: locks/t/v2-01.txt" in out and "inputs changed: requirements/v2.in" in out
    assert "v1-01" not in out


def test_a_host_that_does_not_match_is_refused(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    toml = project / "images/t/image.toml"
    toml.write_text(toml.read_text().replace("linux/amd64", "linux/s390x"))
    assert run_lock("t", "--host") == 2
    assert "--host: cannot compile on this machine" in capsys.readouterr().err


@pytest.mark.slow
def test_ambient_pip_configuration_changes_nothing(
    project: Path, tmp_path: Path, wheels: Wheelhouse
) -> None:
    assert run_lock("t", "--host") == 0
    clean = lock_bytes(project)
    for path in (project / "locks/t").glob("v*.txt"):
        path.unlink()
    other = Wheelhouse(tmp_path / "other")
    other("alpha", "9.0")
    other("beta", "9.0")
    links = Wheelhouse(tmp_path / "links")
    links("alpha", "3.0")
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("alpha==1.0\n")
    with serve_index(other.path) as other_index:
        config = tmp_path / "pip.conf"
        config.write_text(
            f"[global]\nindex-url = {other_index}\nconstraint = {constraints}\n"
            f"find-links = {links.path}\n"
        )
        ambient = {"PIP_FIND_LINKS": str(links.path), "PIP_CONFIG_FILE": str(config)}
        ambient |= {"PIP_INDEX_URL": other_index, "PIP_CONSTRAINT": str(constraints)}
        process = spawn_audit(project, "lock", "t", "--host", **ambient)
        _, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    assert lock_bytes(project) == clean


@pytest.mark.slow
def test_a_run_killed_mid_write_leaves_the_old_lock_intact(project: Path, tmp_path: Path) -> None:
    assert run_lock("t", "--host") == 0
    before = lock_bytes(project)
    (project / "images/t/requirements/v1.in").write_text("beta\ndelta\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    process = spawn_audit(project, "lock", "t", "--host", TMPDIR=str(scratch))
    deadline = time.monotonic() + 120
    while not any(scratch.glob("layer-audit-lock-*/driver.py")) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # well inside pip-compile, before the rename
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    with contextlib.suppress(ProcessLookupError):  # the orphaned pip-compile, if still there
        os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == -signal.SIGKILL
    assert lock_bytes(project) == before
    for data in before.values():
        parse_lock(data, "after the kill")
    assert run_lock("t", "--check") == 1  # the edit is still pending, and seen
    assert run_lock("t", "--host") == 0  # the file lock died with the killed run


def waiting_for_a_file_lock(pid: int) -> bool:
    """True while ``pid`` sleeps between two tries of a file lock.

    Before it compiles, ``lock`` sleeps nowhere else: a run seen here has looked at the
    locks, found them stale, and queued for ``locks/<image>/.lock``.
    """
    try:
        return Path(f"/proc/{pid}/wchan").read_text() in {"hrtimer_nanosleep", "do_nanosleep"}
    except OSError:
        return False


@pytest.mark.slow
def test_two_concurrent_runs_produce_one_valid_lock(project: Path) -> None:
    """Both runs find the locks missing and queue for the image's file lock, held here until
    both wait (no race left to chance); the first to get it compiles, the other then finds
    every lock fresh."""
    with atomic.exclusive(project / "locks/t/.lock"):
        runs = [spawn_audit(project, "lock", "t", "--host") for _ in range(2)]
        queued: set[int] = set()
        deadline = time.monotonic() + 120
        while len(queued) < len(runs):
            assert time.monotonic() < deadline, "the runs never queued for the file lock"
            assert all(run.poll() is None for run in runs), [r.communicate() for r in runs]
            queued |= {run.pid for run in runs if waiting_for_a_file_lock(run.pid)}
            time.sleep(0.005)
    results = [run.communicate(timeout=300) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], results
    locks = lock_bytes(project)
    assert sorted(locks) == ["v1-01.txt", "v2-01.txt"]
    for name, data in locks.items():
        parse_lock(data, name)
    assert sum("resolving" in err for _, err in results) == 1  # the second found them fresh
    assert sum("nothing to compile" in out for out, _ in results) == 1
    assert not list((project / "locks/t").glob(".*.tmp"))


class _Unavailable(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(503, "Service Unavailable")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def index_503() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Unavailable)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    server.shutdown()


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/simple/"


@pytest.mark.slow
@pytest.mark.parametrize("which", ["503", "refused"])
def test_an_index_that_fails_is_an_environment_problem_naming_it(
    which: str,
    index_503: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = index_503 if which == "503" else closed_port_url()
    root = write_project(tmp_path, url, "alpha\n", "delta\n")
    monkeypatch.chdir(root)
    assert run_lock("t", "--host") == 3
    err = capsys.readouterr().err
    assert "the index did not answer" in err and url.rsplit("/simple", 1)[0] in err
    assert ("HTTP 503" in err) == (which == "503")
    shown = err[err.index("error:") :]  # what the command printed (not the index's own noise)
    assert "Traceback" not in shown and 'File "' not in shown  # pip's word, not pip-tools' frames
    last = next(line for line in shown.splitlines() if "last:" in line)
    assert "ERROR:" in last or "WARNING:" in last, err
    assert "full log: build/.layer-audit/lock-logs/t/v1-01.log" in err
    assert (root / "build/.layer-audit/lock-logs/t/v1-01.log").is_file()
    assert not (root / "locks/t/v1-01.txt").exists()
