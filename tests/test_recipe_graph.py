"""Recipes with a stage graph, as real Dockerfiles have one: stages built on other stages or on
images of their own, ``COPY --from``, ``RUN --mount``, build arguments, per-layer primary
indexes, several final targets and a base without Python. Parsed, rendered, planned, locked and
predicted: a branch beside a stage never sees that stage's packages."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import MappingProxyType

import pytest

from audit.build.plan import BuildOptions, DockerClient, Provenance, plan_build
from audit.errors import AuditError, RecipeError, UsageError
from audit.history.predict import predict_from
from audit.history.snapshot import Distribution, Environment
from audit.lock.files import BaseRecord, Lock
from audit.lock.format import Pin
from audit.lock.plan import layer_inputs, survey_locks
from audit.project.sources import DirectorySource
from audit.recipe.model import ArgLayer, CopyLayer, Mount, PipLayer, Recipe, RunLayer
from audit.recipe.parse import load_recipe
from audit.render.write import render
from tests.support.project import write_base, write_text

BASE = "layer-audit/base:bookworm-amd64"
HEAD = f"""\
[image]
base = "{BASE}"
platform = "linux/amd64"
cuda = "cu130"
interpreters = ["/opt/venv/bin/python"]
repository = "la-import/g"
"""
# build (on a CUDA devel image) -> runtime (on the recorded base) -> test and serve beside it
GRAPH = (
    HEAD
    + """
[indexes]
torch = "https://download.pytorch.org/whl/cu130"

[args]
CUDA_VERSION = "13.0.1"
CUDA_TAG = "cu${CUDA_VERSION}"

[[stage]]
name = "v1"
target = "build"
base = "nvidia/cuda:13.0.1-devel-ubuntu24.04"
  [[stage.layer]]
  arg = ["CUDA_VERSION", "TARGETPLATFORM"]
  [[stage.layer]]
  run = "echo built for $TARGETPLATFORM > /out.txt"
  mounts = [{ type = "cache", target = "/root/.cache/uv" },
            { type = "bind", source = "scripts", target = "/tmp/scripts" }]

[[stage]]
name = "v2"
target = "runtime"
base = "layer-audit/base:bookworm-amd64"
  [[stage.layer]]
  pip = "requirements/v2.in"
  primary_index = "torch"
  mounts = [{ type = "cache", target = "/root/.cache/pip" },
            { type = "secret", id = "hf", target = "/run/secrets/hf" }]
  [[stage.layer]]
  copy = { from = "v1", src = "/out.txt", dest = "/opt/out.txt" }
  [stage.config]
  user = "1000"
  entrypoint = ["python3"]

[[stage]]
name = "v3"
from = "v2"
target = "test"
  [[stage.layer]]
  pip = "requirements/v3.in"

[[stage]]
name = "v4"
from = "v2"
target = "serve"
  [[stage.layer]]
  pip = "requirements/v4.in"

