"""``layer-audit import``: three multi-stage Dockerfiles in the field report's style become
recipes that render back to equivalent Dockerfiles, with every unmapped line reported.

"Equivalent" is checked action by action: each Dockerfile's expected actions are written out
below by hand (stage parents, pip installs as requirement sets with their extra index and
``--pre``, shell commands, ENV pairs, COPY destinations with the copied bytes, and no-ops for
what cannot be mapped); the rendered Dockerfile is parsed with dockerfile-parse and its actions
are read back from its RUN lines, its requirements files and its build context. Lines marked
``# unmapped`` in a Dockerfile are exactly the ones ``import`` must report.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser

from audit.cli.main import main
from audit.plan.dockerfile_import import plan_import
from audit.plan.recipe_parse import load_recipe
from audit.plan.sources import DirectorySource

HERE = Path(__file__).parent / "dockerfiles"
VLLM_BASE = "vllm/vllm-openai:glm53-flash-arm64-cu130"
SGLANG_BASE = (
    "lmsysorg/sglang:v0.5.9-cu130-arm64@sha256:"
    "4f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c"
)
FLASHINFER = "https://flashinfer.ai/whl/nightly/"
FI_DEV = "0.6.18.dev20260301"


def patch(name: str) -> tuple[str, str, str]:
    return ("copy", f"/opt/glm53/patches/{name}.py", f"patches/{name}.py")


def applied(name: str) -> tuple[str, str]:
    return ("run", f"python3 /opt/glm53/patches/{name}.py")


EXPECTED: dict[str, list[tuple[Any, ...]]] = {
    "vllm-glm53": [
        ("from", VLLM_BASE), patch("patchlib"), patch("v1_nope_sparse_mla_sm12x"),
        applied("v1_nope_sparse_mla_sm12x"),
        ("from", "v1"),
        ("pip", (f"flashinfer-cubin=={FI_DEV}", f"flashinfer-python=={FI_DEV}"), FLASHINFER, True),
        ("run", 'python3 -c "import flashinfer"'),
        ("from", "v2"),
        ("pip", ("nvidia-cutlass-dsl-libs-base==4.3.0", "nvidia-cutlass-dsl==4.3.0",
                 "nvidia-nccl-cu13==2.30.1"), None, False),
        ("from", "v3"), ("copy", "/opt/glm53/serve.sh", "launch/serve.sh"),
        ("env", (("GLM53_BLOCK_SIZE", "2304"), ("GLM53_TENSOR_PARALLEL", "2"),
                 ("GLM53_MAX_MODEL_LEN", "262144"))),
        ("from", "v4"), patch("v5_topk_init"), applied("v5_topk_init"),
        ("from", "v5"), patch("v6_pdl_gate_off"), applied("v6_pdl_gate_off"),
        ("from", "v6"), patch("v7_fp8_kv_tile_cap"), applied("v7_fp8_kv_tile_cap"),
        ("env", (("GLM53_KV_CACHE_DTYPE", "fp8"),)),
        ("from", "v7"), ("copy", "/opt/glm53/cache-flusher.sh", "sidecar/cache-flusher.sh"),
        ("run", "chmod 0755 /opt/glm53/cache-flusher.sh /opt/glm53/serve.sh"),
        ("run", "/opt/glm53/cache-flusher.sh --check"),
        ("env", (("GLM53_CACHE_FLUSHER", "1"), ("GLM53_GPU_MEMORY_UTILIZATION", "0.85"))),
        ("unmapped",), ("unmapped",),
    ],
    "sglang-dflash2": [
        ("from", SGLANG_BASE), ("unmapped",), ("env", (("SGLANG_ENABLE_DFLASH2", "1"),)),
        ("pip", (f"flashinfer-jit-cache=={FI_DEV}", f"flashinfer-python=={FI_DEV}"),
         FLASHINFER + "cu130", True),
        ("from", "v1"),
        ("pip", ("nvidia-cutlass-dsl==4.3.0", "nvidia-nccl-cu13==2.30.1"), None, False),
        ("from", "v2"),
        ("copy", "/opt/patches/v3_dflash2_sm12x.py", "patches/v3_dflash2_sm12x.py"),
        ("run", 'python3 /opt/patches/v3_dflash2_sm12x.py || (echo "patch failed" && exit 1)'),
        ("unmapped",), ("unmapped",), ("unmapped",),
        ("env", (("SGLANG_TP_SIZE", "2"),)), ("unmapped",),
    ],
    "pytorch-serve": [
        ("from", "nvcr.io/nvidia/pytorch:25.10-py3"),
        ("env", (("DEBIAN_FRONTEND", "noninteractive"), ("PIP_NO_CACHE_DIR", "1"))),
        ("run", "apt-get update"), ("run", "apt-get install -y --no-install-recommends numactl"),
        ("run", "python3 -m pip install -r /workspace/requirements.txt"),
        ("pip", ("accelerate==1.10.1", "transformers>=4.57,<5"), None, False),
        ("from", "v1"),
        ("run", "pip install -e /workspace/app"),
        ("pip", ("triton==3.4.0",), None, False),
        ("run", 'python3 -c "import triton; print(triton.__version__)"'),
        ("copy", "/opt/app", "app"),
        ("from", "v2"), ("unmapped",), ("unmapped",), ("unmapped",),
    ],
}  # fmt: skip


def digest(path: Path) -> str:
    """sha256 of a file, or of a folder's files and their relative paths."""
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    sha = hashlib.sha256()
    for file in files:
        sha.update(file.relative_to(path).as_posix().encode() if path.is_dir() else b"")
        sha.update(file.read_bytes())
    return sha.hexdigest()


