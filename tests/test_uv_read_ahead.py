"""The uv backend's shared answers and read-ahead: faster cold locks, the same locks.

A lock run of several stale layers starts one background ``uv pip compile`` of all their
requirements and reads ahead the metadata of what it chose; each layer is still resolved on
its own with the earlier layers as given. Replayed with real uv against a local index: the
locks written with the read-ahead are byte for byte those written without it, even where the
union of the layers' requirements conflicts (the read-ahead fails, the layers do not), and the
layers' logs say how many pins' metadata came from the read-ahead.
"""

from __future__ import annotations

import platform
import time
import tomllib
from pathlib import Path
from typing import cast

import pytest

from audit.cli import main as cli
from audit.core.snapshot import Distribution
from audit.engines.resolvers import uv, uv_cache, uv_warm
from audit.plan.lock import LayerInputs
from audit.plan.recipe import Step
from tests.support.fixtures import Wheelhouse
from tests.support.project import ProjectSpec, base_record, write_project

SITE = "/opt/venv/lib/python3/site-packages"
ZERO = "sha256:" + "0" * 64


def inputs(index: str, extra: str | None, files: dict[str, bytes] | None = None) -> LayerInputs:
    step = cast(Step, None)  # neither the config nor the names read it
    return LayerInputs(step, "locks/x/v1-01.txt", "r.in", files or {}, index, extra, False, {})


def test_the_config_puts_the_extra_index_first_and_the_default_last_with_one_policy() -> None:
    text = uv.uv_config(inputs("https://pypi.org/simple", 'https://u:p"w@nightly/simple'), True)
    indexes = tomllib.loads(text)["index"]
    assert [i["url"] for i in indexes] == [
        'https://u:p"w@nightly/simple',
        "https://pypi.org/simple",
    ]
    assert [i.get("default", False) for i in indexes] == [False, True]
    policy = {"api": f"max-age={uv_cache.PAGES_FOR}", "files": f"max-age={uv_cache.FILES_FOR}"}
    assert all(i["cache-control"] == policy for i in indexes)


def test_outside_a_run_cache_the_servers_policy_stands() -> None:
    indexes = tomllib.loads(uv.uv_config(inputs("http://127.0.0.1:1/simple", None), False))["index"]
    assert indexes == [{"url": "http://127.0.0.1:1/simple", "default": True}]


def test_a_run_cache_links_shared_buckets_keeps_new_ones_and_drops_its_pages(
    tmp_path: Path,
) -> None:
    shared = tmp_path / "uv-cache"
    (shared / "wheels-v8" / "pypi").mkdir(parents=True)
    (shared / "simple-v28" / "pypi").mkdir(parents=True)
    (shared / "simple-v28" / "pypi" / "old.rkyv").write_text("a page of an earlier run")
    run = uv_cache.open_run_cache(shared)
    assert (run / "wheels-v8").resolve() == (shared / "wheels-v8").resolve()
    assert not (run / "simple-v28").exists()  # the run fetches its own pages
    (run / "simple-v28" / "pypi").mkdir(parents=True)
    (run / "simple-v28" / "pypi" / "new.rkyv").write_text("this run's page")
    (run / "wheels-v8" / "pypi" / "m.msgpack").write_text("metadata, kept")
    (run / "sdists-v11").mkdir()  # a bucket uv first made in this run
    uv_cache.close_run_cache(run, shared)
    assert not run.exists()
    assert (shared / "wheels-v8" / "pypi" / "m.msgpack").is_file()
    assert (shared / "sdists-v11").is_dir() and not (shared / "sdists-v11").is_symlink()
    assert sorted(p.name for p in (shared / "simple-v28" / "pypi").iterdir()) == ["old.rkyv"]


def test_a_killed_runs_folder_is_swept_by_the_next_run(tmp_path: Path) -> None:
    shared = tmp_path / "uv-cache"
    left = tmp_path / uv_cache.RUNS / "999999999-x"  # no such process
    (left / "simple-v28").mkdir(parents=True)
    run = uv_cache.open_run_cache(shared)
    assert not left.exists() and run.exists()
    uv_cache.close_run_cache(run, shared)


def test_the_wheel_uv_chose_is_read_from_its_pylock_output() -> None:
    text = (
        'lock-version = "1.0"\n\n[[packages]]\nname = "Foo_Bar"\nversion = "1.0"\n'
        'wheels = [{ url = "https://files.example/f/foo_bar-1.0-py3-none-any.whl", '
        'hashes = { sha256 = "ab" } }]\n\n[[packages]]\nname = "baz"\nversion = "2.0"\n'
        'sdist = { url = "https://files.example/b/baz-2.0.tar.gz" }\n'
    )
    chosen = uv_warm._chosen(text)
    assert list(chosen) == [("foo-bar", "1.0"), ("baz", "2.0")]
    wheel = chosen["foo-bar", "1.0"]
    assert wheel is not None and wheel.filename == "foo_bar-1.0-py3-none-any.whl"
    assert wheel.hashes == {"sha256": "ab"} and chosen["baz", "2.0"] is None
    assert uv_warm._chosen("not = [toml") == {}


