"""requirements/*.in parsing: PEP 508 lines, includes, index options, duplicates."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.requirements import InvalidRequirement, Requirement

from audit.errors import RecipeError
from audit.lock.format import logical_lines
from audit.project.frontdoor import CONSOLE_SCRIPT
from audit.project.memo import Memo
from audit.recipe.requirements_in import (
    _PLAIN_LINE,
    RequirementsFile,
    normalise_index_url,
    parse_requirement,
    parse_requirements,
    url_problem,
)

FOLDER = "images/x/requirements"
PRIMARY = "https://pypi.org/simple"
NIGHTLY = "https://flashinfer.ai/whl/nightly/"


class MemorySource:
    """A Source over a dict of project-relative paths: pure unit tests, no files."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = {path: text.encode() for path, text in files.items()}
        self.memo = Memo()
        self.front = CONSOLE_SCRIPT

    def read_bytes(self, relpath: str) -> bytes:
        if relpath not in self.files:
            raise FileNotFoundError(relpath)
        return self.files[relpath]

    def exists(self, relpath: str) -> bool:
        return relpath in self.files

    def listdir(self, relpath: str) -> list[str]:
        return sorted(
            {p[len(relpath) + 1 :].split("/")[0] for p in self.files if p.startswith(relpath + "/")}
        )

    def describe(self, relpath: str) -> str:
        return relpath


def parse(files: dict[str, str], allowed: tuple[str, ...] = (PRIMARY,)) -> RequirementsFile:
    source = MemorySource({f"{FOLDER}/{name}": text for name, text in files.items()})
    return parse_requirements(source, f"{FOLDER}/a.in", allowed_index_urls=allowed)


def failure(files: dict[str, str], allowed: tuple[str, ...] = (PRIMARY,)) -> RecipeError:
    with pytest.raises(RecipeError) as caught:
        parse(files, allowed)
    return caught.value


def names(parsed: RequirementsFile) -> list[str]:
    return [str(req) for req in parsed.requirements]


def test_comments_blank_lines_and_markers() -> None:
    text = (
        "# header\n\nrequests>=2.31  # inline comment\nrich[jupyter]>=13; python_version>='3.9'\n"
    )
    assert names(parse({"a.in": text})) == [
        "requests>=2.31",
        'rich[jupyter]>=13; python_version >= "3.9"',
    ]


def test_continuation_lines_join_and_keep_the_first_line_number() -> None:
    assert list(logical_lines("a\\\n>=1\nb\n")) == [(1, "a>=1"), (3, "b")]
    error = failure({"a.in": "ok\nbad \\\n>>1\n"})
    assert error.where == f"{FOLDER}/a.in:2"


def test_non_pep508_line_names_file_and_line() -> None:
    error = failure({"a.in": "requests\n./local/path\n"})
    assert error.where == f"{FOLDER}/a.in:2"
    assert "not a PEP 508 requirement" in error.problem


def test_names_that_differ_only_in_normalisation_are_one_package() -> None:
    error = failure({"a.in": "Foo_Bar>=1\nfoo-bar<3\n"})
    assert error.where == f"{FOLDER}/a.in:2"
    assert f"{FOLDER}/a.in:1" in error.problem


def test_requirement_include_and_constraints() -> None:
    parsed = parse({
        "a.in": "-r common.in\n-c constraints.txt\nrich\n",
        "common.in": "requests\n",
        "constraints.txt": "urllib3>=2\n",
    })  # fmt: skip
    assert names(parsed) == ["requests", "rich"]
    assert [str(c) for c in parsed.constraints] == ["urllib3>=2"]
    assert parsed.files == (f"{FOLDER}/a.in", f"{FOLDER}/common.in", f"{FOLDER}/constraints.txt")


def test_duplicate_across_an_include_is_refused() -> None:
    error = failure({"a.in": "-r b.in\nrequests\n", "b.in": "Requests>=2\n"})
    assert error.where == f"{FOLDER}/a.in:2"