def expected_actions(name: str) -> list[tuple[Any, ...]]:
    """The hand-written actions, COPY sources replaced by the digest of their bytes."""
    actions = []
    for action in EXPECTED[name]:
        if action[0] == "copy":
            actions.append(("copy", action[1], digest(HERE / name / action[2])))
        else:
            actions.append(action)
    return actions


def rendered_actions(context: Path) -> list[tuple[Any, ...]]:
    """The actions of a rendered Dockerfile, read back from its build context."""
    parser = DockerfileParser(fileobj=(context / "Dockerfile").open("rb"))
    actions: list[tuple[Any, ...]] = []
    for item in parser.structure:
        kind, value = item["instruction"], item["value"]
        if kind == "FROM":
            actions.append(("from", value.split()[0]))
        elif kind == "ENV":
            pairs = [word.partition("=") for word in shlex.split(value)]
            actions.append(("env", tuple((name, text) for name, _, text in pairs)))
        elif kind == "COPY":
            source, dest = json.loads(value)
            actions.append(("copy", dest, digest(context / source)))
        elif kind == "RUN":
            actions.append(run_action(context, value))
    return actions


def run_action(context: Path, value: str) -> tuple[Any, ...]:
    if "PIP_CONFIG_FILE=/dev/null" in value:  # a pip layer, as render writes it
        relpath = re.search(r"source=(requirements/[^,]+),target", value)
        assert relpath, value
        lines = (context / relpath.group(1)).read_text().splitlines()
        reqs = tuple(sorted(line for line in lines if line and not line.startswith("#")))
        extra = re.search(r"--extra-index-url (\S+)", value)
        return ("pip", reqs, extra.group(1) if extra else None, " --pre " in value)
    found = re.search(r"&&\s+\( (.*) \)\s+&&\s+if \[ -z", value)
    assert found, value
    command = found.group(1)
    return ("unmapped",) if command.startswith(": 'UNMAPPED Dockerfile line") else ("run", command)


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


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_imported_recipe_renders_back_to_an_equivalent_dockerfile(
    name: str, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dockerfile = HERE / name / "Dockerfile"
    assert main(["import", str(dockerfile)]) == 0
    out = capsys.readouterr().out
    recipe = load_recipe(DirectorySource(project), name)
    assert [stage.name for stage in recipe.stages] == [
        f"v{n}" for n in range(1, 1 + dockerfile.read_text().count("\nFROM "))
    ]
    assert main(["render", name]) == 0
    assert rendered_actions(project / "build" / name) == expected_actions(name)
    reported = {int(n) for n in re.findall(r"^\s+line (\d+): ", out, flags=re.MULTILINE)}
    assert reported == marked_lines(dockerfile)
    toml = (project / "images" / name / "image.toml").read_text()
    for number in reported:  # each one is in the recipe too, beside the layer that keeps it
        assert f"UNMAPPED Dockerfile line {number}:" in toml


def test_the_field_reports_repin_is_noted_as_an_override(project: Path) -> None:
    data = (HERE / "vllm-glm53" / "Dockerfile").read_bytes()
    plan = plan_import(data, "x", lambda relpath: True)
    assert plan.base == VLLM_BASE and plan.platform == "linux/arm64" and plan.cuda == "cu130"
    assert plan.indexes == {"flashinfer-ai-nightly": FLASHINFER}
    repin = plan.requirements["requirements/v3-01.in"].decode()
    assert "--no-deps" in repin and "nvidia-nccl-cu13==2.30.1" in repin
    assert any(note.reason == "noted as an override" and note.line == 20 for note in plan.notes)
    assert "an override" in plan.recipe_toml()


def test_credentials_in_an_index_url_never_reach_the_recipe() -> None:
    index = b"https://u:tok@pkgs.example.com/simple"
    data = b"FROM python:3.12\nRUN pip install --extra-index-url " + index + b" a==1\n"
    plan = plan_import(data, "x", lambda relpath: False)
    assert "tok" not in plan.recipe_toml() and plan.indexes == {
        "pkgs-example": "https://pkgs.example.com/simple"
    }


@pytest.mark.parametrize(
    ("text", "argv_extra", "expected"),
    [
        (None, [], "no such file"),
        (b"# only a comment\nRUN echo hi\n", [], "no FROM instruction"),
        (b"FROM $UNSET AS v1\nRUN true\n", [], "names no image"),
        (b"FROM python:3.12\nRUN true\n", ["--image", "Bad Name"], "not a recipe name"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(
    text: bytes | None,
    argv_extra: list[str],
    expected: str,
    project: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    dockerfile = project.parent / "Dockerfile"
    if text is not None:
        dockerfile.write_bytes(text)
    assert main(["import", str(dockerfile), *argv_extra]) == 2
    err = capsys.readouterr().err
    assert expected in err and "hint:" in err and "Traceback" not in err
    assert not (project / "images").exists() or not any((project / "images").iterdir())


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
