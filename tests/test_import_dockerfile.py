"""``layer-audit import``: field-style Dockerfiles become recipes that render back to
Dockerfiles doing what the originals did, plus the guard.

For every Dockerfile under ``tests/dockerfiles/`` the original is read by this module's own
reading of Docker's rules, stage by stage: what each stage starts from (a stage or an image),
its ARG declarations, ENV values as written (Docker expands them at build time, so the
rendered ones must be the same text), WORKDIR applied to relative paths, COPY sources as the
digest of their bytes with mode and owner (``COPY --from`` as the stage and path), every RUN as
its ``&&`` parts (a pip install as its requirement set and options, anything else as its text)
with its mounts, heredoc bodies, and each stage's image configuration as Docker leaves it,
inherited down the stage graph. The rendered Dockerfile is read back the same way from its
build context, modulo the guard and the lock-driven pip commands, its stages mapped back to
the Dockerfile's by their comments; any difference is a loss and fails.

Lines after a ``# unmapped`` marker are exactly the ones import must list as not kept, each
with its reason; lines after ``# unlocked`` exactly the installs it must list as not locked. A
``# import with: ARGS`` comment gives the command line's extra arguments.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser

from audit.cli.main import main
from audit.dockerfile import heredoc as dockerfile_heredoc
from audit.dockerfile.importer import ImportOptions, plan_import
from audit.project.sources import DirectorySource
from audit.recipe.model import PipLayer
from audit.recipe.parse import load_recipe

HERE = Path(__file__).parent / "dockerfiles"
FIELD = sorted(p.name for p in HERE.iterdir() if (p / "Dockerfile").is_file())
CONFIG = ("CMD", "ENTRYPOINT", "USER", "EXPOSE", "LABEL", "HEALTHCHECK", "STOPSIGNAL", "SHELL")
VALUED = ("-i", "--index-url", "--extra-index-url", "--root-user-action", "--progress-bar")
QUIET = ("-q", "--quiet", "--no-cache-dir", "--system", "--break-system-packages")
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


def parts(command: str) -> list[str]:
    """``a && b`` as its commands, quotes respected; any other shell syntax keeps it whole."""
    bare = re.sub(r"\"[^\"]*\"|'[^']*'", "", command)
    if re.search(r"[;|()`]|\$\(|\bif\b", bare):
        return [command.strip()]
    return [p.strip() for p in re.split(r"&&(?=(?:[^\"']|\"[^\"]*\"|'[^']*')*$)", command)]


def install(words: list[str]) -> Action | None:
    """('install', requirements, options, indexes) of a plain pip install, else None."""
    while words and re.match(r"^[A-Za-z_]\w*=", words[0]):
        return None  # an assignment before the install: a plain command
    if "install" not in words or not any(re.search(r"\bpip3?$", w) for w in words[:3]):
        return None
    args = words[words.index("install") + 1 :]
    reqs, options, indexes = [], [], []
    while args:
        word = args.pop(0)
        if word in VALUED:
            value = args.pop(0)
            option = "--index-url" if word == "-i" else word
            indexes += [(option, value)] if "index" in option else []
        elif word.startswith("-"):
            options += [] if word in QUIET else [word]
        else:
            reqs.append(word)
    indexes = [i for i in indexes if i != ("--index-url", "https://pypi.org/simple")]
    return ("install", tuple(sorted(reqs)), tuple(sorted(options)), tuple(sorted(indexes)))


def run_actions(command: str, mounts: tuple[Any, ...], known: dict[str, str]) -> list[Action]:
    """Each ``&&`` part: a pip install as what it installs (the stage's ARGs in its words, as
    the shell reads them), anything else as its text."""
    found: list[Action] = []
    for part in parts(command):
        try:
            words = shlex.split(substitute(part, known))
        except ValueError:
            words = []
        plain = install(words)
        found.append((plain or ("sh", " ".join(part.split())), mounts))
    return found


def mounts_of(
    flags: list[str], names: dict[str, str], context: Callable[[str], str]
) -> tuple[Any, ...]:
    """Each --mount as sorted key=value pairs, BuildKit's aliases and stage names resolved, a
    bind from the context as the digest of what it mounts; the pip cache left out (a pip layer
    has its own)."""
    found = []
    for flag in flags:
        if not flag.startswith("--mount="):
            continue
        pairs = dict(p.partition("=")[::2] for p in flag[len("--mount=") :].split(","))
        pairs = {{"src": "source", "dst": "target", "ro": "readonly"}.get(k, k): v
                 for k, v in pairs.items()}  # fmt: skip
        pairs.setdefault("type", "bind")
        if "from" in pairs:
            pairs["from"] = names.get(pairs["from"], pairs["from"])
        elif pairs["type"] == "bind":
            pairs["source"] = context(pairs.get("source", "."))
        if pairs.get("target") == "/root/.cache/pip":
            continue
        found.append(tuple(sorted(pairs.items())))
    return tuple(sorted(found))


@dataclass
class StageRead:
    """One Dockerfile stage as either side does it."""

    parent: str  # a stage's name, or an image
    actions: list[Action] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)  # what the stage itself sets
    env: dict[str, str] = field(default_factory=dict)  # ENV in force at its end
    workdir: str = ""
    args: dict[str, str] = field(default_factory=dict)  # its ARGs' values


def configure(config: dict[str, Any], kind: str, value: str) -> None:
    """One configuration instruction, normalised for comparison."""
    if kind == "LABEL":
        config.setdefault(kind, {}).update(w.split("=", 1) for w in shlex.split(value))
    elif kind == "EXPOSE":
        config[kind] = sorted({*config.get(kind, []), *value.split()})
    elif kind == "HEALTHCHECK":
        options, _, command = value.partition("CMD ")
        config[kind] = (sorted(options.split()), command_form(command))
    elif kind in ("CMD", "ENTRYPOINT", "SHELL"):
        config[kind] = command_form(value)
        config.setdefault("_set", set()).add(kind)
    else:
        config[kind] = value.strip()


def command_form(value: str) -> Any:
    value = value.strip()
    return json.loads(value) if value.startswith("[") else value


def effective(stages: dict[str, StageRead]) -> dict[str, dict[str, Any]]:
    """Each stage's image configuration as Docker leaves it: inherited from the stage it
    builds on, its own on top (an ENTRYPOINT it sets drops a CMD it inherits)."""
    found: dict[str, dict[str, Any]] = {}
    for name, stage in stages.items():
        config = json.loads(json.dumps(found.get(stage.parent, {})))
        own = dict(stage.config)
        own_set = own.pop("_set", set())
        if "ENTRYPOINT" in own_set and "CMD" not in own_set:
            config.pop("CMD", None)
        labels = {**config.get("LABEL", {}), **own.pop("LABEL", {})}
        config.update(own)
        config |= {"LABEL": labels} if labels else {}
        if config.get("USER") in ("root",):
            config.pop("USER")
        found[name] = config
    return found


class Original:
    """A Dockerfile's stages, read by Docker's rules."""

    def __init__(self, path: Path, build_args: dict[str, str]) -> None:
        self.folder = path.parent
        self.marked = marked_lines(path, "unmapped")
        self.args: dict[str, str] = {}
        self.stages: dict[str, StageRead] = {}
        self.build_args = build_args
        for item in instructions(path):
            self.read(item)

    def read(self, item: dict[str, Any]) -> None:
        kind, value = item["instruction"].upper(), item["value"]
        line = item["startline"] + 1
        if kind == "FROM":
            self.from_(value)
        elif kind == "ARG":
            self.arg(value, skip=line in self.marked)
        elif not self.stages:
            return
        elif kind == "ENV" and line not in self.marked:
            self.env_(value)
        elif kind in CONFIG:
            configure(self.stage.config, kind, substitute(value, self.known()))
        elif kind == "RUN":
            self.run_(value, item.get("heredocs", []))
        elif kind == "COPY" or (kind == "ADD" and "://" not in value):
            self.copy_(value, item.get("heredocs", []))
        elif kind == "WORKDIR":
            self.workdir = str(Path(self.workdir or "/") / substitute(value, self.known()))
            self.stage.actions.append(("workdir", self.workdir))

    @property
    def stage(self) -> StageRead:
        return self.stages[self.name]

    def known(self) -> dict[str, str]:
        return {**self.stage.args, **self.stage.env}

    @property
    def workdir(self) -> str:
        return self.stage.workdir

    @workdir.setter
    def workdir(self, path: str) -> None:
        self.stage.workdir = path

    def from_(self, value: str) -> None:
        words = [w for w in substitute(value, self.args).split() if not w.startswith("--")]
        self.name = words[2].lower() if len(words) >= 3 else str(len(self.stages))
        parent = self.stages.get(words[0].lower())
        read = StageRead(words[0].lower() if parent else words[0].split("@")[0])
        if parent:
            read.env, read.workdir = dict(parent.env), parent.workdir
        self.stages[self.name] = read

    def arg(self, value: str, skip: bool) -> None:
        for word in shlex.split(value):
            name, equals, default = word.partition("=")
            if not self.stages:
                self.args[name] = self.build_args.get(name, substitute(default, self.args))
                continue
            if skip:
                continue
            text = self.build_args.get(name, default if equals else self.args.get(name, ""))
            self.stage.args[name] = text
            self.stage.actions.append(("arg", name))

    def env_(self, value: str) -> None:
        for word in shlex.split(value):
            name, _, text = word.partition("=")
            self.stage.env[name] = substitute(text, self.known())
            self.stage.actions.append(("env", name, text))

    def copy_(self, value: str, heredocs: list[dockerfile_heredoc.Heredoc]) -> None:
        if heredocs:  # COPY <<EOF dest: the body, variables expanded (the delimiter unquoted)
            flags = dict(w[2:].split("=", 1) for w in value.split() if w.startswith("--"))
            dest = value.rsplit(maxsplit=1)[-1]
            data = substitute(heredocs[0].body, self.known()).encode()
            where = hashlib.sha256(data).hexdigest()
            self.stage.actions.append(("copy", dest, where, flags.get("chmod"), flags.get("chown")))
            return
        words = shlex.split(substitute(value, self.known()))
        flags = dict(w[2:].split("=", 1) for w in words if w.startswith("--"))
        *sources, dest = [w for w in words if not w.startswith("--")]
        if not dest.startswith("/"):
            dest = str(Path(self.workdir) / dest) + (
                "/" if dest.endswith("/") or dest == "." else ""
            )
        for source in sources:
            if "from" in flags:
                where = f"{flags['from'].lower()}:{source}"
            else:
                where = digest(self.folder / source)
            self.stage.actions.append(("copy", dest, where, flags.get("chmod"), flags.get("chown")))

    def run_(self, value: str, heredocs: list[dockerfile_heredoc.Heredoc]) -> None:
        leading = re.match(r"^((?:--\S+\s+)*)", value.strip())
        flags = leading.group(1).split() if leading else []
        command = value.strip()[leading.end() if leading else 0 :]
        mounts = mounts_of(flags, {}, lambda source: digest(self.folder / source))
        if heredocs:
            program = command.partition(heredocs[0].mark)[0].strip()
            self.stage.actions.append(("heredoc", program, heredocs[0].body, mounts))
            return
        self.stage.actions += run_actions(command, mounts, self.stage.args)


class Rendered:
    """A rendered build context read back, its stages named as the Dockerfile's."""

    def __init__(self, context: Path) -> None:
        self.context = context
        self.stages: dict[str, StageRead] = {}
        self.names: dict[str, str] = {}  # vK -> the Dockerfile's stage name
        self.args: dict[str, str] = {}
        lines = (context / "Dockerfile").read_text().splitlines()
        origins = dict(enumerate(lines))
        self.redeclared = False
        for item in instructions(context / "Dockerfile"):
            self.read(item, origins.get(item["startline"] - 1, ""))

    def read(self, item: dict[str, Any], origin: str) -> None:
        kind, value = item["instruction"].upper(), item["value"]
        if kind == "FROM":
            self.from_(value, origin)
        elif kind == "ARG" and not self.stages:
            name, _, default = value.partition("=")
            self.args[name] = json.loads(default)
        elif kind == "ARG" and "LAYER_AUDIT" not in value and not self.redeclared:
            self.stage.actions.append(("arg", value.strip()))
            self.stage.args[value.strip()] = self.args.get(value.strip(), "")
        elif kind == "ENV":
            self.stage.actions += [("env", *w.split("=", 1)) for w in shlex.split(value)]
        elif kind == "WORKDIR":
            self.stage.actions.append(("workdir", value))
        elif kind == "COPY":
            self.copy_(value)
        elif kind == "RUN":
            self.stage.actions += self.run_(value)
        elif kind in CONFIG:
            configure(self.stage.config, kind, value)
        if kind not in ("ARG", "FROM"):
            self.redeclared = False

    @property
    def stage(self) -> StageRead:
        return self.stages[self.name]

    def from_(self, value: str, origin: str) -> None:
        source, _, vk = value.split()
        described = re.search(r"Dockerfile stage (\S+) \(line \d+\)(: after it)?", origin)
        assert described, origin
        self.name, after = described.group(1), bool(described.group(2))
        self.names[vk] = self.name
        self.redeclared = after  # the first ARG layer of a second half declares what was
        if after:
            return  # the same Dockerfile stage goes on
        parent = self.names.get(source)
        self.stages[self.name] = StageRead(parent if parent else source.split("@")[0])

    def copy_(self, value: str) -> None:
        flags = dict(w[2:].split("=", 1) for w in value.split() if w.startswith("--"))
        source, dest = json.loads(value[value.index("[") :])
        if "from" in flags:
            where = f"{self.names.get(flags['from'], flags['from'])}:{source}"
        else:
            where = digest(self.context / source)
        self.stage.actions.append(("copy", dest, where, flags.get("chmod"), flags.get("chown")))

    def run_(self, value: str) -> list[Action]:
        flags = re.findall(r"--mount=\S+", value)
        ours = ("source=_guard,", "id=pip-ca", "id=pip-netrc", "target=/tmp/layer-audit/")
        flags = [f for f in flags if not any(o in f for o in ours)]
        mounts = mounts_of(flags, self.names, lambda source: digest(self.context / source))
        if "PIP_CONFIG_FILE=/dev/null" in value:  # a pip layer: its first install is the layer's
            found = re.search(r"PIP_CONFIG_FILE=/dev/null (.*?) -r (\S+)", value)
            assert found, value
            source = re.search(r"source=(requirements/[^,]+),target=", value)
            assert source, value
            lines = (self.context / source.group(1)).read_text().splitlines()
            reqs = [line for line in lines if line and not line.startswith("#")]
            words = [w for w in shlex.split(found.group(1)) if "=" not in w or w.startswith("-")]
            plain = install([*words, *reqs])
            assert plain is not None, value
            return [(plain, mounts)]
        run = re.search(r"&& \( (.*) \)( < (\S+))?(\s+&& if \[ -z|\s*$)", value, flags=re.DOTALL)
        assert run, value
        command = run.group(1)
        if command.startswith(": 'UNMAPPED Dockerfile line"):
            return []
        if not run.group(2):
            return run_actions(command, mounts, self.stage.args)
        stdin = re.search(r"source=(files/heredocs/\S+),target=", value)
        assert stdin, value
        program = "" if command == 'sh -c "$(cat)"' or command.endswith(" /dev/stdin") else command
        heredoc_mounts = tuple(m for m in mounts if ("source", stdin.group(1)) not in m)
        return [("heredoc", program, (self.context / stdin.group(1)).read_text(), heredoc_mounts)]


