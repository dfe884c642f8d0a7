"""A build plan of a small recipe without Docker: the recipe, the two kinds of docker client, the
plan."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from audit.build.plan import (
    BuildOptions,
    BuildPlan,
    DockerClient,
    Provenance,
    plan_build,
)
from audit.policy.model import Policy
from audit.recipe.model import (
    DEFAULT_LATEST_PATTERN,
    DEFAULT_TAG_PATTERN,
    EnvLayer,
    Index,
    PipLayer,
    Recipe,
    RunLayer,
    Stage,
)

LEGACY = DockerClient("/usr/bin/docker", "buildkit-env", "20.10.24")
BUILDX = DockerClient("/usr/local/bin/docker", "buildx", "28.0.1")
PROVENANCE = Provenance(
    source="https://example.org/images.git",
    revision="0123abcd",
    created="2026-01-02T03:04:05Z",
    recipe_digest="sha256:aaaa",
    locks_digest="sha256:bbbb",
)


CONTEXT = Path("/work/build/spark")


def make_recipe(**changes: object) -> Recipe:
    stages = (
        Stage("v1", (PipLayer("requirements/v1.in"),), smoke="python3 -c 'import alpha'"),
        Stage("v2", (RunLayer("echo hi"), EnvLayer((("A", "1"),)))),
        Stage("v3", (PipLayer("requirements/v3.in", index="nightly"),)),
    )
    recipe = Recipe(
        name="spark",
        directory=Path("images/spark"),
        base="layer-audit/base:bookworm-arm64",
        base_digest=None,
        platform="linux/arm64",
        cuda="cu130",
        interpreters=("/opt/venv/bin/python",),
        repository="local/spark",
        tag_pattern=DEFAULT_TAG_PATTERN,
        latest_tag_pattern=DEFAULT_LATEST_PATTERN,
        index_url="https://pypi.org/simple",
        indexes=(Index("nightly", "https://flashinfer.ai/whl/nightly/"),),
        stages=stages,
        policy=Policy(cuda="cu130"),
    )
    return replace(recipe, **changes)  # type: ignore[arg-type]


def plan(
    options: BuildOptions,
    *,
    client: DockerClient = LEGACY,
    secrets: dict[str, Path] | None = None,
    recipe: Recipe | None = None,
) -> BuildPlan:
    return plan_build(
        recipe or make_recipe(),
        options,
        client=client,
        context=CONTEXT,
        provenance=PROVENANCE,
        secrets=secrets or {},
        token="t0k3n",
    )
