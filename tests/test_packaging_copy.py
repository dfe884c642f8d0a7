"""The ``packaging`` the build guard carries: the host's when it runs on the base's Python, else
the pinned fallback release, fetched once from the tools index (the session's 127.0.0.1 index)
with its sha256 checked, and cached.

``packaging`` 26.4 declares (and needs) Python 3.10; a bullseye base runs 3.9. Before this,
the host's copy was vendored whatever it needed, so layer-audit pinned ``packaging<26``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from audit.errors import EnvironmentProblem
from audit.lock.resolvers.job import CACHE_ENV, TOOLS_INDEX_ENV
from audit.render import packaging_copy
from audit.render.guard import PackagingCopy

PY39 = Path("/root/.pyenv/versions/3.9.18/bin/python3.9")
NEW_ONLY = PackagingCopy("26.4", ">=3.10", {"__init__.py": b"# the host's\n"})


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache" / "guard-packaging" / packaging_copy.FALLBACK_WHEEL


def test_the_hosts_copy_serves_every_python_it_admits() -> None:
    assert packaging_copy.copy_for(["3.12.1", "3.10.0"], NEW_ONLY) is NEW_ONLY
    assert PackagingCopy("1", "", {}).admits("2.7")  # a copy that says nothing claims all


def test_an_older_python_gets_the_pinned_release_fetched_once_and_cached(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = packaging_copy.copy_for(["3.12.1", "3.9.2"], NEW_ONLY)
    assert (copy.version, copy.requires_python) == (packaging_copy.FALLBACK[0], ">=3.9")
    assert {"__init__.py", "version.py", "requirements.py", "markers.py"} <= set(copy.files)
    assert cache.is_file()
    monkeypatch.setenv(TOOLS_INDEX_ENV, "http://127.0.0.1:9/simple/")  # nothing answers there
    assert packaging_copy.copy_for(["3.9.2"], NEW_ONLY) == copy  # from the cache


def test_a_cached_wheel_with_other_bytes_is_fetched_again_and_a_bad_index_is_exit_3(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache.parent.mkdir(parents=True)
    cache.write_bytes(b"not the pinned wheel")
    assert packaging_copy.copy_for(["3.9.2"], NEW_ONLY).version == packaging_copy.FALLBACK[0]
    cache.write_bytes(b"not the pinned wheel")
    monkeypatch.setenv(TOOLS_INDEX_ENV, "http://127.0.0.1:9/simple/")
    with pytest.raises(EnvironmentProblem) as caught:
        packaging_copy.copy_for(["3.9.2"], NEW_ONLY)
    assert caught.value.exit_code == 3 and TOOLS_INDEX_ENV in caught.value.hint


@pytest.mark.skipif(not PY39.exists(), reason="no Python 3.9 interpreter on this machine")
def test_the_fallback_copy_runs_on_python_39(cache: Path, tmp_path: Path) -> None:
    copy = packaging_copy.copy_for(["3.9.18"], NEW_ONLY)
    for relpath, data in copy.files.items():
        (tmp_path / "lib" / "packaging" / relpath).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "lib" / "packaging" / relpath).write_bytes(data)
    probe = "from packaging.requirements import Requirement; print(Requirement('a>=1').name)"
    done = subprocess.run(
        [str(PY39), "-I", "-c", f"import sys; sys.path.insert(0, 'lib'); {probe}"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout == "a\n", done.stderr