def marked_lines(dockerfile: Path, marker: str) -> set[int]:
    """1-based numbers of the lines right after a ``# <marker>`` line."""
    lines = dockerfile.read_text().splitlines()
    return {number + 2 for number, line in enumerate(lines) if line.strip() == f"# {marker}"}


def import_args(dockerfile: Path) -> list[str]:
    found = re.search(r"^# import with: (.*)$", dockerfile.read_text(), re.MULTILINE)
    return shlex.split(found.group(1)) if found else []


def reported(out: str, heading: str) -> set[int]:
    """The line numbers import printed under the heading that starts with ``heading``."""
    section = out.split(heading, 1)[1] if heading in out else ""
    section = re.split(r"\n\S", "\n" + section.split("\n", 1)[-1])[0] if section else ""
    return {int(n) for n in re.findall(r"^\s+line (\d+): ", section, flags=re.MULTILINE)}


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
    extra = import_args(dockerfile)
    assert main(["import", str(dockerfile), *extra]) == 0
    out = capsys.readouterr().out
    assert main(["render", name]) == 0
    rendered = Rendered(project / "build" / name)
    build_args = dict(a.split("=", 1) for a in extra[1::2] if extra[0::2])
    original = Original(dockerfile, build_args)
    assert list(rendered.stages) == list(original.stages)
    for stage, read in original.stages.items():
        mine = rendered.stages[stage]
        assert (stage, mine.parent) == (stage, read.parent)
        assert (stage, mine.actions) == (stage, read.actions)
    assert effective(rendered.stages) == effective(original.stages)
    assert reported(out, "line(s) not kept") == marked_lines(dockerfile, "unmapped")
    assert reported(out, "install(s) not locked") == marked_lines(dockerfile, "unlocked")
    toml = (project / "images" / name / "image.toml").read_text()
    for number in marked_lines(dockerfile, "unmapped"):  # each one beside what keeps it
        assert f"line {number}" in toml


