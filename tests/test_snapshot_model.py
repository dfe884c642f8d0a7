"""The snapshot file format: round trip, canonical bytes, and rejection of bad files (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from audit.core.errors import EXIT_BAD_INPUT, SnapshotError
from audit.core.snapshot import (
    SCHEMA,
    Distribution,
    Environment,
    dump_snapshot,
    parse_snapshot,
    read_snapshot,
)

SITE = "/opt/venv/lib/python3.11/site-packages"


def make_env(*dists: Distribution, interpreter: str = "/opt/venv/bin/python") -> Environment:
    markers = {"python_version": "3.11", "platform_machine": "aarch64"}
    return Environment(interpreter, "3.11.2", markers, (SITE,), dists)


def torch(version: str = "2.9.0+cu130", location: str = SITE) -> Distribution:
    return Distribution("torch", version, location, "pip", "sha256:aa", "torch", "dist-info")


def test_dump_then_parse_round_trips() -> None:
    env = make_env(torch(), Distribution("foo-bar", "1.0", SITE, "", "", "Foo_Bar", "egg-info"))
    assert parse_snapshot(dump_snapshot([env]), "x.json") == (env,)


def test_dump_is_canonical_sorted_compact_with_trailing_newline() -> None:
    data = dump_snapshot([make_env(torch())])
    assert data.endswith(b"}\n") and data.count(b"\n") == 1
    document = json.loads(data)
    assert list(document) == ["digest", "environments", "schema"]
    assert document["schema"] == SCHEMA and document["digest"].startswith("sha256:")
    assert dump_snapshot([make_env(torch())]) == data


def test_winners_take_the_first_copy_on_the_path() -> None:
    env = make_env(torch("2.9.0", "/a"), torch("2.8.0", "/b"))
    assert env.winners()["torch"].location == "/a"


def _tampered(data: bytes) -> bytes:
    return data.replace(b"2.9.0+cu130", b"2.9.1+cu130")


def _wrong_schema(data: bytes) -> bytes:
    return data.replace(SCHEMA.encode(), b"layer-audit.snapshot/9")


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (_tampered, "digest"),
        (lambda data: data[: len(data) // 2], "truncated"),
        (lambda data: b"", "truncated"),
        (_wrong_schema, "schema"),
        (lambda data: b"[1, 2]", "top level"),
        (lambda data: b"\xff\xfe", "UTF-8"),
    ],
)
def test_damaged_snapshots_are_bad_input(damage, problem) -> None:  # type: ignore[no-untyped-def]
    data = damage(dump_snapshot([make_env(torch())]))
    with pytest.raises(SnapshotError, match=problem) as caught:
        parse_snapshot(data, "base.json")
    assert caught.value.exit_code == EXIT_BAD_INPUT
    assert "base.json" in caught.value.message and caught.value.hint


def _resealed(edit) -> bytes:  # type: ignore[no-untyped-def]
    """A hand-built file with a valid digest, so field validation (not the seal) must catch it."""
    document = json.loads(dump_snapshot([make_env(torch())]))
    del document["digest"]
    edit(document["environments"][0])
    envs = document["environments"]
    body = {"schema": SCHEMA, "environments": envs}
    from audit.core.snapshot import _digest_of, canonical_json

    return (canonical_json(dict(body, digest=_digest_of(body))) + "\n").encode()


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda env: env["distributions"][0].update(name="Torch"), "distributions[0].name"),
        (lambda env: env["distributions"][0].update(metadata="wheel"), "metadata"),
        (lambda env: env["distributions"][0].update(version=2), "version"),
        (lambda env: env["distributions"][0].pop("digest"), "distributions[0]"),
        (lambda env: env.update(paths="/usr"), "paths"),
        (lambda env: env.update(markers={"python_version": 3}), "markers"),
    ],
)
def test_malformed_fields_name_their_key(edit, key) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SnapshotError, match=key.replace("[", r"\[").replace("]", r"\]")):
        parse_snapshot(_resealed(edit), "after.json")


def test_read_snapshot_missing_file_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match="cannot read"):
        read_snapshot(tmp_path / "nope.json")
