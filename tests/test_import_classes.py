"""``import`` of what real serving Dockerfiles do, one class at a time (issue 34): the stage
graph, RUN mounts, build arguments, per-layer indexes, CUDA from the base, ``&&`` chains,
``COPY . .`` then a sub-path, installs in scripts and branches, a base without Python. Each is
checked on the recipe the import writes; the field Dockerfiles and their render are checked
whole in ``test_import_dockerfile.py``, and built in ``test_import_roundtrip_docker.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from audit.cli.main import main
from audit.dockerfile.bases import cuda_of, has_python
from audit.dockerfile.importer import ImportOptions, ImportPlan, plan_import
from audit.project.sources import DirectorySource
from audit.recipe.model import ArgLayer, CopyLayer, Mount, PipLayer, Recipe, RunLayer
from audit.recipe.parse import load_recipe
from audit.render.write import render


def plan(text: str, **options: object) -> ImportPlan:
    return plan_import(text.encode(), "x", lambda relpath: True, ImportOptions(**options))  # type: ignore[arg-type]


def imported(root: Path, text: str, *args: str, files: dict[str, str] | None = None) -> Recipe:
    """Import ``text`` (with its context ``files``) into the project at ``root``; the recipe."""
    context = root / "ctx"
    for relpath, body in {"Dockerfile": text, **(files or {})}.items():
        (context / relpath).parent.mkdir(parents=True, exist_ok=True)
        (context / relpath).write_text(body)
    assert main(["import", str(context / "Dockerfile"), "--image", "x", *args]) == 0
    return load_recipe(DirectorySource(root), "x")


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def reasons(items: list[object]) -> str:
    return "\n".join(f"{i.line}: {i.reason}" for i in items)  # type: ignore[attr-defined]


# --- the stage graph -------------------------------------------------------------------------


def test_stages_keep_their_graph_and_every_target(root: Path) -> None:
    recipe = imported(
        root,
        "FROM python:3.12 AS base\nRUN pip install a==1\n"
        "FROM golang:1.23 AS tools\nRUN go build -o /out/tool ./tool\n"
        "FROM base AS test\nRUN pip install pytest==8.3.0\n"
        "FROM base AS serve\nCOPY --from=tools /out/tool /usr/local/bin/tool\n"
        "COPY --from=1 /out/tool /opt/tool\nCOPY --from=busybox:1.36 /bin/busybox /bin/\n"
        'ENTRYPOINT ["tool"]\n',
    )
    test, serve = recipe.stages[2:]
    assert [recipe.from_ref(s) for s in recipe.stages] == ["python:3.12", "golang:1.23", "v1", "v1"]
    assert [s.target for s in recipe.stages] == ["base", "tools", "test", "serve"]
    assert [recipe.audited(s) for s in recipe.stages] == [True, False, True, True]
    assert serve.layers == (
        CopyLayer("/out/tool", "/usr/local/bin/tool", from_="v2"),
        CopyLayer("/out/tool", "/opt/tool", from_="v2"),
        CopyLayer("/bin/busybox", "/bin/", from_="busybox:1.36"),
    )
    assert recipe.config.entrypoint == ("tool",) and test.config.entrypoint is None
    assert recipe.needs("serve") == ("v1", "v2", "v4")


def test_a_config_of_a_stage_is_its_own_and_a_child_inherits_it(root: Path) -> None:
    recipe = imported(
        root,
        'FROM python:3.12 AS base\nUSER 1000\nCMD ["a"]\n'
        'FROM base AS child\nRUN echo as root in the recipe\nENTRYPOINT ["b"]\n',
    )
    assert recipe.stages[0].config.user == "1000" and recipe.stages[0].config.cmd == ("a",)
    render(root, recipe)
    child = (root / "build/x/Dockerfile").read_text().split("FROM v1 AS v2")[1]
    assert child.lstrip().startswith("ARG LAYER_AUDIT_NO_GUARD\nUSER root\n")
    assert child.rstrip().endswith('USER 1000\nENTRYPOINT ["b"]')


def test_a_run_after_an_inherited_user_is_listed() -> None:
    found = plan("FROM python:3.12 AS a\nUSER app\nFROM a AS b\nRUN touch /x\n")
    assert "a RUN after USER (line 2)" in reasons(found.unmapped)  # type: ignore[arg-type]


# --- RUN --mount ---------------------------------------------------------------------------


def test_every_mount_type_stays_on_its_layer(root: Path) -> None:
    recipe = imported(
        root,
        "FROM python:3.12 AS build\nRUN echo\n"
        "FROM python:3.12 AS app\n"
        "RUN --mount=type=cache,target=/root/.cache/uv,sharing=locked \\\n"
        "    --mount=type=secret,id=hf,dst=/run/secrets/hf,required=true \\\n"
        "    --mount=type=ssh --mount=type=tmpfs,target=/scratch \\\n"
        "    --mount=type=bind,from=build,src=/dist,target=/dist,ro \\\n"
        "    --mount=type=bind,source=scripts,target=/opt/scripts \\\n"
        "    ./run.sh\n"
        "RUN --mount=type=cache,target=/root/.cache/pip pip install a==1\n",
        files={"scripts/run.sh": "echo run\n"},
    )
    run, pip = recipe.stages[1].layers
    assert isinstance(run, RunLayer) and run.mounts == (
        Mount("cache", "/root/.cache/uv", options=(("sharing", "locked"),)),
        Mount("secret", "/run/secrets/hf", id="hf", options=(("required", "true"),)),
        Mount("ssh"),
        Mount("tmpfs", "/scratch"),
        Mount("bind", "/dist", "/dist", "v1", options=(("readonly", "true"),)),
        Mount("bind", "/opt/scripts", "scripts"),
    )
    assert isinstance(pip, PipLayer) and pip.mounts == (Mount("cache", "/root/.cache/pip"),)
    assert (root / "images/x/scripts/run.sh").read_text() == "echo run\n"  # the bind's source


def test_a_flag_the_recipe_cannot_keep_is_listed() -> None:
    found = plan(
        "FROM python:3.12\nRUN --network=none --mount=type=secret,id=a,env=A_KEY make\n"
        "RUN --security=insecure true\n"
    )
    text = reasons(found.unmapped)  # type: ignore[arg-type]
    assert "RUN --network=none has no recipe key" in text and "key env" in text
    assert "--security=insecure" in text


# --- build arguments -----------------------------------------------------------------------


def test_build_arguments_stay_arguments_and_platform_ones_are_declared(root: Path) -> None:
    recipe = imported(
        root,
        "ARG CUDA=13.0.1\nARG TORCH=2.9.0\nFROM python:3.12\nARG CUDA\nARG TARGETPLATFORM\n"
        "ARG TORCH\nENV CUDA_HOME=/usr/local/cuda-${CUDA}\n"
        'RUN if [ "$TARGETPLATFORM" = "linux/arm64" ]; then echo arm; fi\n'
        'RUN pip install "torch==${TORCH}"\n',
    )
    assert recipe.args == (("CUDA", "13.0.1"), ("TORCH", "2.9.0"))
    arg, platform, torch, env, run, pip = recipe.stages[0].layers
    assert (arg, platform, torch) == (ArgLayer(("CUDA",)), ArgLayer(("TARGETPLATFORM",)),
                                      ArgLayer(("TORCH",)))  # fmt: skip
    assert env.values == (("CUDA_HOME", "/usr/local/cuda-${CUDA}"),) and env.expand  # type: ignore[union-attr]
    assert isinstance(run, RunLayer) and "$TARGETPLATFORM" in run.command  # never substituted
    assert (root / "images/x" / pip.requirements).read_text().endswith("torch==2.9.0\n")  # type: ignore[union-attr]


def test_what_freezes_an_argument_is_listed_and_import_takes_another_value() -> None:
    text = (
        "ARG TORCH=2.9.0\nFROM python:3.12 AS a\nARG TORCH\nARG DIR=/opt\nWORKDIR ${DIR}\n"
        'RUN pip install "torch==${TORCH}"\nFROM python:3.12 AS b\nARG DIR=/srv\n'
    )
    found = plan(text)
    listed = reasons(found.unmapped)  # type: ignore[arg-type]
    assert "--build-arg TORCH no longer changes what this layer installs" in listed
    assert "--build-arg DIR no longer changes it" in listed  # the WORKDIR
    assert "one default per argument (DIR = '/opt'): in v2 it was '/srv'" in listed
    other = plan(text, build_args=(("TORCH", "2.10.0"),))
    assert other.requirements["requirements/v1-04.in"].endswith(b"torch==2.10.0\n")


# --- per-layer indexes ---------------------------------------------------------------------


def test_an_index_url_stays_on_its_layer_unless_every_layer_names_it() -> None:
    one = plan(
        "FROM python:3.12\nRUN pip install --index-url https://download.pytorch.org/whl/cu130 "
        "torch==2.9.0\nRUN pip install vllm==0.11.0\n"
    )
    assert one.index_url == "https://pypi.org/simple"
    assert 'primary_index = "download-pytorch-cu130"' in one.recipe_toml()
    mirror = "https://mirror.example.com/simple"
    every = plan(
        f"FROM python:3.12\nRUN pip install -i {mirror} a==1\nRUN pip install -i {mirror} b==2\n"
    )
    assert (
        every.index_url == mirror
        and every.indexes == {}
        and "primary_index" not in every.recipe_toml()
    )


# --- CUDA from the base --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "cuda"),
    [
        ("nvidia/cuda:13.0.1-devel-ubuntu24.04", "cu130"),
        ("nvcr.io/nvidia/cuda:13.0.2-cudnn-runtime-ubuntu24.04", "cu130"),
        ("nvidia/cuda:12.8.1-devel-ubuntu22.04", "cu128"),
        ("nvcr.io/nvidia/pytorch:25.09-py3", "cu130"),
        ("nvcr.io/nvidia/pytorch:25.12-py3", "cu131"),
        ("nvcr.io/nvidia/vllm:25.10-py3", "cu130"),
        ("pytorch/pytorch:2.9.0-cuda13.0-cudnn9-devel", "cu130"),
        ("lmsysorg/sglang:v0.5.9-cu130-arm64", "cu130"),
        ("python:3.12-slim", None),
    ],
)
def test_the_cuda_of_a_base_comes_from_its_reference(base: str, cuda: str | None) -> None:
    assert cuda_of(base) == (cuda, True)
    assert plan(f"FROM {base}\nRUN true\n").cuda == (cuda or "cpu")


def test_a_base_through_an_arg_default_gives_its_cuda_and_the_preset() -> None:
    found = plan(
        "ARG CUDA_VERSION=13.0.1\nARG BASE=nvcr.io/nvidia/cuda:${CUDA_VERSION}-devel-ubuntu24.04\n"
        "FROM ${BASE}\nRUN apt-get install -y python3\n"
    )
    assert found.cuda == "cu130" and 'preset = "cuda-ml"' in found.recipe_toml()
    assert found.base == "nvcr.io/nvidia/cuda:13.0.1-devel-ubuntu24.04"


def test_an_ngc_release_the_table_lacks_is_not_guessed() -> None:
    assert cuda_of("nvcr.io/nvidia/pytorch:24.01-py3") == (None, False)
    assert not has_python("nvcr.io/nvidia/cuda:13.0.1-base-ubuntu24.04")
    assert has_python("nvcr.io/nvidia/pytorch:25.09-py3")


# --- && chains -----------------------------------------------------------------------------


def test_a_chain_stays_one_layer_unless_every_part_is_an_install() -> None:
    found = plan(
        "FROM python:3.12\n"
        "RUN apt-get update && apt-get install -y git && rm -rf /var/lib/apt/lists/*\n"
        "RUN pip install a==1 && pip install --no-deps b==2\n"
        "RUN pip install c==3 && python -c 'import c'\n"
    )
    rows = [layer.toml.splitlines()[0] for layer in found.stages[0].layers]
    assert rows == [
        'run = "apt-get update && apt-get install -y git && rm -rf /var/lib/apt/lists/*"',
        'pip = "requirements/v1-02.in"', 'pip = "requirements/v1-03.in"',
        """run = "pip install c==3 && python -c 'import c'\"""",
    ]  # fmt: skip
    assert [i.line for i in found.unlocked] == [4]