def test_the_field_fix_is_kept_as_a_repin_and_the_launch_settings_stay(project: Path) -> None:
    """The issue's case: the --no-deps re-pin, VLLM_BLOCK_SIZE from a build argument, the CMD
    and the mode of the launch script all survive, and the re-pin overrides the nightly."""
    assert main(["import", str(HERE / "vllm-field" / "Dockerfile")]) == 0
    recipe = load_recipe(DirectorySource(project), "vllm-field")
    nightly, repin, cutlass = recipe.stage("v2").layers
    assert isinstance(repin, PipLayer) and repin.no_deps
    assert repin.override == ("nvidia-nccl-cu13==2.30.7",)
    assert isinstance(nightly, PipLayer) and nightly.override == ("nvidia-nccl-cu13==2.30.7",)
    assert isinstance(cutlass, PipLayer) and not cutlass.no_deps
    env = dict(recipe.stage("v1").layers[1].values)  # type: ignore[union-attr]
    assert env["VLLM_BLOCK_SIZE"] == "${BLOCK_SIZE}" and ("BLOCK_SIZE", "64") in recipe.args
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
    assert plan.cuda == "cu130" and 'preset = "cuda-ml"' in plan.recipe_toml()  # NGC 25.10
    unlocked = {item.line: item.reason for item in plan.unlocked}
    assert "a requirements file of the image" in unlocked[7]
    assert "--upgrade moves installed packages" in unlocked[9]
    assert "editable install" in unlocked[13]
    assert "in an && chain with other commands" in unlocked[15]
    reasons = {item.line: item.reason for item in plan.unmapped}
    assert "a RUN after USER (line 19)" in reasons[21]
    assert "ADD from a URL" in reasons[23] and "VOLUME has no recipe key" in reasons[25]