def test_diamond_include_is_read_once() -> None:
    files = {"a.in": "-r b.in\n-r c.in\n", "b.in": "-r d.in\n", "c.in": "-r d.in\n", "d.in": "x\n"}
    assert names(parse(files)) == ["x"]


def test_include_cycle_is_refused() -> None:
    error = failure({"a.in": "-r b.in\n", "b.in": "-r a.in\n"})
    assert "include cycle" in error.problem
    assert error.where == f"{FOLDER}/b.in:1"


@pytest.mark.parametrize("line", ["-r ../../other/x.in", "-r /etc/passwd", "-c ../image.toml"])
def test_include_outside_the_requirements_folder_is_refused(line: str) -> None:
    assert "outside" in failure({"a.in": line + "\n"}).problem


def test_missing_include_is_reported_at_the_line() -> None:
    error = failure({"a.in": "x\n-r missing.in\n"})
    assert error.where == f"{FOLDER}/a.in:2"


@pytest.mark.parametrize(
    "line",
    [
        f"--extra-index-url {NIGHTLY}",
        f"--extra-index-url={NIGHTLY}",
        "--index-url https://flashinfer.ai/whl/nightly",
        f"-i {NIGHTLY}",
        f"-f {NIGHTLY}",
    ],
)
def test_declared_index_options_are_allowed(line: str) -> None:
    parsed = parse({"a.in": f"{line}\nflashinfer-python\n"}, allowed=(PRIMARY, NIGHTLY))
    assert len(parsed.index_urls + parsed.find_links) == 1


@pytest.mark.parametrize(
    "line",
    [
        "--extra-index-url https://evil.example/simple",
        "--index-url=https://evil.example/simple",
        "-i https://evil.example/simple",
        "--find-links https://evil.example/wheels",
        "-f https://evil.example/wheels",
        "--trusted-host evil.example",
    ],
)
def test_undeclared_index_options_are_refused(line: str) -> None:
    error = failure({"a.in": f"x\n{line}\n"})
    assert error.where == f"{FOLDER}/a.in:2"
    assert "[indexes]" in error.hint


def test_trusted_host_of_a_declared_index_is_allowed() -> None:
    parsed = parse({"a.in": "--trusted-host flashinfer.ai\n"}, allowed=(PRIMARY, NIGHTLY))
    assert parsed.trusted_hosts == ("flashinfer.ai",)


def test_index_url_with_credentials_is_refused_even_if_otherwise_declared() -> None:
    error = failure({"a.in": "--extra-index-url https://me:token@pypi.org/simple\n"})
    assert "credentials" in error.problem
    assert "BuildKit secret" in error.hint


def test_direct_url_requirement_with_credentials_is_refused() -> None:
    error = failure({"a.in": "pkg @ https://me:token@host.example/pkg-1.0.tar.gz\n"})
    assert "credentials" in error.problem


@pytest.mark.parametrize(
    ("line", "hint"),
    [("--pre", "pre = true"), ("-e .", "editable"), ("--no-binary :all:", "-r/-c")],
)
def test_other_options_are_refused_with_a_hint(line: str, hint: str) -> None:
    error = failure({"a.in": line + "\n"})
    assert "not allowed" in error.problem
    assert hint in error.hint


def test_environment_variables_are_refused() -> None:
    assert "environment variables" in failure({"a.in": "pkg==${VERSION}\n"}).problem


def test_control_characters_are_refused() -> None:
    assert "control character" in failure({"a.in": "six\x1b[31m\n"}).problem


def test_origin_is_named_in_every_hint() -> None:
    source = MemorySource({f"{FOLDER}/a.in": "bad line here\n"})
    with pytest.raises(RecipeError) as caught:
        parse_requirements(
            source, f"{FOLDER}/a.in", allowed_index_urls=[PRIMARY], origin="x.toml: stage[1]"
        )
    assert "x.toml: stage[1]" in caught.value.hint


