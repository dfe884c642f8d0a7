"""The uv backend's shared answers and read-ahead: faster cold locks, the same locks.

A lock run of several stale layers starts one background ``uv pip compile`` of all their
requirements and reads ahead the metadata of what it chose; each layer is still resolved on
its own with the earlier layers as given. Replayed with real uv against a local index: the
locks written with the read-ahead are byte for byte those written without it, even where the
union of the layers' requirements conflicts (the read-ahead fails, the layers do not), and the
layers' logs say how many pins' metadata came from the read-ahead.
"""

from __future__ import annotations

import os
import platform
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pytest

from audit.cli import main as cli
from audit.history.snapshot import Distribution
from audit.index.http import FetchStats
from audit.index.simple import IndexFile, ProjectPages
from audit.index.wheel_metadata import Metadata
from audit.lock.plan import LayerInputs
from audit.lock.resolvers import uv, uv_cache, uv_warm
from audit.recipe.model import Step
from tests.support.fixtures import Wheelhouse
from tests.support.metaindex import serve_metadata_index
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


# -- reads started from uv's log, before its compile ends --------------------------------------

FILES = "https://files.example/packages/ab/cd"
NUMPY = f"{FILES}/numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl"
SCIPY = f"{FILES}/Scipy-1.17.1-cp311-cp311-manylinux_2_28_x86_64.whl"
# lines of `uv pip compile -v` (uv 0.13.9) as it fetches pages and wheel metadata
UV_LOG = [
    "DEBUG No cache entry for: https://pypi.example/simple/numpy/",
    "DEBUG Selecting: numpy==2.4.6 [compatible] (numpy-2.4.6-cp311-none-any.whl)",
    f"DEBUG No cache entry for: {NUMPY}",
    f"DEBUG Sending fresh HEAD request for: {NUMPY}",
    f"DEBUG Sending fresh GET request for: {SCIPY}.metadata",
    f"DEBUG Found stale response for: {FILES}/six-1.16.0-py2.py3-none-any.whl",  # the base's
    f"DEBUG No cache entry for: {FILES}/not-a-wheel-name.whl",
]


@dataclass
class _Reads:
    """A reader that records what it is asked for and answers from ``answers`` (by URL)."""

    answers: dict[str, str] = field(default_factory=dict)  # url -> how ("range", "download")
    asked: list[tuple[str, bool, tuple[str, ...]]] = field(default_factory=list)

    def __call__(
        self,
        inputs: LayerInputs,
        pin: tuple[str, str],
        file: IndexFile | None,
        *,
        stats: FetchStats,
        pages: ProjectPages,
    ) -> Metadata | None:
        assert file is not None
        self.asked.append((file.url, file.metadata_hashes is not None, tuple(file.hashes)))
        how = self.answers.get(file.url, "range")
        return Metadata(pin[0], pin[1], (), "", (), b"", file, how)


def _ahead(tmp_path: Path, reads: _Reads) -> uv_warm.ReadAhead:
    installed = {("six", "1.16.0")}
    return uv_warm.ReadAhead(lambda i, w: [], {}, reads, installed, tmp_path)


def test_each_wheel_uv_logs_is_read_at_once_and_once_its_pep658_file_when_uv_took_that(
    tmp_path: Path,
) -> None:
    reads = _Reads()
    ahead = _ahead(tmp_path, reads)
    layer = inputs("https://pypi.example/simple", None)
    for line in UV_LOG:
        ahead._logged(layer, line)
    for _, read in ahead._early.values():
        read.result()
    ahead.stop()
    # pages, the base's six and a name that is no wheel's are never read
    assert sorted(reads.asked) == [(SCIPY, True, ()), (NUMPY, False, ())]


def test_a_layer_takes_an_early_read_without_waiting_for_the_compile(tmp_path: Path) -> None:
    reads = _Reads()
    ahead = _ahead(tmp_path, reads)
    layer = inputs("https://pypi.example/simple", None)
    ahead._compiled[uv_warm.group_of(layer)] = threading.Event()  # a compile that never ends
    for line in UV_LOG:
        ahead._logged(layer, line)
    started = time.monotonic()
    found = ahead.take(layer, [("numpy", "2.4.6"), ("scipy", "1.17.1")])
    assert time.monotonic() - started < uv_warm.WAIT / 2
    assert {pin: meta.how for pin, meta in found.items()} == {
        ("numpy", "2.4.6"): "range",
        ("scipy", "1.17.1"): "range",
    }
    ahead.stop()


