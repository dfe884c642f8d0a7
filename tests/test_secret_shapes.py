"""Every credential shape a user can write, through every output: one rule takes them out.

The shapes: a URL with userinfo, a scheme-less ``user:password@registry`` reference, an
``--index-url`` line of a ``.in`` header, netrc lines, ``DOCKER_AUTH_CONFIG``-like JSON
(``auth``, ``password``, ``identitytoken``), ``KEY=value`` and token shapes. The outputs: a
CLI error (what and hint), JSON, Markdown and table reports, the gate's Markdown, OCI labels,
a build log written to disk, and a recipe that carries one (refused, exit 2, nothing written,
so it never reaches a rendered Dockerfile).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from audit.build.plan import Provenance, labels
from audit.build.run import BuildLog
from audit.cli.main import report_error
from audit.errors import EXIT_BAD_INPUT, BadInput
from audit.gate.markdown import gate_markdown
from audit.policy.findings import ERROR, Finding
from audit.project.sources import DirectorySource
from audit.recipe.parse import load_recipe
from audit.redact import redact
from audit.report.findings import Report, Section, render_text
from tests.support.cli import edit, fails

SECRET = "Zq7pW3xK9vLm"
SHAPES = {
    "scheme-url": f"https://ci-token:{SECRET}@gitlab.example.com/team/images.git",
    "bare-userinfo": f"deploy:{SECRET}@registry.lan:5000/team/vllm",
    "index-url-header": f"# --index-url https://bot:{SECRET}@pypi.example/simple",
    "netrc-login": f"machine pypi.example login bot password {SECRET}",
    "netrc-machine": f"machine pypi.example password {SECRET}",
    "docker-auth": json.dumps({"auths": {"registry.lan:5000": {"auth": SECRET}}}),
    "docker-password": json.dumps({"username": "bot", "password": SECRET}),
    "docker-identitytoken": json.dumps({"identitytoken": SECRET}),
    "env-assignment": f"PIP_PASSWORD={SECRET}",
    "yaml-token": f"token: {SECRET}",
    "query-token": f"https://pypi.example/simple?access_token={SECRET}",
    "github-token": f"ghp_{SECRET}{SECRET}",
}
Output = Callable[[str, Path], str]


def _finding(shape: str) -> Report:
    finding = Finding("downgraded", ERROR, "alpha", "2.0", "1.0", f"from {shape}", shape, shape)
    return Report(f"audit {shape}", (Section(f"demo {shape}", (finding,)),))


def _error(shape: str, tmp_path: Path) -> str:
    import contextlib
    import io

    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        report_error(BadInput(f"images/x/image.toml: image.repository: {shape}", f"try {shape}"))
    return stderr.getvalue()


def _labels(shape: str, tmp_path: Path) -> str:
    recipe = load_recipe(DirectorySource(Path(__file__).resolve().parents[1]), "demo")
    facts = Provenance(shape, shape, "2026-12-01T00:00:00Z", shape, shape, base_digest=shape)
    return json.dumps(labels(recipe, facts, guard=True))


def _build_log(shape: str, tmp_path: Path) -> str:
    log = BuildLog(tmp_path / "build.log", [f"#5 RUN pip install {shape}", shape])
    log.save()
    return log.path.read_text()


OUTPUTS: dict[str, Output] = {
    "cli-error": _error,
    "json-report": lambda shape, _: render_text(_finding(shape), "json"),
    "markdown-report": lambda shape, _: render_text(_finding(shape), "markdown"),
    "table-report": lambda shape, _: render_text(_finding(shape), "terminal"),
    "gate-markdown": lambda shape, _: gate_markdown(_finding(shape)),
    "oci-labels": _labels,
    "build-log-file": _build_log,
}


@pytest.mark.parametrize("output", sorted(OUTPUTS))
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_no_shape_reaches_any_output(shape: str, output: str, tmp_path: Path) -> None:
    shown = OUTPUTS[output](SHAPES[shape], tmp_path)
    assert shown.strip()
    assert SECRET not in shown


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_rule_is_idempotent_and_keeps_the_rest(shape: str) -> None:
    once = redact(SHAPES[shape])
    assert SECRET not in once and redact(once) == once
    if shape != "github-token":  # a bare token is all secret
        assert once != "***"  # the shape's other parts (host, key, user) stay readable


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_recipe_value_with_a_credential_is_refused(
    demo: Path, capsys: pytest.CaptureFixture[str], shape: str
) -> None:
    """A credential in any recipe value (here a stage description, which becomes an OCI label
    and a Dockerfile comment) exits 2 naming the key; nothing is rendered."""
    value = SHAPES[shape].replace("'", "")
    edit(
        demo, "images/demo/image.toml", 'description = "an HTTP client"', f"description = '{value}'"
    )
    err = fails(capsys, EXIT_BAD_INPUT, "render", "demo")
    assert "stage[1].description" in err and "holds a credential" in err
    assert SECRET not in err
    assert not (demo / "build" / "demo" / "Dockerfile").exists()


def test_the_field_report_repository_is_refused_without_its_password(
    demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = 'repository = "layer-audit/demo"'
    edit(demo, "images/demo/image.toml", line, 'repository = "user:password@registry:5000/x"')
    err = fails(capsys, EXIT_BAD_INPUT, "render", "demo")
    assert "image.repository" in err and "registry:5000/x" in err
    assert "password" not in err.replace("holds a credential", "")


@pytest.mark.parametrize(
    "text",
    [
        "images/x/image.toml: policy.token: not a PEP 508 requirement",
        "git@github.com:org/repo.git",
        "registry.lan:5000/team/vllm:v8-arm64-cu130",
        "the token expired at 12:30 for bot@example.org",
        "--mount=type=secret,id=pip-conf,target=/etc/pip.conf",
        "--netrc-file /root/.netrc",
        "oauth: enabled",
        f"FROM ubuntu:22.04@sha256:{'a' * 64} AS v1",
        "auth==0.5.3 and token==1.0 are pins, not credentials",
        f"docker.io/library/python:3.12-slim@sha256:{'b' * 64}",
        "pip install 'vllm @ https://wheels.example/vllm-0.33.0-cp38-abi3-linux_aarch64.whl'",
    ],
)
def test_text_without_a_credential_is_kept(text: str) -> None:
    assert redact(text) == text
