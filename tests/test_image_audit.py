"""audit-deps --image / --against: the pure parts, then real images built from the base image."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from audit.build.plan import build_command
from audit.cli import main as cli
from audit.docker import host as docker_host
from audit.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_VIOLATION
from audit.history.image_audit import (
    MARKER,
    ImageTarget,
    parse_snapshots,
    select_interpreters,
    unique_environments,
)
from audit.history.snapshot import (
    SCRIPT_PATH,
    Distribution,
    Environment,
    dump_snapshot,
    parse_snapshot,
)
from audit.host import process as commands
from audit.policy.judge import judge_layer
from audit.policy.model import Policy
from audit.policy.verdict import Scope, WaiverLedger
from tests.support.fixtures import Wheelhouse

TODAY = dt.date(2026, 12, 1)


def _env(interpreter: str, paths: tuple[str, ...], **versions: str) -> Environment:
    dists = tuple(Distribution(n, v, paths[0], "pip", "", n) for n, v in versions.items())
    return Environment(interpreter, "3.11.2", {}, paths, dists)


def test_select_interpreters_keeps_named_first_and_drops_config_scripts() -> None:
    found = ["/usr/bin/python3", "/usr/bin/python3-config", "/usr/bin/python3.11", "/x/python3.11m"]
    assert select_interpreters(["/opt/venv/bin/python", "/usr/bin/python3"], found) == [
        "/opt/venv/bin/python",
        "/usr/bin/python3",
        "/usr/bin/python3.11",
    ]


def test_parse_snapshots_splits_per_interpreter_and_skips_failures() -> None:
    good = dump_snapshot([_env("/usr/bin/python3", ("/usr/lib/site",), six="1.16.0")]).decode()
    output = (
        f"{MARKER} /usr/bin/python3\n{good}"
        f"{MARKER} /opt/py2/bin/python\nSyntaxError\n{MARKER}-failed /opt/py2/bin/python\n"
    )
    [found] = parse_snapshots(output, ImageTarget("img:1"))
    assert found.interpreter == "/usr/bin/python3"
    assert found.environment.winners()["six"].version == "1.16.0"


def test_unique_environments_drops_aliases_of_one_environment() -> None:
    from audit.history.image_audit import ImageEnvironment

    system = _env("/usr/bin/python3", ("/usr/lib/site",), six="1")
    alias = _env("/usr/bin/python3.11", ("/usr/lib/site",), six="1")
    venv = _env("/opt/venv/bin/python", ("/opt/venv/site",), six="1")
    found = [ImageEnvironment(e.interpreter, e) for e in (system, alias, venv)]
    assert [f.interpreter for f in unique_environments(found)] == [
        "/usr/bin/python3",
        "/opt/venv/bin/python",
    ]


# --- real images ---------------------------------------------------------------------------

DOCKERFILE = """\
FROM {base}
COPY wheels /tmp/wheels
RUN /opt/venv/bin/python -m pip install --no-index --no-deps --isolated /tmp/wheels/*.whl \\
 && rm -rf /tmp/wheels
"""


def build_image(base: str, wheels: list[Path], context: Path) -> str:
    """A tag for ``base`` plus ``wheels`` installed into /opt/venv, built with BuildKit."""
    (context / "wheels").mkdir(parents=True)
    for wheel in wheels:
        (context / "wheels" / wheel.name).write_bytes(wheel.read_bytes())
    (context / "Dockerfile").write_text(DOCKERFILE.format(base=base))
    repository = os.environ.get("AUDIT_TEST_REPOSITORY", "layer-audit-test")
    tag = f"{repository}/image-audit:{uuid.uuid4().hex[:12]}"
    client = docker_host.detect_client()
    argv = [*build_command(client), "--network", "none", "-t", tag, str(context)]
    commands.run(argv, env=docker_host.client_env(client))
    return tag


@pytest.fixture
def images(
    base_image: Any, wheelhouse: Wheelhouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, str]]:
    """(old, new): new downgrades nccl-like package ``fabric`` and adds ``extra``."""
    monkeypatch.setenv(commands.QUIET_ENV, "1")
    base = base_image("bookworm", "amd64")
    old_wheels = [wheelhouse.add("fabric", "2.30.1"), wheelhouse.add("Foo_Bar", "1.0")]
    new_wheels = [wheelhouse.add("fabric", "2.29.7"), wheelhouse.add("extra", "0.1")]
    tags = [build_image(base, old_wheels, tmp_path / "old")]
    try:
        tags.append(build_image(base, [old_wheels[1], *new_wheels], tmp_path / "new"))
        yield tags[0], tags[1]
    finally:
        for tag in tags:
            docker_host.remove_image(tag)


def run_json(tmp_path: Path, *args: str) -> tuple[int, dict[str, Any]]:
    output = tmp_path / "report.json"
    code = cli.main(["audit-deps", *args, "--format", "json", "--output", str(output)])
    return code, json.loads(output.read_text())


def findings_of(report: dict[str, Any], suffix: str) -> set[tuple[str, str, Any, Any]]:
    """(rule, package, before, after) of every finding whose ``where`` ends with ``suffix``."""
    return {
        (f["rule"], f["package"], f["before"], f["after"])
        for section in report["sections"]
        for f in section["findings"]
        if f["where"].endswith(suffix)
    }


@pytest.mark.docker
def test_image_audit_walks_the_layers_and_names_the_one_that_installed(
    images: tuple[str, str], tmp_path: Path
) -> None:
    old, _ = images
    code, report = run_json(tmp_path, "--image", old)
    assert code == EXIT_OK
    titles = [section["title"] for section in report["sections"]]
    assert titles[0].endswith("ADD rootfs.tar /")  # the offline base's one layer
    (run,) = [t for t in titles if "pip install" in t]
    assert run.startswith(f"{old} layer ")
    assert findings_of(report, "(/opt/venv/bin/python)") >= {
        ("added", "fabric", None, "2.30.1"),
        ("added", "foo-bar", None, "1.0"),
    }


@pytest.mark.docker
def test_against_reports_the_downgrade_in_the_venv(images: tuple[str, str], tmp_path: Path) -> None:
    old, new = images
    code, report = run_json(tmp_path, "--image", new, "--against", old)
    assert code == EXIT_VIOLATION
    assert findings_of(report, "(/opt/venv/bin/python)") == {
        ("downgraded", "fabric", "2.30.1", "2.29.7"),
        ("added", "extra", None, "0.1"),
    }
    assert findings_of(report, "(/usr/bin/python3.11)") == set()


@pytest.mark.docker
def test_a_missing_image_fails_clearly(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["audit-deps", "--image", "la-no-such-image:nope"])
    assert code in (EXIT_BAD_INPUT, 3)
    assert "la-no-such-image:nope" in capsys.readouterr().err


def real_snapshot(tmp_path: Path, extra: Path | None = None) -> Environment:
    """This machine's Python as the in-image snapshot script sees it (``extra`` first on the
    path, as a PYTHONPATH entry: the way a second site folder shadows a package)."""
    env = {"PATH": os.environ["PATH"], **({"PYTHONPATH": str(extra)} if extra else {})}
    result = subprocess.run(
        [sys.executable, str(SCRIPT_PATH)], env=env, capture_output=True, check=True
    )
    (environment,) = parse_snapshot(result.stdout, sys.executable)
    return environment


def test_against_keeps_shadowing_that_the_new_image_adds(tmp_path: Path) -> None:
    """Alone, an image with a shadowed copy fails under ``shadowed = "fail"``; compared with an
    image that had no such copy, the same copy must fail too (it used to vanish: exit 0)."""
    extra = tmp_path / "site"
    (extra / "packaging-99.0.dist-info").mkdir(parents=True)
    (extra / "packaging-99.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: packaging\nVersion: 99.0\n"
    )
    old, new = real_snapshot(tmp_path), real_snapshot(tmp_path, extra)
    policy = Policy(shadowed="fail")
    found = judge_layer(old, new, policy, where="old -> new", today=TODAY, scope=Scope(),
                        ledger=WaiverLedger())  # fmt: skip
    (finding,) = [f for f in found if f.fails]
    assert (finding.rule, finding.package) == ("shadowed", "packaging")
    unchanged = judge_layer(new, new, policy, where="new -> new", today=TODAY, scope=Scope(),
                            ledger=WaiverLedger())  # fmt: skip
    assert [f for f in unchanged if f.rule == "shadowed"] == []