def test_an_early_whole_download_is_read_again_with_the_hashes_the_pylock_gives(
    tmp_path: Path,
) -> None:
    """A server without ranges makes the early read a whole download no hash checked: the
    chosen wheel is read again with the pylock's hashes, and only that read is taken."""
    url = NUMPY
    reads = _Reads({url: "download"})
    ahead = _ahead(tmp_path, reads)
    layer = inputs("https://pypi.example/simple", None)
    ahead._logged(layer, UV_LOG[2])
    assert ahead.take(layer, [("numpy", "2.4.6")]) == {}  # unchecked: the layer reads it
    chosen = {("numpy", "2.4.6"): IndexFile(url.rsplit("/", 1)[1], url, {"sha256": "ab"})}
    ahead._schedule(layer, chosen)
    found = ahead.take(layer, [("numpy", "2.4.6")])
    assert found["numpy", "2.4.6"].file.hashes == {"sha256": "ab"}
    assert [hashes for _, _, hashes in reads.asked] == [(), ("sha256",)]
    ahead.stop()


@pytest.mark.slow
@pytest.mark.parametrize("pep658", [False, True], ids=["range-requests", "pep658-files"])
def test_real_uv_names_each_wheel_in_its_log_as_it_reads_it_so_reads_start_early(
    tmp_path: Path,
    wheelhouse: Wheelhouse,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    pep658: bool,
) -> None:
    """The read-ahead reads what uv's log names while uv resolves (uv's log lines are not an
    interface: a uv upgrade that stops naming wheels fails here, not silently slower), on an
    index like PyPI (ranges, PEP 658 files or not); the locks are the locks without it."""
    _index(wheelhouse)
    started: list[str] = []
    logged = uv_warm.ReadAhead._logged

    def spy(self: uv_warm.ReadAhead, layer: LayerInputs, line: str) -> None:
        before = set(self._early)
        logged(self, layer, line)
        started.extend(url for key, (url, _) in self._early.items() if key not in before)

    monkeypatch.setattr(uv_warm.ReadAhead, "_logged", spy)
    monkeypatch.chdir(tmp_path)
    with serve_metadata_index(wheelhouse.path, "ranges", metadata=pep658) as (index, _):
        _project(tmp_path, index, {"v1": "alpha<2\n", "v2": "beta\n"})
        assert cli.main(["lock", "ahead"]) == 0, capsys.readouterr().err
        with_ahead = _locks(tmp_path)
        for lock in (tmp_path / "locks" / "ahead").glob("v*.txt"):
            lock.unlink()
        monkeypatch.setattr(uv_warm.ReadAhead, "start", lambda self, layers: None)
        assert cli.main(["lock", "ahead"]) == 0
    assert _locks(tmp_path) == with_ahead
    names = sorted(url.rsplit("/", 1)[1] for url in started)
    assert names == ["alpha-1.0-py3-none-any.whl", "beta-1.0-py3-none-any.whl",
                     "gamma-1.5-py3-none-any.whl"]  # fmt: skip


@pytest.mark.slow
def test_naming_what_a_layer_already_installs_relocks_that_layer_alone(
    tmp_path: Path,
    wheelhouse: Wheelhouse,
    local_index: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """v1 installs beta and with it gamma; a line for gamma added to v1.in changes v1's lock
    (its ``# via``), not what v1 installs: v2 is kept, byte for byte, not compiled again."""
    _index(wheelhouse)
    monkeypatch.chdir(tmp_path)
    _project(tmp_path, local_index, {"v1": "beta\n", "v2": "alpha\n"})
    assert cli.main(["lock", "ahead"]) == 0, capsys.readouterr().err
    before = _locks(tmp_path)
    capsys.readouterr()
    (tmp_path / "images" / "ahead" / "requirements" / "v1.in").write_text("beta\ngamma\n")
    assert cli.main(["lock", "ahead"]) == 0, capsys.readouterr().err
    after, out = _locks(tmp_path), capsys.readouterr().out
    assert (
        after["v1-01.txt"] != before["v1-01.txt"]
        and "#   -r requirements/v1.in" in after["v1-01.txt"]
    )
    assert after["v2-01.txt"] == before["v2-01.txt"]
    assert "compiled" in out and "kept" in out


def test_stopping_the_read_ahead_kills_a_background_compile_still_running(tmp_path: Path) -> None:
    """The layers are done: nothing will take what the compile would fetch, so the run does
    not wait for it (a union that backtracks for minutes, a stalled index)."""
    ahead = uv_warm.ReadAhead(lambda i, w: ["sleep", "60"], {"PATH": os.defpath}, _Reads(),
                              set(), tmp_path)  # fmt: skip
    layer = inputs("https://pypi.example/simple", None)
    ahead.start([layer, layer])  # two layers of one group: one background compile
    time.sleep(0.3)
    started = time.monotonic()
    ahead.stop()
    assert time.monotonic() - started < 15
    assert not any(thread.is_alive() for thread in ahead._threads)
    assert ahead.take(layer, [("numpy", "2.4.6")]) == {}  # nothing was chosen