def test_the_base_versions_are_handed_to_uv_as_a_pylock_file() -> None:
    text = uv_warm._preferences({("numpy", "1.26.4"), ("six", "1.16.0")})
    packages = tomllib.loads(text)["packages"]
    assert packages == [
        {"name": "numpy", "version": "1.26.4"},
        {"name": "six", "version": "1.16.0"},
    ]


def _project(
    root: Path, index: str, layers: dict[str, str], python: str = platform.python_version()
) -> None:
    recipe = (
        f'[image]\nbase = "local/base:1"\nplatform = "linux/amd64"\ncuda = "cpu"\n'
        f'interpreters = ["/opt/venv/bin/python"]\nrepository = "local/ahead"\n'
        f'index_url = "{index}"\nresolver = "uv"\n'
    )
    recipe += "".join(
        f'\n[[stage]]\nname = "{name}"\n  [[stage.layer]]\n  pip = "requirements/{name}.in"\n'
        for name in layers
    )
    base = (Distribution("setuptools", "68.0", SITE, "pip", ZERO, "setuptools", requires_dist=()),)
    record = base_record(*base, python=python, image="local/base:1")
    requirements = {f"{name}.in": text for name, text in layers.items()}
    write_project(root, ProjectSpec("ahead", recipe, requirements, record))


def _locks(root: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((root / "locks" / "ahead").glob("v*.txt"))}


def _notes(root: Path) -> str:
    logs = root / "build" / ".layer-audit" / "lock-logs" / "ahead"
    return "".join(p.read_text() for p in sorted(logs.glob("*.log")))


def _index(wheelhouse: Wheelhouse) -> None:
    wheelhouse.add("alpha", "1.0")
    wheelhouse.add("alpha", "2.0")
    wheelhouse.add("beta", "1.0", requires=["alpha>=1.0", "gamma"])
    wheelhouse.add("gamma", "1.0")
    wheelhouse.add("gamma", "1.5")
    wheelhouse.add("delta", "3.0", requires=["gamma<1.5"])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("layers", "code", "from_ahead"),
    [
        # together the layers would pick gamma 1.0 (delta's bound) and hide a downgrade: v2
        # still picks gamma 1.5 on its own, and v3 is refused for taking it back to 1.0; beta's
        # metadata comes from the read-ahead, gamma 1.5's is read by the layer
        ({"v1": "alpha<2\n", "v2": "beta\n", "v3": "delta\n"}, 1, True),
        # together the layers conflict (alpha<2 and alpha>=2): the read-ahead fails, and the
        # layers resolve one after another as ever (v2 upgrades alpha)
        ({"v1": "alpha<2\n", "v2": "alpha>=2\nbeta\n"}, 0, False),
    ],
    ids=["downgrade-the-union-would-hide", "conflicting-union"],
)
def test_locks_with_the_read_ahead_are_the_locks_without_it(
    tmp_path: Path,
    wheelhouse: Wheelhouse,
    local_index: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    layers: dict[str, str],
    code: int,
    from_ahead: bool,
) -> None:
    _index(wheelhouse)
    monkeypatch.chdir(tmp_path)
    _project(tmp_path, local_index, layers)
    assert cli.main(["lock", "ahead"]) == code, capsys.readouterr().err
    err = capsys.readouterr().err
    with_ahead, notes = _locks(tmp_path), _notes(tmp_path)
    for lock in (tmp_path / "locks" / "ahead").glob("v*.txt"):
        lock.unlink()
    with monkeypatch.context() as patch:
        patch.setattr(uv_warm.ReadAhead, "start", lambda self, layers: None)
        assert cli.main(["lock", "ahead"]) == code
    assert _locks(tmp_path) == with_ahead
    assert "read ahead so far" in notes
    taken = [int(line.split(" read ahead)")[0].rsplit(", ", 1)[1])
             for line in notes.splitlines() if " read ahead):" in line]  # fmt: skip
    assert (sum(taken) > 0) == from_ahead, notes
    if code:
        assert "gamma==1.5" in with_ahead["v2-01.txt"] and "v3-01.txt" not in with_ahead
        assert "downgrade" in err and "gamma" in err
    else:
        assert "alpha==2.0" in with_ahead["v2-01.txt"]


@pytest.mark.slow
def test_a_target_python_this_machine_lacks_is_resolved_for_without_fetching_one(
    tmp_path: Path,
    wheelhouse: Wheelhouse,
    local_index: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A vLLM base runs Python 3.12, the host another: uv resolves for the base's version with
    the interpreter running layer-audit beside it, and never tries to download a managed
    CPython of the target's version (each compile retried for seconds without a route to it)."""
    _index(wheelhouse)
    wheelhouse.add("epsilon", "1.0", requires=['alpha>=2; python_version >= "3.12"'])
    monkeypatch.chdir(tmp_path)
    _project(tmp_path, local_index, {"v1": "epsilon\n"}, python="3.12.99")
    started = time.monotonic()
    assert cli.main(["lock", "ahead"]) == 0, capsys.readouterr().err
    assert time.monotonic() - started < 60  # bounded, not a benchmark: it was 4-8 s a compile
    lock = _locks(tmp_path)["v1-01.txt"]
    assert "alpha==2.0" in lock  # resolved for 3.12, whatever runs uv
    assert "managed Python" not in _notes(tmp_path)
