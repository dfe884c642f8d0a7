"""Lock and base-record formats: round trips, and damaged files refused with exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from audit.errors import EXIT_BAD_INPUT, LockError
from audit.history.snapshot import Distribution, Environment
from audit.lock.files import (
    END_MARKER,
    BaseRecord,
    Lock,
    base_changes,
    parse_base,
    parse_lock,
    render_base,
    render_lock,
)
from audit.policy.model import Policy
from audit.project.memo import Memo
from audit.recipe.model import PipLayer, Recipe, Stage

BODY = """\
alpha==2.0 \\
    --hash=sha256:aa \\
    --hash=sha256:bb
    # via beta
beta-pkg==1.0+cu130 \\
    --hash=sha256:cc
    # via -r requirements/v1.in
"""
INPUTS = {"base": "sha256:01", "file requirements/v1.in": "sha256:02"}


def recipe() -> Recipe:
    stage = Stage("v1", (PipLayer("requirements/v1.in"),))
    return Recipe(
        "t", Path("images/t"), "b", None, "linux/amd64", "cpu", ("/usr/bin/python3",), "r",
        "{stage}", "latest", "https://pypi.org/simple", (), (stage,), Policy(),
    )  # fmt: skip


def lock_text(body: str = BODY) -> str:
    step = next(recipe().steps())
    return render_lock("t", step, "pip-tools==x", INPUTS, body)


def test_round_trip_keeps_pins_hashes_and_inputs() -> None:
    lock = parse_lock(lock_text().encode(), "locks/t/v1-01.txt")
    assert lock.slug == "v1-01"
    assert sorted(lock.pins) == ["alpha", "beta-pkg"]
    assert lock.pins["alpha"].hashes == ("sha256:aa", "sha256:bb")
    assert lock.pins["beta-pkg"].version == "1.0+cu130"
    assert dict(lock.inputs) == INPUTS
    assert lock.content_digest.startswith("sha256:")


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda t: t[: t.index("beta")], "truncated"),
        (lambda t: t.replace("alpha==2.0", "alpha==1.0"), "edited by hand"),
        (lambda t: t.replace("sha256:02", "sha256:03"), "inputs digest"),
        (lambda t: t.replace(END_MARKER + "\n", ""), "truncated"),
        (lambda t: t.split("\n", 1)[1], "not a layer-audit lock"),
        (lambda t: t[:40], "truncated"),
    ],
)
def test_damaged_locks_are_refused_with_exit_2(damage: object, problem: str) -> None:
    text = damage(lock_text())  # type: ignore[operator]
    with pytest.raises(LockError) as caught:
        parse_lock(text.encode(), "locks/t/v1-01.txt")
    assert caught.value.exit_code == EXIT_BAD_INPUT
    assert problem in caught.value.message
    assert caught.value.message.startswith("locks/t/v1-01.txt")


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda t: t.replace("# layer: v1-01\n", "# layer:v1-01\n"), "line 3: unexpected"),
        (lambda t: t.replace("# input base: ", "# input a:b: "), "line 6: unexpected"),
        (lambda t: t.replace("# format: ", "# Format: "), "line 2: unexpected"),
        (lambda t: t.replace("# layer: ", "#layer: "), "line 3: unexpected header line"),
        (lambda t: t.replace("\n#\n", "\n# \n"), "line 10: unexpected header line"),
        (lambda t: t.replace("\n#\n", "\n"), "line 10: unexpected header line"),
        (lambda t: t[: t.index("\n#\n") + 2], "truncated: the last line is not"),
        (lambda t: t[: t.index("\n#\n") + 1], "line 10: unexpected header line"),
        (lambda t: t[: t.index("\n#\n")], "truncated: the header never ends"),
        (lambda t: t[: t.index("\n")], "truncated: the header never ends"),
    ],
)
def test_a_damaged_header_names_its_first_bad_line(damage: object, problem: str) -> None:
    text = damage(lock_text())  # type: ignore[operator]
    with pytest.raises(LockError) as caught:
        parse_lock(text.encode(), "locks/t/v1-01.txt")
    assert caught.value.message.startswith(f"locks/t/v1-01.txt: {problem}")


def test_header_values_are_everything_after_the_first_colon_and_space() -> None:
    inputs = {"file requirements/a b.in": "sha256:02: still: the value", "x": ""}
    step = next(recipe().steps())
    lock = parse_lock(render_lock("t", step, "r: 1", inputs, BODY).encode(), "locks/t/v1-01.txt")
    assert dict(lock.inputs) == inputs and lock.slug == "v1-01"


def test_an_unpinned_line_is_refused_even_with_a_matching_digest() -> None:
    with pytest.raises(LockError, match="not pinned"):
        parse_lock(lock_text("alpha>=2.0 \\\n    --hash=sha256:aa\n").encode(), "x")


@pytest.mark.parametrize(
    ("line", "name", "version"),
    [
        ("alpha==2.0", "alpha", "2.0"),
        ("Foo_Bar.baz==1.0rc1", "foo-bar-baz", "1.0rc1"),
        ("torch==2.9.0+cu130", "torch", "2.9.0+cu130"),
        ("v==1!2.0.post1.dev3", "v", "1!2.0.post1.dev3"),
        ("alpha[extra]==1.0", "alpha", "1.0"),
        ('alpha==1.0 ; python_version >= "3.8"', "alpha", "1.0"),
        ("alpha===1.0-weird", "alpha", "1.0-weird"),
    ],
)
def test_pins_in_pip_compiles_shape_and_in_any_pep_508_shape(
    line: str, name: str, version: str
) -> None:
    lock = parse_lock(lock_text(f"{line} \\\n    --hash=sha256:aa\n").encode(), "x")
    assert [(pin.name, pin.version, pin.hashes) for pin in lock.pins.values()] == [
        (name, version, ("sha256:aa",))
    ]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("-alpha==1.0", "not a requirement"),
        ("alpha-==1.0", "not a requirement"),
        ("alpha==1.0.0.dev1.bad", "not a requirement"),
        ("alpha==1.*", "not pinned"),
        ("alpha @ https://example.com/alpha-1.0-py3-none-any.whl", "not pinned"),
        ("alpha==1.0 --no-binary=:all:", "unexpected option"),
    ],
)
def test_bad_pins_are_refused_even_with_a_matching_digest(line: str, problem: str) -> None:
    with pytest.raises(LockError, match=problem):
        parse_lock(lock_text(f"{line} \\\n    --hash=sha256:aa\n").encode(), "x")


def test_verified_bytes_are_parsed_once_and_damaged_ones_every_time() -> None:
    data, memo = lock_text().encode(), Memo()  # the command's memo: nothing module-wide
    assert parse_lock(data, "a", memo) is parse_lock(bytes(data), "b", memo)
    assert parse_lock(data, "a") is not parse_lock(data, "a")  # no memo, nothing kept
    damaged = data.replace(b"alpha==2.0", b"alpha==1.0")
    for where in ("c", "d"):
        with pytest.raises(LockError, match=f"^{where}: edited by hand"):
            parse_lock(damaged, where, memo)


def test_two_images_locking_the_same_lines_share_one_parse_of_them() -> None:
    """Locks of two images with the same body under headers of their own (their inputs
    differ): the pins and metadata are parsed once, each lock keeps its own header; a body
    damaged under a matching digest still fails, every time."""
    step, memo = next(recipe().steps()), Memo()
    one = parse_lock(render_lock("a", step, "pip-tools==x", INPUTS, BODY).encode(), "a", memo)
    other = {**INPUTS, "base": "sha256:99"}
    two = parse_lock(render_lock("b", step, "pip-tools==x", other, BODY).encode(), "b", memo)
    assert one.pins is two.pins and one.metadata is two.metadata
    copied = Lock("v1-01", one.inputs_digest, dict(one.pins), metadata=dict(one.metadata))
    assert one.effect_digest == two.effect_digest == copied.effect_digest  # made once, the same
    assert (dict(one.inputs), dict(two.inputs)) == (INPUTS, other)
    assert one.inputs_digest != two.inputs_digest
    bad = BODY.replace("alpha==2.0", "alpha>=2.0")
    for where in ("c", "d"):
        with pytest.raises(LockError, match=f"^{where}: "):
            parse_lock(render_lock("c", step, "pip-tools==x", INPUTS, bad).encode(), where, memo)


def test_a_known_body_under_a_header_naming_another_digest_is_refused_every_time() -> None:
    """A body verified before is not hashed again, and still must be the one its header names."""
    good, memo = lock_text(), Memo()
    parse_lock(good.encode(), "a", memo)
    content = next(line for line in good.splitlines() if line.startswith("# content: "))
    wrong = good.replace(content, "# content: sha256:" + "0" * 64)
    for where in ("b", "c"):
        with pytest.raises(LockError, match=f"^{where}: edited by hand: its content digest"):
            parse_lock(wrong.encode(), where, memo)
    digest = parse_lock(good.encode(), "d", memo).content_digest
    assert digest == content.removeprefix("# content: ")


def environment(*pins: tuple[str, str]) -> Environment:
    dists = tuple(Distribution(name, version) for name, version in pins)
    return Environment("/usr/bin/python3", "3.11.2", {"python_version": "3.11"}, ("/x",), dists)


def test_base_record_round_trip_and_changes() -> None:
    old = BaseRecord("img", "sha256:1", None, (environment(("pip", "23.0")),))
    new = BaseRecord("img", "sha256:2", "img@sha256:9", (environment(("pip", "24.0")),))
    assert parse_base(render_base(new).encode(), "base.json") == new
    assert base_changes(old, new) == [
        "image id sha256:1 -> sha256:2",
        "/usr/bin/python3: 0 added, 0 removed, 1 changed (1 -> 1 distributions)",
        "/usr/bin/python3: pip 23.0 -> 24.0",
    ]


def test_a_tampered_base_record_is_refused() -> None:
    text = render_base(BaseRecord("img", "i", None, (environment(("pip", "23.0")),)))
    with pytest.raises(LockError) as caught:
        parse_base(text.replace('"23.0"', '"22.0"').encode(), "locks/t/base.json")
    assert caught.value.exit_code == EXIT_BAD_INPUT


def test_a_base_record_is_parsed_once_per_content() -> None:
    data = render_base(BaseRecord("img", "i", None, (environment(("pip", "23.0")),))).encode()
    memo = Memo()
    assert parse_base(data, "a", memo=memo) is parse_base(bytes(data), "b", memo=memo)
    with pytest.raises(LockError):
        parse_base(data.replace(b'"23.0"', b'"22.0"'), "c", memo=memo)