[config]
cmd = ["serve"]
"""
)


def write_recipe(root: Path, toml: str, requirements: tuple[str, ...] = ("v2", "v3", "v4")) -> None:
    write_text(root / "images/g/image.toml", toml)
    for name in requirements:
        write_text(root / f"images/g/requirements/{name}.in", f"{name}-pkg\n")
    write_text(root / "images/g/scripts/build.sh", "echo build\n")


def load(root: Path) -> Recipe:
    return load_recipe(DirectorySource(root), "g")


@pytest.fixture
def graph(tmp_path: Path) -> Path:
    write_recipe(tmp_path, GRAPH)
    return tmp_path


def refused(root: Path, toml: str) -> str:
    write_recipe(root, toml)
    with pytest.raises(RecipeError) as caught:
        load(root)
    return str(caught.value)


# --- parse and model ------------------------------------------------------------------------


def test_the_graph_is_read_as_written(graph: Path) -> None:
    recipe = load(graph)
    build, runtime, test, serve = recipe.stages
    assert [recipe.from_ref(s) for s in recipe.stages] == [
        "nvidia/cuda:13.0.1-devel-ubuntu24.04", BASE, "v2", "v2",
    ]  # fmt: skip
    assert [recipe.audited(s) for s in recipe.stages] == [False, True, True, True]
    assert recipe.stage("test") is test and recipe.stage("v4") is serve
    assert recipe.args == (("CUDA_VERSION", "13.0.1"), ("CUDA_TAG", "cu${CUDA_VERSION}"))
    assert build.layers[0] == ArgLayer(("CUDA_VERSION", "TARGETPLATFORM"))
    assert build.layers[1] == RunLayer(
        "echo built for $TARGETPLATFORM > /out.txt",
        None,
        (Mount("cache", "/root/.cache/uv"), Mount("bind", "/tmp/scripts", "scripts")),
    )
    pip = runtime.layers[0]
    assert isinstance(pip, PipLayer) and pip.primary_index == "torch"
    assert recipe.layer_index_url(pip) == "https://download.pytorch.org/whl/cu130"
    assert pip.mounts[1] == Mount("secret", "/run/secrets/hf", id="hf")
    assert runtime.layers[1] == CopyLayer("/out.txt", "/opt/out.txt", from_="v1")
    assert runtime.config.user == "1000" and recipe.config.cmd == ("serve",)
    assert recipe.needs("serve") == ("v1", "v2", "v4")  # v4's chain and what v2 copies from
    [v3_layer] = [s for s in recipe.steps() if s.slug == "v3-01"]
    assert recipe.before(v3_layer) == {"v2-01", "v2-02"}  # not v1's (another image), not v4's


def test_a_chain_of_stages_reads_as_it_always_did(tmp_path: Path) -> None:
    toml = HEAD + '[[stage]]\nname = "v1"\n  [[stage.layer]]\n  run = "true"\n'
    toml += '[[stage]]\nname = "v2"\n  [[stage.layer]]\n  pip = "requirements/v2.in"\n'
    write_recipe(tmp_path, toml, ("v2",))
    recipe = load(tmp_path)
    assert [recipe.from_ref(s) for s in recipe.stages] == [BASE, "v1"]
    assert all(recipe.audited(s) for s in recipe.stages) and recipe.recorded_ref == BASE


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('from = "v2"\ntarget = "test"', 'from = "v7"', "'v7' is not a stage before"),
        ('from = "v2"\ntarget = "test"', 'from = "v2"\nbase = "x:1"', "not both"),
        ('target = "serve"', 'target = "test"', "'test' already names v3"),
        ('target = "serve"', 'target = "Serve"', "a Dockerfile stage name"),
        ('type = "cache", target = "/root/.cache/uv"', 'type = "cahce", target = "/x"',
         "did you mean 'cache'"),
        ('target = "/root/.cache/uv"', 'target = "/a,b"', "one word"),
        ('target = "/root/.cache/uv"', 'target = "/tmp/layer-audit/guard"', "where the guard"),
        ('id = "hf"', 'id = "pip-ca"', "the build's own secret"),
        ('{ type = "secret", id = "hf", target = "/run/secrets/hf" }',
         '{ type = "secret", target = "/run/secrets/hf" }', "names its id"),
        ('source = "scripts"', 'source = "../outside"', "must be a relative path inside"),
        ('copy = { from = "v1"', 'copy = { from = "v5"', "'v5' is not a stage before"),
        ('CUDA_TAG = "cu${CUDA_VERSION}"', 'CUDA_TAG = "cu${CUDA_MAJOR}"', "no argument above"),
        ('CUDA_TAG = "cu${CUDA_VERSION}"', 'HF_TOKEN = "x"', "looks like a secret"),
        ('CUDA_TAG = "cu${CUDA_VERSION}"', 'TARGETARCH = "amd64"', "BuildKit's"),
        ('arg = ["CUDA_VERSION", "TARGETPLATFORM"]', 'arg = "PIP_INDEX_URL"', "where pip looks"),
        ('primary_index = "torch"', 'primary_index = "tourch"', "did you mean 'torch'"),
        ('[config]\ncmd = ["serve"]', '[config]\ncmd = ["serve"]\n[stage.config]\nuser = "1"',
         "keep one of them"),
    ],
)  # fmt: skip
def test_a_graph_mistake_is_refused_where_it_is(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    assert GRAPH.count(old) >= 1
    assert message in refused(tmp_path, GRAPH.replace(old, new, 1))


def test_a_pip_layer_off_the_recorded_base_cannot_be_locked(tmp_path: Path) -> None:
    mounts = GRAPH.index('  mounts = [{ type = "cache"')
    toml = GRAPH[:mounts] + GRAPH[GRAPH.index("[[stage]]", mounts) :]
    toml = toml.replace('run = "echo built', 'pip = "requirements/v2.in"\n  #run = "', 1)
    error = refused(tmp_path, toml)
    assert "stage[1].layer[2].pip" in error and "cannot be locked" in error
    assert "nvidia/cuda:13.0.1-devel-ubuntu24.04" in error and "run layer" in error


def test_no_stage_on_the_recorded_base_is_refused(tmp_path: Path) -> None:
    toml = HEAD + '[[stage]]\nname = "v1"\nbase = "debian:12"\n  [[stage.layer]]\n  run = "true"\n'
    assert "no stage starts from layer-audit/base:bookworm-amd64" in refused(tmp_path, toml)


# --- a base without Python: the prelude ------------------------------------------------------

PRELUDE = (
    HEAD.replace(BASE, "nvidia/cuda:13.0.1-runtime-ubuntu24.04")
    + """base_stage = "v1"

