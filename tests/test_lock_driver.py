"""The pip-tools lock driver (``audit/inimage/lock_driver.py``): its pure parts, one by one.

The whole driver runs for real in ``test_lock_compile.py`` (``--host``) and the Docker tests;
here each decision it makes is checked on its own, on files in a temporary work folder.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from audit.inimage import lock_driver
from audit.lock.plan import LayerInputs, pip_steps
from audit.lock.resolvers.job import CompileJob
from audit.lock.resolvers.piptools import known_pins, with_known
from audit.policy.model import Policy
from audit.recipe.model import PipLayer, Recipe, Stage


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


def test_pip_reads_only_moved_pins_the_host_does_not_know_and_every_override(
    tmp_path: Path,
) -> None:
    (tmp_path / lock_driver.INSTALLED).write_text("alpha==1.0\n")
    compiled = "".join(f"{pin} \\\n    --hash=sha256:aa\n" for pin in ("Beta==3.0", "gamma==1.0"))
    (tmp_path / lock_driver.OUTPUT).write_text(compiled)
    known = job(tmp_path, known=["beta==3.0", "gamma==0.9"])
    assert lock_driver.report_wanted(known, str(tmp_path)) == [
        "-r",
        str(tmp_path / lock_driver.READ),
    ]
    assert (tmp_path / lock_driver.MOVED).read_text() == "Beta==3.0\ngamma==1.0\n"
    assert (tmp_path / lock_driver.READ).read_text() == "gamma==1.0\n"  # 1.0 is not known
    all_known = job(tmp_path, known=["beta==3.0", "gamma==1.0"])
    assert lock_driver.report_wanted(all_known, str(tmp_path)) == []
    overridden = job(tmp_path, known=["beta==3.0", "gamma==1.0"], overrides=["gamma==1.0"])
    assert lock_driver.to_read(["Beta==3.0", "gamma==1.0"], overridden) == ["gamma==1.0"]


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


def compile_job(overrides: tuple[str, ...] = (), extra_index: str | None = None) -> CompileJob:
    index = "http://127.0.0.1:9/simple"
    stage = Stage("v1", (PipLayer("requirements/v1.in"),))
    recipe = Recipe(
        "t", Path("images/t"), "b", None, "linux/amd64", "cpu", ("/usr/bin/python3",), "r",
        "{stage}", "latest", index, (), (stage,), Policy(),
    )  # fmt: skip
    inputs = LayerInputs(
        pip_steps(recipe)[0], "locks/t/v1-01.txt", "v1.in", {}, index, None, False, {}
    )
    known = {("beta", "3.0"): (("alpha>=1",), ">=3.9"), ("gamma", "1.0"): ((), "")}
    job = CompileJob(inputs, "", {}, overrides=overrides, known=known)
    return dataclasses.replace(job, inputs=dataclasses.replace(inputs, extra_index_url=extra_index))


def test_the_host_fills_in_what_pip_was_not_asked_to_read_from_the_previous_lock() -> None:
    pip_read = {"install": [{"metadata": {"name": "delta", "version": "2.0"}, "x": 1}]}
    moved = "Beta==3.0\ndelta==2.0\ngamma==1.0\n"
    items = json.loads(with_known(json.dumps(pip_read), moved, compile_job()))["install"]
    assert items[0] == pip_read["install"][0]  # pip's own items untouched
    assert items[1:] == [
        {"metadata": {"name": "beta", "version": "3.0", "requires_dist": ["alpha>=1"],
                      "requires_python": ">=3.9"}},
        {"metadata": {"name": "gamma", "version": "1.0", "requires_dist": [],
                      "requires_python": ""}},
    ]  # fmt: skip
    # an override is always read by pip (its hashes come from the report), never filled in
    overridden = json.loads(with_known("", moved, compile_job(("gamma==1.0",))))["install"]
    assert [item["metadata"]["name"] for item in overridden] == ["beta"]
    assert with_known("", "", compile_job()) == ""  # a failed run stays empty


def test_with_an_extra_index_pip_reports_every_moved_pin_for_the_origin_check() -> None:
    assert known_pins(compile_job()) == ["beta==3.0", "gamma==1.0"]
    assert known_pins(compile_job(extra_index="http://127.0.0.1:9/extra")) == []
    assert with_known("", "beta==3.0\n", compile_job(extra_index="http://x/simple")) == ""
