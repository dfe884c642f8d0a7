"""``build --dockerfile``: the command line it hands to BuildKit, and bad input refused early.

The build itself, the walk and the tags are tested with a real engine in
``tests/test_build_dockerfile_docker.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from audit.build.dockerfile import (
    DockerfileBuild,
    build_args_of,
    build_argv,
    buildable,
    others,
)
from audit.cli import main as cli
from audit.cli.build_dockerfile import DockerfileOptions
from audit.cli.context import RunContext
from audit.dockerfile.importer import read_dockerfile
from audit.dockerfile.stages import parse_stages
from audit.errors import EXIT_BAD_INPUT, UsageError

PREFIX = ["/usr/bin/docker", "build"]


def parsed(*argv: str) -> DockerfileBuild:
    """What ``build --dockerfile …`` makes of a command line (up to the build itself)."""
    args = cli.build_parser(["build"]).parse_args(["build", *argv])
    context = RunContext.of_command_line(None, docker_host=None, verbose=False)
    return DockerfileOptions.from_args(args, context).build


def test_every_option_reaches_buildkit_and_no_tag_does(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM scratch\n")
    build = parsed(
        "--dockerfile", str(dockerfile), "-t", "team/vllm:v8", "--target", "runtime",
        "--platform", "linux/arm64", "--build-arg", "V=1", "--secret", "id=hf,src=hf.txt",
        "--ssh", "default", "--build-context", "src=../src", "--network", "host",
        "--", "--progress=plain", "--pull",
    )  # fmt: skip
    argv = build_argv(PREFIX, build, "runtime", tmp_path / "iid")
    assert argv == [
        *PREFIX, "-f", str(dockerfile), "--iidfile", str(tmp_path / "iid"),
        "--target", "runtime", "--platform", "linux/arm64", "--build-arg", "V=1",
        "--secret", "id=hf,src=hf.txt", "--ssh", "default", "--build-context", "src=../src",
        "--network", "host", "--progress=plain", "--pull", str(tmp_path),
    ]  # fmt: skip
    assert "-t" not in argv and "team/vllm:v8" not in argv  # tags move after the verdict
    assert build.tags == ("team/vllm:v8",)


def test_recipe_options_are_refused_with_a_dockerfile(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--no-guard"):
        parsed("--dockerfile", str(tmp_path / "D"), "--no-guard")
    with pytest.raises(UsageError, match="needs a tag"):
        parsed("--dockerfile", str(tmp_path / "D"), "--push")


def test_dockerfile_options_are_refused_without_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["build", "demo", "-t", "x:1"]) == EXIT_BAD_INPUT
    assert "--tag: for building your own Dockerfile" in capsys.readouterr().err


def test_build_args_as_docker_takes_them() -> None:
    assert build_args_of(["A=1", "B=", "C"]) == {"A": "1", "B": ""}
    with pytest.raises(UsageError, match="no name"):
        build_args_of(["=x"])


@pytest.mark.parametrize(
    ("content", "problem"),
    [(None, "not a file"), (b"FROM x\n\0\1", "binary"), (b"#" * (1 << 20 + 1), "over 1 MiB")],
)
def test_a_dockerfile_that_is_not_one_is_bad_input(
    tmp_path: Path, content: bytes | None, problem: str
) -> None:
    path = tmp_path / "Dockerfile"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(UsageError, match=problem) as caught:
        read_dockerfile(path, "give the path")
    assert caught.value.exit_code == EXIT_BAD_INPUT


def test_an_unnamed_stage_is_built_without_a_target_or_refused(tmp_path: Path) -> None:
    """``docker build --target`` takes only AS names: the last stage is built as docker builds
    it by default; an unnamed earlier one cannot be targeted (refused as --target, said and
    left out of --all-stages)."""
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM scratch\nFROM scratch AS named\nFROM scratch\n")
    build = parsed("--dockerfile", str(dockerfile), "-t", "x:1")
    assert "--target" not in build_argv(PREFIX, build, None, tmp_path / "iid")
    stages = parse_stages(dockerfile.read_bytes(), {}, "Dockerfile")
    buildable(stages[2], stages, "Dockerfile")  # the last: no name needed
    with pytest.raises(UsageError, match="stage 0 has no name") as caught:
        buildable(stages[0], stages, "Dockerfile")
    assert caught.value.exit_code == EXIT_BAD_INPUT
    assert "FROM scratch AS NAME" in caught.value.hint
    assert [stage.alias for stage in others(stages[:2], "Dockerfile")] == ["named"]
