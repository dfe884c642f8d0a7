"""``layer-audit import`` on hostile input: each case ends in exit 0, 2 or 3 with a clear message
naming what is wrong, no traceback, no secret in any output or file, and nothing half-written
in ``images/``.

The cases replay what a user's checkout can hold: credentials in a Dockerfile (an index URL with
a password, a token in ENV, a bearer header, a clone URL), a copied folder with a link to a file
outside the build context, a loop of links, a link back to its own folder, ``COPY . /app`` with
the Dockerfile at the project root (beside ``images/``, ``.git`` and ``build/``), a binary file
given as the Dockerfile, a 50 MB one, a FIFO, and an ``images/`` folder that cannot be written.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from audit.cli.main import main

SECRET = "s3cr3tPa55word"
TOKEN = "hf_" + "Q" * 30


@dataclass(frozen=True)
class Case:
    """A hostile project: ``make`` fills the project and returns the Dockerfile to import."""

    make: Callable[[Path], Path]
    code: int
    says: str  # in the error (or, for exit 0, the output)
    names: str = "ctx/Dockerfile"  # the path the error names (relative to the project)


def dockerfile(root: Path, text: str | bytes) -> Path:
    path = root / "ctx" / "Dockerfile"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def credentials(root: Path) -> Path:
    return dockerfile(
        root,
        "FROM python:3.12 AS v1\n"
        f"RUN pip install --extra-index-url https://ci:{SECRET}@pkgs.example.com/simple a==1\n"
        f"ENV HF_TOKEN={TOKEN} HF_HOME=/models\n"
        f'RUN curl -H "Authorization: Bearer {SECRET}" https://example.com/x -o /x\n'
        f"RUN git clone https://ci-token:{SECRET}@gitlab.example.com/team/x.git /x\n"
        f"ARG DB_PASSWORD={SECRET}\n"
        f'LABEL secret.url="https://u:{SECRET}@example.com/"\n'
        # build arguments and index settings that carry a credential, and a secret mount
        f"ARG MIRROR=https://u:{SECRET}@mirror.example.com/simple\n"
        f"ARG PIP_EXTRA_INDEX_URL=https://u:{SECRET}@extra.example.com/simple\n"
        f"ENV PIP_INDEX_URL=https://u:{SECRET}@index.example.com/simple\n"
        "RUN pip install b==2\n"
        "RUN --mount=type=secret,id=hf,target=/run/secrets/hf,required=true \\\n"
        '    HF_TOKEN="$(cat /run/secrets/hf)" python3 -c "print(1)"\n'
        "RUN echo $MIRROR\n",
    )


def copying(root: Path, what: str = "app") -> Path:
    return dockerfile(root, f"FROM python:3.12 AS v1\nCOPY {what} /app\nRUN true\n")


def link_out(root: Path) -> Path:
    (root / "outside.txt").write_text(SECRET)
    (root / "ctx" / "app").mkdir(parents=True)
    (root / "ctx" / "app" / "main.py").write_text("print(1)\n")
    (root / "ctx" / "app" / "passwd").symlink_to(root / "outside.txt")
    return copying(root)


def link_loop(root: Path) -> Path:
    (root / "ctx" / "app").mkdir(parents=True)
    (root / "ctx" / "app" / "a").symlink_to("b")
    (root / "ctx" / "app" / "b").symlink_to("a")
    return copying(root)


def link_to_itself(root: Path) -> Path:
    (root / "ctx" / "app" / "sub").mkdir(parents=True)
    (root / "ctx" / "app" / "sub" / "up").symlink_to("..")
    return copying(root)


def fifo(root: Path) -> Path:
    (root / "ctx" / "app").mkdir(parents=True)
    os.mkfifo(root / "ctx" / "app" / "pipe")
    return copying(root)


def copy_the_root(root: Path) -> Path:
    """The Dockerfile at the project root: ``COPY . /app`` would take images/ into itself."""
    (root / "images" / "other").mkdir(parents=True)
    (root / "images" / "other" / "image.toml").write_text("# another recipe\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text(f"url = https://ci:{SECRET}@example.com/x\n")
    (root / "build").mkdir()
    (root / "build" / "junk").write_text("x\n")
    (root / "serve.py").write_text("print('serve')\n")
    path = root / "Dockerfile"
    path.write_text("FROM python:3.12 AS v1\nCOPY . /app\nCMD python3 /app/serve.py\n")
    return path


def binary(root: Path) -> Path:
    return dockerfile(root, b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 64)


def fifty_megabytes(root: Path) -> Path:
    path = dockerfile(root, "FROM python:3.12 AS v1\n")
    with path.open("ab") as handle:
        line = b"RUN echo " + b"x" * 90 + b"\n"
        handle.write(line * (50 * 1024 * 1024 // len(line)))
    return path


def dockerfile_is_a_fifo(root: Path) -> Path:
    path = root / "ctx" / "Dockerfile"
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    return path


def a_megabyte_of_run_lines(root: Path) -> Path:
    line = "RUN echo " + "x" * 90 + "\n"
    return dockerfile(root, "FROM python:3.12 AS v1\n" + line * (1_040_000 // len(line)))


MALFORMED = (
    "COPY", "ENV A=", "CMD []", "HEALTHCHECK --interval=x CMD y", "EXPOSE 80-90", "LABEL =",
    "RUN cat <<<hi", "ARG A=$B", "WORKDIR rel", "SHELL bash", "RUN [1, 2]", "USER a b",
    "ONBUILD RUN x", 'CMD ["a"', "RUN pip install --no-deps 'a>1'", "ENV PATH=${PATH:-/x}",
)  # fmt: skip


def malformed(root: Path) -> Path:
    return dockerfile(root, "FROM python:3.12 AS v1\n" + "\n".join(MALFORMED) + "\n")


def unterminated_heredoc(root: Path) -> Path:
    return dockerfile(root, "FROM python:3.12 AS v1\nRUN <<EOF\necho never closed\n")


CASES = {
    "credentials": Case(credentials, 0, "imported"),
    "link-out-of-the-context": Case(link_out, 2, "outside the build context", "ctx/app/passwd"),
    "loop-of-links": Case(link_loop, 2, "a broken link or a loop of links", "ctx/app/a"),
    "link-to-its-own-folder": Case(
        link_to_itself, 2, "a link back to a folder that contains it", "ctx/app/sub/up"
    ),
    "fifo-in-a-copied-folder": Case(fifo, 2, "not a regular file", "ctx/app/pipe"),
    "copy-dot-at-the-project-root": Case(copy_the_root, 0, "imported"),
    "binary-dockerfile": Case(binary, 2, "not a UTF-8 text file"),
    "fifty-megabyte-dockerfile": Case(fifty_megabytes, 2, "over 1 MiB (1048576 bytes"),
    "dockerfile-is-a-fifo": Case(dockerfile_is_a_fifo, 2, "not a regular file"),
    "unterminated-heredoc": Case(unterminated_heredoc, 0, "never closed"),
    "a-megabyte-of-run-lines": Case(a_megabyte_of_run_lines, 2, "does not validate"),
    "malformed-instructions": Case(malformed, 0, "line(s) not kept as written"),
}


def files_under(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    monkeypatch.chdir(root)
    return root


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_input_is_handled(
    name: str, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = CASES[name]
    path = case.make(project)
    before = files_under(project / "images") if (project / "images").exists() else {}
    started = time.monotonic()
    code = main(["import", str(path), "--image", "hostile"])
    elapsed = time.monotonic() - started
    out, err = capsys.readouterr()
    assert code == case.code, out + err
    assert case.says in (out if code == 0 else err)
    assert "Traceback" not in out + err and SECRET not in out + err and TOKEN not in out + err
    written = files_under(project / "images") if (project / "images").exists() else {}
    assert not [p for p in written if ".import-" in p]  # no scratch folder left behind
    if code:
        assert f"{project / case.names}:" in err  # the error names what is wrong
        assert written == before
    else:
        assert all(SECRET.encode() not in data and TOKEN.encode() not in data
                   for data in written.values())  # fmt: skip
    assert elapsed < 60, f"import took {elapsed:.1f} s"  # bounded, not a benchmark


def test_a_secret_env_is_left_out_and_its_neighbours_kept(project: Path) -> None:
    assert main(["import", str(credentials(project)), "--image", "secrets"]) == 0
    toml = (project / "images" / "secrets" / "image.toml").read_text()
    assert 'env = { HF_HOME = "/models" }' in toml and "HF_TOKEN" in toml and TOKEN not in toml


def test_copy_dot_at_the_root_leaves_the_projects_own_folders_out(project: Path) -> None:
    assert main(["import", str(copy_the_root(project)), "--image", "rooted"]) == 0
    copied = project / "images" / "rooted" / "context"
    assert sorted(p.name for p in copied.iterdir()) == ["Dockerfile", "serve.py"]
    assert (project / "images" / "other" / "image.toml").read_text() == "# another recipe\n"


def ignored_context(root: Path) -> Path:
    """A context whose ``.dockerignore`` keeps secrets and logs out, except one log."""
    ctx = root / "ctx"
    for relpath, text in {
        "serve.py": "print('serve')\n",
        ".env": f"HF_TOKEN={TOKEN}\n",
        "secrets/ci.json": f'{{"password": "{SECRET}"}}\n',
        "logs/run.log": "noise\n",
        "logs/keep.log": "kept\n",
        "src/pkg/cache.pyc": "bytecode\n",
        "src/pkg/mod.py": "X = 1\n",
    }.items():
        (ctx / relpath).parent.mkdir(parents=True, exist_ok=True)
        (ctx / relpath).write_text(text)
    (ctx / ".dockerignore").write_text(
        "# what never goes into an image\n.env\n/secrets\nlogs/*.log\n!logs/keep.log\n**/*.pyc\n"
    )
    path = ctx / "Dockerfile"
    path.write_text(
        "FROM python:3.12 AS v1\nCOPY . /app\nCOPY secrets/ci.json /etc/ci.json\n"
        "CMD python3 /app/serve.py\n"
    )
    return path


def test_what_the_dockerignore_leaves_out_is_not_copied(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``docker build`` never sends what ``.dockerignore`` names: ``import`` copies what Docker
    would have (no ``.env``, no secrets folder, no ``*.pyc``; the re-included log stays), and a
    COPY of an ignored file, which Docker would fail, is kept unmapped, never copied."""
    assert main(["import", str(ignored_context(project)), "--image", "ignored"]) == 0
    out = capsys.readouterr().out
    recipe = project / "images" / "ignored"
    copied = sorted(files_under(recipe / "context"))
    assert copied == [".dockerignore", "Dockerfile", "logs/keep.log", "serve.py", "src/pkg/mod.py"]
    written = files_under(recipe)
    assert all(SECRET.encode() not in data and TOKEN.encode() not in data
               for data in written.values())  # fmt: skip
    toml = (recipe / "image.toml").read_text()  # the COPY of an ignored file: kept, unmapped
    assert (
        "secrets/ci.json is not in the build context (missing, or left out by .dockerignore)"
        in toml
    )
    assert "not kept as written" in out


