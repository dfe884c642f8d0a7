"""Direction-aware diffs: every change kind, unparsable versions, and property tests."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.utils import canonicalize_name
from packaging.version import Version

from audit.history.diff import Change, Comparison, diff, shadowed
from audit.history.snapshot import Distribution, Environment, parse_version


def dist(name: str, version: str, digest: str = "", location: str = "/site") -> Distribution:
    return Distribution(canonicalize_name(name), version, location, "pip", digest, name)


def one(before: Distribution | None, after: Distribution | None) -> Change:
    old = {before.name: before} if before else {}
    new = {after.name: after} if after else {}
    (change,) = diff(old, new)
    return change


@pytest.mark.parametrize(
    ("old", "new", "kind"),
    [
        (None, "1.0", "added"),
        ("1.0", None, "removed"),
        ("2.29.7", "2.30.1", "upgraded"),
        ("2.30.1", "2.29.7", "downgraded"),
        ("2.9.0+cu130", "2.9.0+cpu", "variant"),
        ("2.9.0", "2.9.0+cu130", "variant"),
        ("1.0rc1", "1.0", "upgraded"),
        ("1.0", "1.0.dev1", "downgraded"),
        ("1.0.post1", "1.0", "downgraded"),
        ("2.9.0+cu128", "2.9.1+cu130", "upgraded"),
        ("1.0", "not a version", "unparsable"),
        ("garbage", "1.0", "unparsable"),
        (None, "garbage", "unparsable"),
    ],
)
def test_change_kinds(old: str | None, new: str | None, kind: str) -> None:
    before = dist("nvidia-nccl-cu13", old) if old else None
    after = dist("nvidia-nccl-cu13", new) if new else None
    change = one(before, after)
    assert change.kind == kind and change.name == "nvidia-nccl-cu13"
    assert "nvidia-nccl-cu13" in change.message


def test_same_version_with_other_files_is_rebuilt_only_when_both_digests_known() -> None:
    assert one(dist("a", "1.0", "sha256:1"), dist("a", "1.0", "sha256:2")).kind == "rebuilt"
    assert diff({"a": dist("a", "1.0", "")}, {"a": dist("a", "1.0", "sha256:2")}) == []
    assert diff({"a": dist("a", "1.0", "sha256:1")}, {"a": dist("a", "1.0.0", "sha256:1")}) == []


def test_same_unparsable_version_is_not_a_change() -> None:
    assert diff({"a": dist("a", "weird")}, {"a": dist("a", "weird")}) == []


def test_changes_are_sorted_by_name() -> None:
    before = {n: dist(n, "1.0") for n in ("zeta", "alpha")}
    after = {n: dist(n, "2.0") for n in ("mid", "zeta")}
    assert [c.name for c in diff(before, after)] == ["alpha", "mid", "zeta"]


def test_shadowed_names_the_winner() -> None:
    env = Environment(
        "/usr/bin/python3",
        "3.11.2",
        {},
        ("/usr/local/lib/python3.11/dist-packages", "/usr/lib/python3/dist-packages"),
        (
            dist("numpy", "2.1.0", location="/usr/local/lib/python3.11/dist-packages"),
            dist("numpy", "1.24.2", location="/usr/lib/python3/dist-packages"),
            dist("six", "1.16.0", location="/usr/lib/python3/dist-packages"),
        ),
    )
    (change,) = shadowed(env)
    assert change.kind == "shadowed" and change.after and change.after.version == "2.1.0"
    assert "2.1.0 in /usr/local/lib/python3.11/dist-packages wins" in change.message


versions = st.builds(
    lambda release, pre, post, dev, local: (
        ".".join(map(str, release))
        + (f"{pre[0]}{pre[1]}" if pre else "")
        + (f".post{post}" if post is not None else "")
        + (f".dev{dev}" if dev is not None else "")
        + (f"+{local}" if local else "")
    ),
    st.lists(st.integers(0, 30), min_size=1, max_size=4),
    st.none() | st.tuples(st.sampled_from(["a", "b", "rc"]), st.integers(0, 5)),
    st.none() | st.integers(0, 5),
    st.none() | st.integers(0, 5),
    st.none() | st.sampled_from(["cu130", "cu128", "cpu", "1", "abc.5"]),
)


@given(versions, versions)
def test_direction_agrees_with_packaging(old: str, new: str) -> None:
    changes = diff({"p": dist("p", old)}, {"p": dist("p", new)})
    a, b = Version(old), Version(new)
    if a.public == b.public and a.local != b.local:
        expected = ["variant"]
    elif a == b:
        expected = []
    else:
        expected = ["upgraded" if b > a else "downgraded"]
    assert [c.kind for c in changes] == expected


separators = st.sampled_from(["-", "_", ".", "--", "_.", "-_-"])


@given(st.lists(st.from_regex(r"[a-z0-9]{1,6}", fullmatch=True), min_size=1, max_size=4), st.data())
def test_spelling_variants_are_one_package(parts: list[str], data: st.DataObject) -> None:
    spellings = set()
    for _ in range(3):
        seps = [data.draw(separators) for _ in parts[1:]]
        text = parts[0] + "".join(s + p for s, p in zip(seps, parts[1:], strict=True))
        spellings.add("".join(c.upper() if data.draw(st.booleans()) else c for c in text))
    assert len({canonicalize_name(s) for s in spellings}) == 1
    first, *others = sorted(spellings)
    for other in others:
        assert (
            diff(
                {canonicalize_name(first): dist(first, "1.0")},
                {canonicalize_name(other): dist(other, "1.0")},
            )
            == []
        )


def test_parse_version_never_raises() -> None:
    assert parse_version("1.0+cu130") == Version("1.0+cu130")
    assert parse_version("$$$") is None


def test_a_comparison_names_what_each_reader_needs() -> None:
    """touched: another object at another version or digest (in ``after``'s order); removed:
    only before; moved: new or another version text, even one equal as a version; changes:
    what diff reports (an equal version is no change)."""
    kept = dist("kept", "1.0")
    before = {"kept": kept, "gone": dist("gone", "1.0"), "same": dist("same", "2.0"),
              "respelt": dist("respelt", "1.0"), "rebuilt": dist("rebuilt", "3.0", "sha256:1"),
              "up": dist("up", "1.0")}  # fmt: skip
    after = {"up": dist("up", "1.1"), "new": dist("new", "0.1"), "kept": kept,
             "same": dist("same", "2.0"), "respelt": dist("respelt", "1.0.0"),
             "rebuilt": dist("rebuilt", "3.0", "sha256:2")}  # fmt: skip
    pair = Comparison(before, after)
    assert sorted(pair.touched) == ["new", "rebuilt", "respelt", "up"]
    assert pair.removed == ["gone"]
    assert pair.moved == ["up", "new", "respelt"]
    assert [(c.kind, c.name) for c in pair.changes] == [
        ("removed", "gone"), ("added", "new"), ("rebuilt", "rebuilt"), ("upgraded", "up"),
    ]  # fmt: skip
    assert pair.changes == diff(before, after)
    pair.changes.clear()  # each read is the caller's own list
    assert len(pair.changes) == 4
