"""``layer-audit import``: field-style multi-stage Dockerfiles become recipes that render back to
Dockerfiles doing what the originals did, plus the guard.

For every Dockerfile under ``tests/dockerfiles/`` the original's instructions are read into a
list of actions by this module's own reading of Docker's rules (ARG defaults substituted where
Docker substitutes them, WORKDIR applied to relative COPY destinations, ``&&`` chains as their
commands, heredoc bodies, COPY sources as the digest of their bytes with mode and owner, pip
installs as requirement sets with ``--no-deps``, ``--pre`` and the extra index) and the final
image's configuration (the last CMD, ENTRYPOINT, USER … as Docker keeps them). The rendered
Dockerfile is read back the same way from its build context, modulo the guard and the
lock-driven pip commands; any difference is a loss and fails. Lines marked ``# unmapped`` in a
Dockerfile are exactly the ones ``import`` must report, each with its reason.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser

from audit.cli.main import main
from audit.dockerfile import heredoc as dockerfile_heredoc
from audit.dockerfile.importer import plan_import
from audit.project.sources import DirectorySource
from audit.recipe.parse import load_recipe

HERE = Path(__file__).parent / "dockerfiles"
FIELD = sorted(p.name for p in HERE.iterdir() if (p / "Dockerfile").is_file())
CONFIG = ("CMD", "ENTRYPOINT", "USER", "EXPOSE", "LABEL", "HEALTHCHECK", "STOPSIGNAL", "SHELL")
VALUED = ("-i", "--index-url", "--extra-index-url", "--root-user-action")
Action = tuple[Any, ...]


def digest(path: Path) -> str:
    """sha256 of a file, or of a folder's files and their relative paths."""
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    sha = hashlib.sha256()
    for file in files:
        sha.update(file.relative_to(path).as_posix().encode() if path.is_dir() else b"")
        sha.update(file.read_bytes())
    return sha.hexdigest()


def instructions(path: Path) -> list[dict[str, Any]]:
    data = path.read_bytes()
    items = [
        i
        for i in DockerfileParser(fileobj=io.BytesIO(data)).structure
        if i["instruction"] != "COMMENT"
    ]
    return dockerfile_heredoc.attach(items, data.decode().splitlines(keepends=True))


def substitute(text: str, known: dict[str, str]) -> str:
    for name, value in known.items():
        text = re.sub(r"\$(\{" + name + r"\}|" + name + r"(?![A-Za-z0-9_]))", value, text)
    return text


def segments(command: str) -> list[str]:
    """``a && b`` as its commands, quotes respected; any other shell syntax (``||``, ``;``,
    ``|``, a subshell) or a command that changes the shell's state (``cd``) keeps it whole:
    split, it would mean something else."""
    bare = re.sub(r"\"[^\"]*\"|'[^']*'", "", command)
    if re.search(r"[;|()`]|\$\(", bare) or re.search(r"(^|&&)\s*(cd|export)\b", bare):
        return [command]
    lexer = shlex.shlex(command, posix=True, punctuation_chars="&")
    lexer.whitespace_split = True
    words: list[list[str]] = [[]]
    for token in lexer:
        if token == "&&":
            words.append([])
        else:
            words[-1].append(token)
    parts = [p.strip() for p in re.split(r"&&(?=(?:[^\"']|\"[^\"]*\"|'[^']*')*$)", command)]
    return parts if len(parts) == len(words) else [command]


def pip_action(words: list[str]) -> Action | None:
    """('pip', requirements, no_deps, pre, extra index) of a ``pip install``, else None."""
    if "install" not in words or not any(re.search(r"\bpip3?$", w) for w in words[:3]):
        return None
    args = words[words.index("install") + 1 :]
    reqs, extra = [], None
    while args:
        word = args.pop(0)
        if word in VALUED:
            value = args.pop(0)
            extra = value if word == "--extra-index-url" else extra
        elif not word.startswith("-"):
            reqs.append(word)
    return ("pip", tuple(sorted(reqs)), "--no-deps" in words, "--pre" in words, extra)