[[stage]]
name = "v1"
  [[stage.layer]]
  run = "apt-get update && apt-get install -y python3 python3-venv"

[[stage]]
name = "v2"
target = "runtime"
  [[stage.layer]]
  pip = "requirements/v2.in"
"""
)


def test_the_prelude_is_not_audited_and_the_record_is_its_stage_built(tmp_path: Path) -> None:
    write_recipe(tmp_path, PRELUDE, ("v2",))
    recipe = load(tmp_path)
    assert [recipe.audited(s) for s in recipe.stages] == [False, True]
    assert recipe.recorded_ref == "la-import/g:v1-amd64-cu130-base"
    assert recipe.recorded_base == "nvidia/cuda:13.0.1-runtime-ubuntu24.04+v1"
    render(tmp_path, recipe)
    text = (tmp_path / "build/g/Dockerfile").read_text()
    prelude, audited = text.split("FROM v1 AS v2")
    assert "guard.py" not in prelude and "(no guard: the prelude:" in prelude
    assert "guard.py --step v2-01" in audited


def test_a_pip_layer_in_the_prelude_is_refused(tmp_path: Path) -> None:
    toml = PRELUDE.replace('  run = "apt-get', '  pip = "requirements/v2.in"\n  #run = "apt-get')
    assert "before any Python is recorded" in refused(tmp_path, toml)
    toml = PRELUDE.replace('base_stage = "v1"', 'base_stage = "v9"')
    assert "no stage 'v9'" in refused(tmp_path, toml)


# --- render ---------------------------------------------------------------------------------


def test_the_graph_renders_as_written(graph: Path) -> None:
    result = render(graph, load(graph))
    text = result.dockerfile.read_text()
    assert re.findall(r"^FROM (\S+) AS (v\d)$", text, re.MULTILINE) == [
        ("nvidia/cuda:13.0.1-devel-ubuntu24.04", "v1"), (BASE, "v2"), ("v2", "v3"), ("v2", "v4"),
    ]  # fmt: skip
    head = text.split("FROM ", 1)[0]
    assert 'ARG CUDA_VERSION="13.0.1"\nARG CUDA_TAG="cu${CUDA_VERSION}"\n' in head
    stage = r"^# images/g/image.toml stage\[\d\] \(v\d\)\nFROM .*$"
    v1, v2, v3, v4 = re.split(stage, text, flags=re.MULTILINE)[1:]
    assert "ARG CUDA_VERSION\nARG TARGETPLATFORM\n" in v1 and "guard.py" not in v1
    assert "--mount=type=cache,target=/root/.cache/uv" in v1
    assert "--mount=type=bind,source=files/scripts,target=/tmp/scripts" in v1
    assert "(no guard: it builds on nvidia/cuda:13.0.1-devel-ubuntu24.04" in v1
    assert "--index-url https://download.pytorch.org/whl/cu130" in v2
    assert v2.count("target=/root/.cache/pip") == 1  # the render's own pip cache serves it
    assert "--mount=type=secret,id=hf,target=/run/secrets/hf" in v2
    assert 'COPY --from=v1 ["/out.txt", "/opt/out.txt"]' in v2
    assert v2.rstrip().endswith('USER 1000\nENTRYPOINT ["python3"]')
    for child in (v3, v4):  # built on a stage with USER 1000: its layers run as root
        assert child.lstrip().startswith("ARG LAYER_AUDIT_NO_GUARD\nUSER root\n")
    assert v3.rstrip().endswith("stage[3].config\nUSER 1000")  # and the image keeps its user
    assert v4.rstrip().endswith('[config]\nUSER 1000\nCMD ["serve"]')
    assert (result.context / "files/scripts/build.sh").is_file()
    described = json.loads((result.context / "recipe.json").read_text())
    assert described["args"] == {"CUDA_VERSION": "13.0.1", "CUDA_TAG": "cu${CUDA_VERSION}"}
    assert [(s["from"], s["audited"], s.get("target")) for s in described["stages"]] == [
        ("nvidia/cuda:13.0.1-devel-ubuntu24.04", False, "build"), (BASE, True, "runtime"),
        ("v2", True, "test"), ("v2", True, "serve"),
    ]  # fmt: skip


def test_a_target_renders_what_it_needs_and_a_build_arg_its_value(graph: Path) -> None:
    recipe = load(graph)
    text = render(graph, recipe, stage="serve", build_args=(("CUDA_VERSION", "13.0.2$x"),))
    dockerfile = text.dockerfile.read_text()
    assert re.findall(r" AS (v\d)$", dockerfile, re.MULTILINE) == ["v1", "v2", "v4"]
    assert 'ARG CUDA_VERSION="13.0.2\\$x"' in dockerfile  # a value given is taken literally
    with pytest.raises(UsageError, match="declares no build argument 'CUDA_VERSON'"):
        render(graph, recipe, build_args=(("CUDA_VERSON", "1"),))
    with pytest.raises(UsageError, match="BuildKit's"):
        render(graph, recipe, build_args=(("TARGETPLATFORM", "linux/arm64"),))
    with pytest.raises(UsageError, match="did you mean 'test'"):
        render(graph, recipe, stage="tset")


# --- build plan -----------------------------------------------------------------------------

CLIENT = DockerClient("/usr/bin/docker", "buildkit-env", "20.10.24")
PROVENANCE = Provenance("", "", "2026-12-01T00:00:00Z", "sha256:r", "sha256:l")


def plan(recipe: Recipe, options: BuildOptions) -> tuple[tuple[str, ...], ...]:
    made = plan_build(recipe, options, client=CLIENT, context=Path("/ctx"),
                      provenance=PROVENANCE, secrets={}, token="t")  # fmt: skip
    return tuple(b.argv for b in ((made.prelude,) if made.prelude else ()) + made.builds)


def test_a_build_passes_arguments_secrets_and_agents_to_buildkit(graph: Path) -> None:
    recipe = load(graph)
    options = BuildOptions(
        image="g", stage="test", build_args=(("CUDA_VERSION", "13.0.2"),),
        secrets=("id=hf,src=/home/u/.hf",), ssh=("default",),
    )  # fmt: skip
    [argv] = plan(recipe, options)
    assert argv[argv.index("--target") + 1] == "v3"
    flags = " ".join(argv)
    assert "--build-arg CUDA_VERSION=13.0.2 --secret id=hf,src=/home/u/.hf --ssh default" in flags
    every = plan(recipe, BuildOptions(image="g"))
    assert [a[a.index("--target") + 1] for a in every] == ["v4", "v1", "v2", "v3"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (BuildOptions(image="g", secrets=("id=pip-ca,src=/x",)), "the build's own secret"),
        (BuildOptions(image="g", secrets=("src=/x",)), "expected id=ID"),
        (BuildOptions(image="g", build_args=(("NOPE", "1"),)), "no build argument 'NOPE'"),
        (BuildOptions(image="g", stage="v9"), "no such stage"),
    ],
)
def test_a_bad_build_option_is_refused_before_any_build(
    graph: Path, options: BuildOptions, message: str
) -> None:
    with pytest.raises(AuditError, match=message):
        plan(load(graph), options)


def test_a_prelude_is_built_first_and_tagged_as_the_recorded_base(tmp_path: Path) -> None:
    write_recipe(tmp_path, PRELUDE, ("v2",))
    recipe = load(tmp_path)
    made = plan_build(recipe, BuildOptions(image="g"), client=CLIENT, context=Path("/ctx"),
                      provenance=PROVENANCE, secrets={}, token="t")  # fmt: skip
    assert made.prelude is not None and made.prelude.stage == "v1"
    assert made.prelude.tags == ("la-import/g:v1-amd64-cu130-base",)
    assert "--target" in made.prelude.argv and "v1" in made.prelude.argv


# --- lock and prediction: a branch never sees the stage beside it ------------------------------


def record(*dists: tuple[str, str]) -> BaseRecord:
    environment = Environment(
        "/opt/venv/bin/python", "3.11.2", {}, ("/x",), tuple(Distribution(n, v) for n, v in dists)
    )
    return BaseRecord(BASE, "sha256:1", None, (environment,))


def lock_of(slug: str, **pins: str) -> Lock:
    table = {name: Pin(name, version, ("sha256:" + "0" * 64,)) for name, version in pins.items()}
    return Lock(slug, "sha256:" + slug, MappingProxyType(table))


def test_a_layer_s_inputs_hold_only_the_locks_of_its_own_image(graph: Path) -> None:
    recipe = load(graph)
    write_base(graph, "g", record(("pip", "23.0")))
    source = DirectorySource(graph)
    serve = next(s for s in recipe.steps() if s.slug == "v4-01")
    inputs = layer_inputs(source, recipe, serve, "sha256:b", {"v2-01": "sha256:e"})
    assert inputs.index_url == "https://pypi.org/simple"  # v2's primary index is v2's own
    assert [key for key in inputs.digests if key.startswith("after")] == ["after v2-01"]
    survey = survey_locks(source, recipe)
    assert [s.step.slug for s in survey.states] == ["v2-01", "v3-01", "v4-01"]


def test_prediction_starts_each_branch_from_the_stage_it_builds_on(graph: Path) -> None:
    recipe = load(graph)
    base = {"pip": Distribution("pip", "23.0")}
    locks = {"v2-01": lock_of("v2-01", torch="2.9.0"), "v3-01": lock_of("v3-01", pytest="8.0"),
             "v4-01": lock_of("v4-01", uvicorn="0.30")}  # fmt: skip
    steps = {p.step.slug: p for p in predict_from(base, DirectorySource(graph), recipe, locks)}
    assert set(steps["v4-01"].before) == {"pip", "torch"}  # not v3's pytest
    assert set(steps["v3-01"].after) == {"pip", "torch", "pytest"}
    assert set(steps["v1-02"].before) == {"pip"}  # another image: the base, and nothing moves


def test_the_lock_run_resolves_a_branch_over_the_stage_it_builds_on(graph: Path) -> None:
    from datetime import date

    from audit.history.predict import StepJudge
    from audit.lock.plan import Constraint
    from audit.lock.run import LockRun

    recipe = load(graph)
    steps = {s.slug: s for s in recipe.steps()}
    run = LockRun(graph, DirectorySource(graph), recipe, [Constraint("pip", "23.0", "base")],
                  "sha256:b", {}, StepJudge(recipe, date(2026, 12, 1), {}), None)  # type: ignore[arg-type]  # fmt: skip
    for slug, pins in (("v2-01", {"torch": "2.9.0"}), ("v3-01", {"pytest": "8.0"})):
        before = run.environment(steps[slug])
        run.earlier.append((steps[slug], lock_of(slug, **pins)))
        run.after[slug] = {**before, **{n: Distribution(n, v) for n, v in pins.items()}}
    assert set(run.environment(steps["v4-01"])) == {"pip", "torch"}  # not v3's pytest
    assert [s.slug for s, _ in run._earlier(steps["v4-01"])] == ["v2-01"]