def test_url_helpers() -> None:
    assert normalise_index_url("HTTPS://PyPI.org/simple/") == "https://pypi.org/simple"
    assert url_problem("https://pypi.org/simple") is None
    assert "credentials" in (url_problem("https://token@pypi.org/simple") or "")
    assert "http" in (url_problem("file:///opt/wheels") or "")


def test_a_line_is_parsed_once_and_a_bad_line_fails_every_time() -> None:
    first = parse({"a.in": "alpha>=1 ; python_version >= '3.9'\n"}).requirements[0]
    again = parse({"a.in": "beta\nalpha>=1 ; python_version >= '3.9'\n"}).requirements[1]
    assert again == first == parse_requirement("alpha>=1 ; python_version >= '3.9'")
    for _ in range(2):
        assert "not a PEP 508 requirement" in failure({"a.in": "alpha >>= 1\n"}).message


def test_the_same_file_in_two_images_is_checked_once_and_keeps_its_own_path() -> None:
    """A fleet's images ask for the same lines in files of their own: the second file reuses
    the first one's checks, and still names itself; a file with an include is read afresh (its
    include's path is its own), and an index not declared for the second still fails."""
    text = "torch==2.13.0\nnvidia-nccl-cu13>=2.30\n"
    source = MemorySource({f"images/{i}/requirements/v1.in": text for i in ("a", "b")})
    one, two = (
        parse_requirements(source, f"images/{i}/requirements/v1.in", allowed_index_urls=(PRIMARY,))
        for i in ("a", "b")
    )
    assert (
        one.requirement_lines
        == two.requirement_lines
        == ("torch==2.13.0", "nvidia-nccl-cu13>=2.30")
    )
    assert (two.relpath, two.files) == (
        "images/b/requirements/v1.in",
        ("images/b/requirements/v1.in",),
    )
    assert (one.relpath, one.files) == (
        "images/a/requirements/v1.in",
        ("images/a/requirements/v1.in",),
    )
    included = {"a.in": "-r common.in\n", "common.in": text}
    assert parse(included).files == (f"{FOLDER}/a.in", f"{FOLDER}/common.in")
    with_index = f"--index-url {NIGHTLY}\n" + text
    assert parse({"a.in": with_index}, (PRIMARY, NIGHTLY)).index_urls == (NIGHTLY,)
    assert "not declared" in failure({"a.in": with_index}).message


PLAIN_NAMES = st.from_regex(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,8}[A-Za-z0-9])?", fullmatch=True)
PLAIN_SPECS = st.lists(
    st.tuples(
        st.sampled_from(["==", "!=", "<=", ">=", "<", ">", "~="]),
        st.lists(st.integers(0, 30), min_size=1, max_size=4),
    ),
    max_size=3,
)


@given(PLAIN_NAMES, PLAIN_SPECS)
def test_a_plain_line_is_one_packaging_accepts(
    name: str, specs: list[tuple[str, list[int]]]
) -> None:
    """Lines the reader checks without packaging are valid PEP 508 with the same name; the
    rest still go through packaging and fail as before."""
    line = name + ",".join(op + ".".join(map(str, release)) for op, release in specs)
    plain = _PLAIN_LINE.fullmatch(line) is not None
    try:
        requirement: Requirement | None = Requirement(line)
    except InvalidRequirement:
        requirement = None
    if plain:
        assert requirement is not None and requirement.name == name
    parsed = outcome(lambda: parse({"a.in": line + "\n"}))
    assert isinstance(parsed, RequirementsFile) == (requirement is not None)


def outcome(action: Callable[[], RequirementsFile]) -> RequirementsFile | RecipeError:
    try:
        return action()
    except RecipeError as exc:
        return exc


def test_objects_are_made_on_first_use_from_the_validated_lines() -> None:
    parsed = parse({"a.in": "alpha>=1\nbeta ; python_version >= '3.9'\n"})
    assert parsed.requirement_lines == ("alpha>=1", "beta ; python_version >= '3.9'")
    assert [str(r) for r in parsed.requirements] == ["alpha>=1", 'beta; python_version >= "3.9"']
    assert parsed.requirements[0] == parse_requirement("alpha>=1")