def test_a_dockerfile_s_own_ignore_file_comes_first(project: Path) -> None:
    """BuildKit reads ``<Dockerfile>.dockerignore`` beside the Dockerfile before the context's."""
    path = ignored_context(project)
    path.with_name("Dockerfile.dockerignore").write_text(".env\nsecrets\n")
    assert main(["import", str(path), "--image", "own"]) == 0
    copied = files_under(project / "images" / "own" / "context")
    assert "logs/run.log" in copied and "src/pkg/cache.pyc" in copied and ".env" not in copied


def test_a_link_inside_the_context_is_followed(project: Path) -> None:
    (project / "ctx" / "shared").mkdir(parents=True)
    (project / "ctx" / "shared" / "lib.py").write_text("X = 1\n")
    (project / "ctx" / "app").mkdir()
    (project / "ctx" / "app" / "lib.py").symlink_to("../shared/lib.py")
    assert main(["import", str(copying(project)), "--image", "linked"]) == 0
    copied = project / "images" / "linked" / "app" / "lib.py"
    assert not copied.is_symlink() and copied.read_text() == "X = 1\n"


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """``folder`` read-only: a read-only tmpfs as root (root ignores modes), else mode 0555."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
        return
    mount = ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)]
    done = subprocess.run(mount, check=False)
    if done.returncode != 0:
        pytest.skip("mount -t tmpfs is not permitted here")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_read_only_images_folder_exits_3(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = dockerfile(project, "FROM python:3.12 AS v1\nRUN true\n")
    with read_only(project / "images"):
        assert main(["import", str(path), "--image", "ro"]) == 3
        assert not list((project / "images").iterdir())
    err = capsys.readouterr().err
    assert "images: cannot write the recipe" in err and "hint:" in err and "Traceback" not in err
