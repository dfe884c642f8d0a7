"""Rendering: the Dockerfile chain, determinism, locks, overrides, StrictUndefined."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from audit.errors import RecipeError
from audit.project.sources import DirectorySource
from audit.recipe.model import PipLayer
from audit.recipe.parse import load_recipe
from audit.render.plan import RenderResult, env_quote, pip_command
from audit.render.write import render

REPO = Path(__file__).resolve().parents[1]
MINI = REPO / "tests" / "data" / "recipes" / "mini"
INSTRUCTION = re.compile(r"^(FROM|RUN|COPY|ENV) ")


def make_project(tmp: Path, image: str = "mini") -> Path:
    """A throw-away project: the templates plus one recipe (never the real build/)."""
    shutil.copytree(REPO / "audit/templates", tmp / "templates")  # as overrides
    source = MINI if image == "mini" else REPO / "images" / image
    shutil.copytree(source, tmp / "images" / image)
    return tmp


def render_image(root: Path, image: str = "mini", stage: str | None = None) -> RenderResult:
    return render(root, load_recipe(DirectorySource(root), image), stage=stage)


def snapshot(folder: Path) -> dict[str, tuple[bytes, int, int]]:
    return {
        p.relative_to(folder).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_mode)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_field_recipe_renders_eight_stages_chained_by_from(tmp_path: Path) -> None:
    root = make_project(tmp_path, "glm53-flash-vllm")
    result = render_image(root, "glm53-flash-vllm")
    text = result.dockerfile.read_text()
    chain = re.findall(r"^FROM (\S+) AS (v\d+)$", text, re.MULTILINE)
    assert chain == [("layer-audit/replica:vllm-glm53-day0-arm64", "v1")] + [
        (f"v{n - 1}", f"v{n}") for n in range(2, 9)
    ]  # the day-0 image's replica (docs/glm53-routes.md)
    assert "--extra-index-url http://127.0.0.1:8647/simple/" in text  # the nightly's stand-in
    assert "syntax=" not in text  # BuildKit 20.10 parses RUN --mount natively: no registry pull


def test_every_instruction_is_preceded_by_its_origin(tmp_path: Path) -> None:
    root = make_project(tmp_path, "glm53-flash-vllm")
    lines = render_image(root, "glm53-flash-vllm").dockerfile.read_text().splitlines()
    for number, line in enumerate(lines):
        if INSTRUCTION.match(line):
            assert lines[number - 1].startswith("# images/glm53-flash-vllm/image.toml stage["), line
    assert "# images/glm53-flash-vllm/image.toml stage[2].layer[1] pip " in "\n".join(lines)


def test_second_render_is_byte_identical_and_touches_nothing(tmp_path: Path) -> None:
    root = make_project(tmp_path, "glm53-flash-vllm")
    first = render_image(root, "glm53-flash-vllm")
    before = snapshot(first.context)
    second = render_image(root, "glm53-flash-vllm")
    assert second.changed == () and second.removed == ()
    assert snapshot(second.context) == before


def test_context_holds_inputs_policy_and_recipe(tmp_path: Path) -> None:
    root = make_project(tmp_path, "glm53-flash-vllm")
    result = render_image(root, "glm53-flash-vllm")
    names = {p.relative_to(result.context).as_posix() for p in result.files}
    assert {"Dockerfile", "policy.json", "recipe.json", "requirements/cutlass-dsl.in"} <= names
    assert "files/patches/v5_topk_init.py" in names
    assert (result.context / "files/launch/serve.sh").stat().st_mode & 0o777 == 0o755
    assert (result.context / "files/patches/patchlib.py").stat().st_mode & 0o777 == 0o644
    recipe = load_recipe(DirectorySource(root), "glm53-flash-vllm")
    policy = json.loads((result.context / "policy.json").read_text())
    assert policy == recipe.policy.to_json()
    described = json.loads((result.context / "recipe.json").read_text())
    assert [s["tag"] for s in described["stages"]][-1] == "v8-arm64-cu130"
    assert described["stages"][1]["layers"][0] == {
        "slug": "v2-01", "key_path": "stage[2].layer[1]", "kind": "pip", "lock": None,
        "requirements": "requirements/v2-flashinfer-nightly.in", "index": "flashinfer-nightly",
        "pre": True,
    }  # fmt: skip


def test_unlocked_pip_layer_mounts_only_its_own_inputs(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    text = render_image(root).dockerfile.read_text()
    assert "stage[1].layer[1] pip requirements/v1.in (unlocked: run nox -s lock)" in text
    v1 = text.split("FROM v1 AS v2")[0]
    assert "source=requirements/v1.in,target=/tmp/layer-audit/requirements/v1.in" in v1
    assert "v2.in" not in v1
    assert "--pre --index-url https://pypi.org/simple --extra-index-url" in text


def test_lock_is_installed_with_hashes_and_stale_files_are_removed(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    lock = root / "locks" / "mini" / "v2-01.txt"
    lock.parent.mkdir(parents=True)
    lock.write_text("idna==3.7 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    result = render_image(root)
    text = result.dockerfile.read_text()
    assert "stage[2].layer[1] pip requirements/v2.in (lock locks/v2-01.txt)" in text
    assert "source=locks/v2-01.txt,target=/tmp/layer-audit/lock.txt" in text
    assert "--require-hashes --no-deps" in text
    assert (result.context / "locks/v2-01.txt").read_bytes() == lock.read_bytes()
    lock.unlink()
    again = render_image(root)
    assert again.removed == (result.context / "locks/v2-01.txt",)
    assert not (result.context / "locks").exists()


def test_stage_option_renders_up_to_that_stage(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    text = render_image(root, stage="v1").dockerfile.read_text()
    assert "AS v1" in text and "AS v2" not in text


def test_per_image_template_override_wins(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    override = root / "images/mini/templates/layers/run.j2"
    override.parent.mkdir(parents=True)
    override.write_text("# {{ step.origin }} (override)\nRUN {{ step.commands | join(' && ') }}\n")
    text = render_image(root).dockerfile.read_text()
    assert "stage[2].layer[2] run (override)\nRUN echo v2\n" in text


def test_strict_undefined_names_the_template(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    override = root / "images/mini/templates/layers/run.j2"
    override.parent.mkdir(parents=True)
    override.write_text("# {{ step.origin }}\nRUN {{ step.comand }}\n")
    with pytest.raises(RecipeError) as caught:
        render_image(root)
    assert caught.value.where == "images/mini/templates/layers/run.j2:2"
    assert "comand" in caught.value.problem
    assert not (root / "build").exists()


def test_template_syntax_error_names_the_template(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    (root / "templates/layers/run.j2").write_text("{% if %}\n")
    with pytest.raises(RecipeError) as caught:
        render_image(root)
    assert caught.value.where == "templates/layers/run.j2:1"


def test_env_values_are_literal() -> None:
    assert env_quote('a "b" $HOME \\n') == '"a \\"b\\" \\$HOME \\\\n"'


def test_pip_command_ignores_config_files_and_quotes_urls(tmp_path: Path) -> None:
    recipe = load_recipe(DirectorySource(make_project(tmp_path)), "mini")
    command = pip_command(recipe, PipLayer("requirements/v1.in"), "locks/v1-01.txt")
    assert command.startswith("PIP_CONFIG_FILE=/dev/null /opt/venv/bin/python -m pip install ")
    assert command.endswith("-r /tmp/layer-audit/lock.txt")