class Original:
    """The actions and final configuration of a Dockerfile, read by Docker's rules."""

    def __init__(self, path: Path) -> None:
        self.folder = path.parent
        self.marked = marked_lines(path)
        self.actions: list[Action] = []
        self.config: dict[str, Any] = {}
        self.args: dict[str, str] = {}
        self.stage_args: dict[str, str] = {}
        self.env: dict[str, str] = {}
        self.workdir = ""
        self.cmd_stage = self.stage = 0
        for item in instructions(path):
            self.read(item)

    def read(self, item: dict[str, Any]) -> None:
        kind, value = item["instruction"].upper(), item["value"]
        line = item["startline"] + 1
        if kind == "FROM":
            self.stage, self.stage_args = self.stage + 1, {}
            self.actions.append(("from",))
        elif kind == "ARG":
            name, _, default = value.partition("=")
            target = self.stage_args if self.stage else self.args
            target[name] = default.strip("\"'") if default else self.args.get(name, "")
        elif line in self.marked:
            if kind == "RUN":
                self.actions.append(("run", value))
        elif kind in CONFIG:
            self.configure(kind, value)
        elif kind == "RUN":
            self.run_(value, item.get("heredocs", []))
        else:
            if kind == "COPY":
                self.copy_(value, item.get("heredocs", []))
                return
            readers = {"ENV": self.env_, "WORKDIR": self.workdir_}
            readers[kind](value)  # another instruction must be marked # unmapped

    def known(self) -> dict[str, str]:
        return {**self.stage_args, **self.env}

    def env_(self, value: str) -> None:
        for word in shlex.split(value):
            name, _, text = word.partition("=")
            self.env[name] = substitute(text, self.known())
            self.actions.append(("env", name, self.env[name]))

    def workdir_(self, value: str) -> None:
        self.workdir = str(Path(self.workdir or "/") / substitute(value, self.known()))
        self.actions.append(("workdir", self.workdir))

    def copy_(self, value: str, heredocs: list[dockerfile_heredoc.Heredoc]) -> None:
        if heredocs:  # COPY <<EOF dest: the body, variables expanded (the delimiter unquoted)
            flags = dict(w[2:].split("=", 1) for w in value.split() if w.startswith("--"))
            dest = value.rsplit(maxsplit=1)[-1]
            data = substitute(heredocs[0].body, self.known()).encode()
            where = hashlib.sha256(data).hexdigest()
            self.actions.append(("copy", dest, where, flags.get("chmod"), flags.get("chown")))
            return
        words = shlex.split(substitute(value, self.known()))
        flags = dict(w[2:].split("=", 1) for w in words if w.startswith("--"))
        *sources, dest = [w for w in words if not w.startswith("--")]
        if not dest.startswith("/"):
            dest = str(Path(self.workdir) / dest) + ("/" if dest.endswith("/") else "")
        for source in sources:
            where = digest(self.folder / source)
            self.actions.append(("copy", dest, where, flags.get("chmod"), flags.get("chown")))

    def run_(self, value: str, heredocs: list[dockerfile_heredoc.Heredoc]) -> None:
        command = re.sub(r"^(--\S+\s+)+", "", value.strip())
        if heredocs:
            program = command.partition(heredocs[0].mark)[0].strip()
            body = heredocs[0].body if program else substitute(heredocs[0].body, self.stage_args)
            self.actions.append(("heredoc", program, body))
            return
        for part in segments(substitute(command, self.stage_args)):
            self.actions.append(pip_action(shlex.split(part)) or ("run", part))

    def configure(self, kind: str, value: str) -> None:
        if kind == "ENTRYPOINT" and self.cmd_stage != self.stage:
            self.config.pop("CMD", None)  # Docker resets a CMD an earlier stage set
        self.cmd_stage = self.stage if kind == "CMD" else self.cmd_stage
        merge(self.config, kind, substitute(value, self.known()))