# --- COPY . . and then a path under it -------------------------------------------------------


@pytest.mark.parametrize("order", ["dot first", "sub-path first"])
def test_copy_dot_and_a_sub_path_both_come_in(root: Path, order: str) -> None:
    copies = ["COPY . .", "COPY requirements/common.txt requirements/common.txt"]
    lines = copies if order == "dot first" else copies[::-1]
    files = {"requirements/common.txt": "numpy\n", "app.py": "print(1)\n"}
    imported(root, "FROM python:3.12\nWORKDIR /app\n" + "\n".join(lines) + "\n", files=files)
    assert (root / "images/x/context/requirements/common.txt").read_text() == "numpy\n"
    assert (root / "images/x/context/app.py").is_file()


# --- installs in scripts and branches --------------------------------------------------------


def test_installs_in_scripts_and_branches_are_listed_as_not_locked(root: Path) -> None:
    text = (
        "FROM python:3.12\nCOPY install.sh check.sh /opt/\n"
        "RUN /opt/install.sh\nRUN bash /opt/check.sh\n"
        'RUN if [ -n "$X" ]; then pip install a==1; fi\nRUN /usr/local/bin/vendor-setup.sh\n'
    )
    files = {"install.sh": "#!/bin/sh\nuv pip install --system vllm\n", "check.sh": "true\n"}
    imported(root, text, files=files)
    found = plan_import(text.encode(), "x", lambda r: True, context_read=files.get)
    by_line = {i.line: i.reason for i in found.unlocked}
    assert "inside /opt/install.sh, a script from the build context" in by_line[3]
    assert 4 not in by_line  # check.sh installs nothing
    assert "inside shell control flow" in by_line[5]
    assert "which the build context does not hold" in by_line[6]


