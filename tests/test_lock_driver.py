"""The pip-tools lock driver (``audit/inimage/lock_driver.py``): its pure parts, one by one.

The whole driver runs for real in ``test_lock_compile.py`` (``--host``) and the Docker tests;
here each decision it makes is checked on its own, on files in a temporary work folder.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from audit.inimage import lock_driver


def job(tmp_path: Path, **changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "cache": str(tmp_path / "cache"),
        "cert": "",
        "tools_index": "http://127.0.0.1:9/simple",
        "pip": "25.2",
        "pip_tools": "7.6.2",
        "compile": ["--generate-hashes", "layer.in"],
        "report": ["--index-url", "http://127.0.0.1:9/simple"],
        "requirements": "layer.in",
        "overrides": [],
    }
    document.update(changes)
    (tmp_path / "cache").mkdir(exist_ok=True)
    return document


def test_key_is_the_pep503_name_and_the_version_without_a_marker() -> None:
    assert lock_driver.key("Foo_Bar.baz==1.0\n") == ("foo-bar-baz", "1.0")
    assert lock_driver.key('numpy==2.0 ; python_version >= "3.10"') == ("numpy", "2.0")


def test_moved_keeps_what_is_not_installed_at_that_version_and_overrides_win(
    tmp_path: Path,
) -> None:
    (tmp_path / lock_driver.INSTALLED).write_text("alpha==1.0\nbeta==2.0\n")
    compiled = (
        "alpha==1.0 \\\n    --hash=sha256:aa\n"
        "Beta==3.0 \\\n    --hash=sha256:bb\n"
        "gamma==1.0 \\\n    --hash=sha256:cc\n    # via beta\n"
    )
    (tmp_path / lock_driver.OUTPUT).write_text(compiled)
    assert lock_driver.moved(str(tmp_path), []) == ["Beta==3.0", "gamma==1.0"]
    assert lock_driver.moved(str(tmp_path), ["gamma==0.9"]) == ["Beta==3.0", "gamma==0.9"]


def test_a_no_deps_layer_reports_its_own_file_and_a_layer_that_moves_nothing_reports_none(
    tmp_path: Path,
) -> None:
    assert lock_driver.report_wanted(job(tmp_path, compile=[]), str(tmp_path)) == [
        "-r",
        "layer.in",
    ]
    (tmp_path / lock_driver.INSTALLED).write_text("alpha==1.0\n")
    (tmp_path / lock_driver.OUTPUT).write_text("alpha==1.0 \\\n    --hash=sha256:aa\n")
    assert lock_driver.report_wanted(job(tmp_path), str(tmp_path)) == []
    assert (tmp_path / lock_driver.MOVED).read_text() == ""


def test_the_environment_is_made_from_nothing_with_its_caches_in_the_cache_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "https://user:secret@example.invalid/simple")
    env = lock_driver.environment(job(tmp_path, cert="/ca.pem"))
    assert not [name for name in env if name.startswith("PIP_") and name not in {
        "PIP_CONFIG_FILE", "PIP_NO_INPUT", "PIP_DISABLE_PIP_VERSION_CHECK"}]  # fmt: skip
    assert env["XDG_CACHE_HOME"].startswith(str(tmp_path / "cache"))  # pip's HTTP cache persists
    assert env["SSL_CERT_FILE"] == "/ca.pem"
    assert lock_driver.certs(job(tmp_path, cert="/ca.pem")) == ["--cert", "/ca.pem"]


def test_the_tools_folder_is_keyed_by_both_tool_versions_and_the_interpreter(
    tmp_path: Path,
) -> None:
    one = lock_driver.tools_folder(job(tmp_path))
    other = lock_driver.tools_folder(job(tmp_path, pip_tools="7.6.3"))
    assert one != other
    assert f"py{sys.version_info[0]}{sys.version_info[1]}" in one


def test_a_base_without_venv_exits_with_its_own_code_and_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(lock_driver, "can_make_venv", lambda: False)
    document = job(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        lock_driver.install_tools(document, lock_driver.environment(document))
    assert stopped.value.code == lock_driver.EXIT_NO_VENV
    assert lock_driver.STEP_PREFIX + lock_driver.NO_VENV in capsys.readouterr().err
    assert not Path(lock_driver.tools_folder(document)).exists()