def merge(config: dict[str, Any], kind: str, value: str) -> None:
    """One configuration instruction into ``config``, normalised for comparison."""
    if kind == "LABEL":
        config.setdefault(kind, {}).update(w.split("=", 1) for w in shlex.split(value))
    elif kind == "EXPOSE":
        config[kind] = sorted({*config.get(kind, []), *value.split()})
    elif kind == "HEALTHCHECK":
        options, _, command = value.partition("CMD ")
        config[kind] = (sorted(options.split()), command_form(command))
    elif kind in ("CMD", "ENTRYPOINT", "SHELL"):
        config[kind] = command_form(value)
    else:
        config[kind] = value.strip()


def command_form(value: str) -> Any:
    value = value.strip()
    return json.loads(value) if value.startswith("[") else value


def rendered(context: Path) -> tuple[list[Action], dict[str, Any]]:
    """The actions and final configuration of a rendered Dockerfile, from its build context."""
    actions: list[Action] = []
    config: dict[str, Any] = {}
    for item in instructions(context / "Dockerfile"):
        kind, value = item["instruction"].upper(), item["value"]
        if kind == "FROM":
            actions.append(("from",))
        elif kind == "ENV":
            actions += [("env", *w.split("=", 1)) for w in shlex.split(value)]
        elif kind == "WORKDIR":
            actions.append(("workdir", value))
        elif kind == "COPY":
            flags = dict(w[2:].split("=", 1) for w in value.split() if w.startswith("--"))
            source, dest = json.loads(value[value.index("[") :])
            mode, owner = flags.get("chmod"), flags.get("chown")
            actions.append(("copy", dest, digest(context / source), mode, owner))
        elif kind == "RUN":
            actions += rendered_run(context, value)
        elif kind in CONFIG:
            merge(config, kind, value)
    return actions, config


def rendered_run(context: Path, value: str) -> list[Action]:
    if "PIP_CONFIG_FILE=/dev/null" in value:  # a pip layer: its first install is the layer's
        install = re.search(r"PIP_CONFIG_FILE=/dev/null (.*?) -r (\S+)", value)
        assert install, value
        mount = re.search(r"source=(requirements/[^,]+),target=", value)
        assert mount, value
        lines = (context / mount.group(1)).read_text().splitlines()
        reqs = [line for line in lines if line and not line.startswith("#")]
        found = pip_action([*shlex.split(install.group(1)), *reqs])
        return [found] if found else []
    run = re.search(r"&& \( (.*) \)( < (\S+))?\s+&& if \[ -z", value, flags=re.DOTALL)
    assert run, value
    command = run.group(1)
    if command.startswith(": 'UNMAPPED Dockerfile line"):
        return []
    if not run.group(2):
        return [("run", command)]
    stdin = re.search(r"source=(files/heredocs/\S+),target=", value)
    assert stdin, value
    program = "" if command == 'sh -c "$(cat)"' or command.endswith(" /dev/stdin") else command
    return [("heredoc", program, (context / stdin.group(1)).read_text())]


