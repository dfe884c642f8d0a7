"""What a command-line user expects: ``-V`` and shell completion that works in a real bash
(and zsh, where installed). ``render --format json`` is tested in tests/test_cli_render.py,
``build --format json`` in tests/test_build_docker.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from audit import __version__
from audit.cli import main as cli
from audit.errors import EXIT_OK
from tests.support.cli import spawn_audit
from tests.support.project import ProjectSpec, base_record, pip_recipe_toml, write_project


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_the_version_flag(flag: str, tmp_path: Path) -> None:
    process = spawn_audit(tmp_path, flag)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert out == f"python -m audit {__version__}\n"  # the console script says layer-audit


def script(shell: str, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert cli.main(["completion", shell]) == EXIT_OK
    return capsys.readouterr().out


def complete(script_path: Path, cwd: Path, *words: str) -> list[str]:
    """What bash offers for the last of ``words`` (``""``: a new word), as TAB would."""
    quoted = " ".join(f"'{word}'" for word in words)
    program = (
        f"source {script_path}\n"
        f"COMP_WORDS=(layer-audit {quoted}); COMP_CWORD={len(words)}\n"
        '_layer_audit; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", program],
        cwd=cwd, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line]


@pytest.fixture
def bash_script(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    path = tmp_path / "layer-audit.bash"
    path.write_text(script("bash", capsys))
    return path


def test_bash_completes_commands_options_values_and_recipes(
    bash_script: Path, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    recipe = pip_recipe_toml(["v1"])
    write_project(project, ProjectSpec("demo", recipe, {"v1.in": "alpha\n"}, base_record()))
    write_project(project, ProjectSpec("dsl", recipe, {"v1.in": "alpha\n"}, base_record()))
    (project / "images/demo/requirements").mkdir(exist_ok=True)
    inside = project / "images" / "demo"
    assert complete(bash_script, tmp_path, "au") == ["audit-deps"]
    assert complete(bash_script, tmp_path, "--project", "x", "ga") == ["gate"]
    assert complete(bash_script, tmp_path, "gate", "--for") == ["--format"]
    formats = ["terminal", "json", "markdown", "html"]  # the one convention: no old names
    assert complete(bash_script, tmp_path, "gate", "--format", "") == formats
    assert complete(bash_script, tmp_path, "completion", "") == ["bash", "zsh"]
    assert sorted(complete(bash_script, inside, "render", "d")) == [
        "demo",
        "dsl",
    ]  # from any subfolder
    assert complete(bash_script, inside, "audit-deps", "--recipe", "ds") == ["dsl"]
    assert complete(bash_script, tmp_path, "render", "d") == []  # no project here
    registered = subprocess.run(
        ["bash", "--norc", "-c", f"source {bash_script}; complete -p layer-audit"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert registered.strip() == "complete -F _layer_audit layer-audit"


def test_every_command_is_completed(bash_script: Path, tmp_path: Path) -> None:
    offered = complete(bash_script, tmp_path, "")
    commands = set(cli.COMMANDS)
    assert commands <= set(offered) and {"-V", "--version", "--project"} <= set(offered)


def test_zsh_loads_the_same_completion(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    zsh = shutil.which("zsh")
    if zsh is None:
        pytest.skip("needs zsh (apt-get install -y zsh)")
    path = tmp_path / "_layer-audit"
    text = script("zsh", capsys)
    assert text.startswith("#compdef layer-audit\n")
    path.write_text(text)
    program = (
        "autoload -U compinit && compinit -u\n"
        f"source {path}\n"
        'print -r -- "${_comps[layer-audit]}"\n'
        # as bashcompinit's compgen runs it: sh emulation (0-based arrays); zsh's own matching
        # then keeps the candidates that start with the word
        "f() { emulate -L sh; COMP_WORDS=(layer-audit gate --format ''); COMP_CWORD=3\n"
        '  _layer_audit; print -l "${COMPREPLY[@]}"; }\n'
        "f\n"
    )
    done = subprocess.run(
        [zsh, "-f", "-c", program], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "_bash_complete -F _layer_audit",
        "terminal",
        "json",
        "markdown",
        "html",
    ]


def test_the_script_is_the_same_every_time(capsys: pytest.CaptureFixture[str]) -> None:
    assert script("bash", capsys) == script("bash", capsys)