def test_credentials_in_an_index_url_never_reach_the_recipe() -> None:
    index = b"https://u:tok@pkgs.example.com/simple"
    data = b"FROM python:3.12\nRUN pip install --extra-index-url " + index + b" a==1\n"
    plan = plan_import(data, "x", lambda relpath: False)
    assert "tok" not in plan.recipe_toml() and plan.indexes == {
        "pkgs-example": "https://pkgs.example.com/simple"
    }
    assert all(b"tok" not in data for data in plan.requirements.values())
    assert plan.interpreter == "/usr/local/bin/python3"  # where the python image has it


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


def test_strict_fails_on_what_was_not_kept_and_still_writes_it(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dockerfile = HERE / "pytorch-serve" / "Dockerfile"
    assert main(["import", str(dockerfile), "--strict"]) == 1
    assert "3 line(s) not kept" in capsys.readouterr().out
    assert (project / "images/pytorch-serve/image.toml").is_file()  # written, for review
    assert main(["import", str(HERE / "sglang-dflash2" / "Dockerfile"), "--strict"]) == 0


def test_an_unknown_ngc_release_is_listed_not_taken_for_cpu() -> None:
    data = b"FROM nvcr.io/nvidia/pytorch:27.03-py3\nRUN pip install a==1\n"
    plan = plan_import(data, "x", lambda relpath: False)
    [item] = plan.unmapped
    assert "an NGC release whose CUDA import does not know" in item.reason
    options = ImportOptions(cuda="cu132")
    assert plan_import(data, "x", lambda r: False, options).cuda == "cu132"
