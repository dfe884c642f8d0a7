"""Debian version comparison, checked against this machine's ``dpkg --compare-versions``.

The table holds the cases Debian policy and dpkg's own tests single out (epochs, ``~`` before the
end, letters before other characters, leading zeros, hyphens in the upstream part); the property
test draws versions from the characters that matter and asks dpkg for every pair it compares.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit.history.debversion import (
    DebianVersion,
    DebianVersionError,
    compare_debian_versions,
    parse_debian_version,
)

DPKG = shutil.which("dpkg")
needs_dpkg = pytest.mark.skipif(DPKG is None, reason="needs dpkg (Debian's package manager)")

TABLE = [
    ("1.0", "1.0", 0),
    ("1.0", "1.0-0", 0),
    ("0:1.0", "1.0", 0),
    ("1.0~rc1", "1.0", -1),
    ("1.0~~", "1.0~", -1),
    ("1.0~", "1.0", -1),
    ("1.0", "1.0+b1", -1),
    ("1.0a", "1.0+", -1),
    ("1.0.", "1.0a", 1),
    ("1:0.1", "2.0", 1),
    ("2.29.7-1+cuda13.0", "2.30.7-1+cuda13.0", -1),
    ("2.36-9+deb12u4", "2.36-9+deb12u10", -1),
    ("1.010", "1.10", 0),
    ("1.2-3-4", "1.2-3-5", -1),
    ("7.88.1-10+deb12u5", "7.88.1-10+deb12u14", -1),
    ("1.0-1~bpo12+1", "1.0-1", -1),
]


def dpkg_compare(left: str, right: str) -> int:
    """-1, 0 or 1 from ``dpkg --compare-versions`` (three calls at most)."""
    assert DPKG is not None
    for relation, value in (("lt", -1), ("eq", 0), ("gt", 1)):
        done = subprocess.run([DPKG, "--compare-versions", left, relation, right], check=False)
        if done.returncode == 0:
            return value
    raise AssertionError(f"dpkg gave no order for {left!r} and {right!r}")


@pytest.mark.parametrize(("left", "right", "expected"), TABLE)
def test_table(left: str, right: str, expected: int) -> None:
    assert compare_debian_versions(left, right) == expected
    assert compare_debian_versions(right, left) == -expected


@needs_dpkg
@pytest.mark.parametrize(("left", "right", "expected"), TABLE)
def test_table_agrees_with_dpkg(left: str, right: str, expected: int) -> None:
    assert dpkg_compare(left, right) == expected


def test_parts() -> None:
    assert parse_debian_version("1:2.36-9+deb12u4") == DebianVersion(1, "2.36", "9+deb12u4")
    assert parse_debian_version("2.0") == DebianVersion(0, "2.0", "")
    assert parse_debian_version("1.2-3-4") == DebianVersion(0, "1.2-3", "4")


@pytest.mark.parametrize("text", ["", "a1.0", "x:1.0", "1.0 1", ":1.0", "1:-2"])
def test_invalid(text: str) -> None:
    with pytest.raises(DebianVersionError):
        parse_debian_version(text)


_PART = st.text(alphabet="0129.+~ab-", min_size=0, max_size=6)
VERSIONS = st.builds(
    lambda epoch, head, rest, revision: f"{epoch}{head}{rest}{revision}",
    st.sampled_from(["", "1:", "0:"]),
    st.sampled_from(["0", "1", "2", "10", "01"]),
    _PART.map(lambda s: s.replace("-", "")),
    st.one_of(st.just(""), _PART.filter(lambda s: s != "").map(lambda s: "-" + s.lstrip("-"))),
).filter(lambda v: not v.endswith("-"))


@needs_dpkg
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(VERSIONS, VERSIONS)
def test_agrees_with_dpkg(left: str, right: str) -> None:
    assert compare_debian_versions(left, right) == dpkg_compare(left, right)