def marked_lines(dockerfile: Path) -> set[int]:
    """1-based numbers of the lines right after a ``# unmapped`` marker."""
    lines = dockerfile.read_text().splitlines()
    return {number + 2 for number, line in enumerate(lines) if line.strip() == "# unmapped"}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty repository folder outside the checkout, as the working folder."""
    root = tmp_path / "repo"
    root.mkdir()
    monkeypatch.chdir(root)
    return root


@pytest.mark.parametrize("name", FIELD)
def test_import_then_render_does_what_the_dockerfile_did(
    name: str, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dockerfile = HERE / name / "Dockerfile"
    assert main(["import", str(dockerfile)]) == 0
    out = capsys.readouterr().out
    recipe = load_recipe(DirectorySource(project), name)
    assert len(recipe.stages) == dockerfile.read_text().count("\nFROM ")
    assert main(["render", name]) == 0
    actions, config = rendered(project / "build" / name)
    original = Original(dockerfile)
    assert actions == original.actions
    assert config == original.config
    reported = {int(n) for n in re.findall(r"^\s+line (\d+): ", out, flags=re.MULTILINE)}
    assert reported == original.marked
    toml = (project / "images" / name / "image.toml").read_text()
    for number in reported:  # each one is in the recipe too, beside the layer that keeps it
        assert f"UNMAPPED Dockerfile line {number}:" in toml


def test_the_field_fix_is_kept_as_a_repin_and_the_launch_settings_stay(project: Path) -> None:
    """The issue's case: the --no-deps re-pin, VLLM_BLOCK_SIZE from an ARG, the CMD and the
    mode of the launch script all survive, and the re-pin overrides the nightly's layer."""
    assert main(["import", str(HERE / "vllm-field" / "Dockerfile")]) == 0
    recipe = load_recipe(DirectorySource(project), "vllm-field")
    nightly, repin, cutlass = recipe.stage("v2").layers
    assert repin.no_deps and repin.override == ("nvidia-nccl-cu13==2.30.7",)  # type: ignore[union-attr]
    assert nightly.override == ("nvidia-nccl-cu13==2.30.7",)  # type: ignore[union-attr]
    assert not cutlass.no_deps  # type: ignore[union-attr]
    env = dict(recipe.stage("v1").layers[0].values)  # type: ignore[union-attr]
    assert env["VLLM_BLOCK_SIZE"] == "64"
    assert recipe.config.cmd == ("--block-size", "64", "--tensor-parallel-size", "2")
    assert (
        recipe.config.entrypoint == ("/opt/glm53/serve.sh",) and recipe.config.user == "1000:1000"
    )
    assert recipe.policy.preset == "cuda-ml"  # a CUDA image gets the field's rules
    assert "cutlass-dsl" in [group.name for group in recipe.policy.lockstep]
    [script] = [layer for layer in recipe.stage("v1").layers if getattr(layer, "mode", None)]
    assert (script.dest, script.mode) == ("/opt/glm53/serve.sh", "755")  # type: ignore[union-attr]


def test_a_plan_reports_true_reasons() -> None:
    data = (HERE / "pytorch-serve" / "Dockerfile").read_bytes()
    plan = plan_import(data, "x", lambda relpath: True)
    assert plan.cuda == "cpu" and "preset" not in plan.recipe_toml()  # a CPU image: no preset
    reasons = {item.line: item.reason for item in plan.unmapped}
    assert "requirements files of the image are not read" in reasons[7]
    assert "editable install" in reasons[12]
    assert "a RUN after USER (line 17)" in reasons[19]
    assert "ADD from a URL" in reasons[21] and "VOLUME has no recipe key" in reasons[23]


def test_credentials_in_an_index_url_never_reach_the_recipe() -> None:
    index = b"https://u:tok@pkgs.example.com/simple"
    data = b"FROM python:3.12\nRUN pip install --extra-index-url " + index + b" a==1\n"
    plan = plan_import(data, "x", lambda relpath: False)
    assert "tok" not in plan.recipe_toml() and plan.indexes == {
        "pkgs-example": "https://pkgs.example.com/simple"
    }
    assert all(b"tok" not in data for data in plan.requirements.values())


def test_an_existing_recipe_is_never_replaced(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(HERE / "sglang-dflash2", project / "ctx")
    mine = project / "images" / "ctx" / "image.toml"
    mine.parent.mkdir(parents=True)
    mine.write_text("# mine\n")
    assert main(["import", "ctx/Dockerfile"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert mine.read_text() == "# mine\n"
    assert main(["import", "ctx/Dockerfile", "--image", "sglang"]) == 0
    assert (project / "images/sglang/files").exists() is False
    assert (project / "images/sglang/patches/v3_dflash2_sm12x.py").is_file()
    assert sorted(p.name for p in (project / "images").iterdir()) == ["ctx", "sglang"]
