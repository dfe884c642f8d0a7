"""The release workflow, read as GitHub reads it: a tag publishes what it built and checked,
through PyPI's trusted publishing, with no stored secret and one write permission.

What it runs is what tests/test_package.py runs here (``python -m build`` from a tagged
repository, the wheel installed into a fresh venv, ``--version`` naming the tag's version).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import yaml
from packaging.specifiers import SpecifierSet

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = REPO / ".github" / "workflows" / "release.yml"
PINNED = re.compile(r"^[\w.-]+/[\w.-]+@[0-9a-f]{40}$")


def workflow() -> dict[Any, Any]:
    loaded = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def steps(job: str) -> list[dict[str, Any]]:
    found = workflow()["jobs"][job]["steps"]
    assert isinstance(found, list)
    return found


def test_only_a_version_tag_starts_it() -> None:
    assert workflow()[True] == {"push": {"tags": ["v*"]}}  # YAML 1.1 reads the key `on` as True


def test_the_build_reads_the_tag_builds_both_files_and_checks_them() -> None:
    checkout = steps("build")[0]
    assert checkout["with"] == {"fetch-depth": 0, "persist-credentials": False}
    script = "\n".join(step.get("run", "") for step in steps("build"))
    assert "python -m build --outdir dist ." in script
    assert "twine check --strict dist/*" in script
    assert "layer_audit-${version}-py3-none-any.whl" in script
    assert '--version)" = "layer-audit ${TAG#v}"' in script
    python = workflow()["env"]["PYTHON_VERSION"]
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert SpecifierSet(pyproject["project"]["requires-python"]).contains(f"{python}.0")


def test_publishing_is_trusted_publishing_with_one_write_permission() -> None:
    document = workflow()
    assert document["permissions"] == {"contents": "read"}
    assert "permissions" not in document["jobs"]["build"]
    publish = document["jobs"]["publish"]
    assert publish["needs"] == "build" and publish["environment"]["name"] == "pypi"
    assert publish["permissions"] == {"id-token": "write"}
    assert steps("publish")[-1]["uses"].startswith("pypa/gh-action-pypi-publish@")
    lines = WORKFLOW.read_text(encoding="utf-8").splitlines()
    code = "\n".join(line.split(" #", 1)[0] for line in lines if not line.lstrip().startswith("#"))
    assert "secrets." not in code and "password" not in code  # OIDC: nothing stored


def test_every_action_is_pinned_by_commit() -> None:
    for job in ("build", "publish"):
        for step in steps(job):
            if "uses" in step:
                assert PINNED.match(step["uses"]), step["uses"]