# --- a base without Python -----------------------------------------------------------------


def test_a_base_without_python_gets_a_prelude_up_to_its_python() -> None:
    found = plan(
        "ARG PY=3.12\nFROM nvidia/cuda:13.0.1-runtime-ubuntu24.04 AS runtime\nARG PY\n"
        "RUN apt-get update && apt-get install -y python${PY} python3-pip\n"
        "RUN pip install --break-system-packages vllm==0.11.0\n"
    )
    pre, rest = found.stages
    assert found.base_stage == "v1" and pre.unaudited and not rest.unaudited
    assert rest.parent is None and rest.target == "runtime"  # v2 builds on v1, the default
    assert rest.layers[0].toml == 'arg = "PY"'  # declared again: a recipe stage has its own
    assert rest.layers[1].toml.startswith("pip =") and found.break_system_packages


def test_the_prelude_ends_where_the_audited_venv_appears() -> None:
    found = plan(
        "FROM ubuntu:24.04\nRUN apt-get install -y python3 python3-venv\n"
        "RUN python3 -m venv /opt/venv\nENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH\n"
        "RUN pip install a==1\n"
    )
    assert found.interpreter == "/opt/venv/bin/python" and found.base_stage == "v1"
    assert [layer.line for layer in found.stages[0].layers] == [2, 3]


def test_a_python_less_base_that_never_gets_one_is_listed() -> None:
    found = plan("FROM ubuntu:24.04\nRUN apt-get update\n")
    assert found.base_stage is None
    assert "set base_stage in image.toml" in reasons(found.unmapped)  # type: ignore[arg-type]


def test_a_root_that_names_no_image_is_bad_input_with_its_line(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    context = root / "ctx"
    context.mkdir()
    (context / "Dockerfile").write_text(
        "ARG BUILDER\nFROM ${BUILDER} AS build\nRUN make\nFROM python:3.12\n"
        "COPY --from=build /out /out\n"
    )
    assert main(["import", str(context / "Dockerfile")]) == 2
    error = capsys.readouterr().err
    assert "Dockerfile:2: FROM '${BUILDER}' names no image" in error and "--build-arg" in error
    argv = ["import", str(context / "Dockerfile"), "--build-arg", "BUILDER=golang:1.23"]
    assert main(argv) == 0
