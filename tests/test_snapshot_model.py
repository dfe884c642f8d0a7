"""The snapshot file format: round trip, canonical bytes, and rejection of bad files (exit 2)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from audit.errors import EXIT_BAD_INPUT, SnapshotError
from audit.history.snapshot import (
    SCHEMA,
    Distribution,
    Environment,
    _digest_of,
    canonical_json,
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
    from audit.history.snapshot import _digest_of, canonical_json

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


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"name": 5}, "distributions[1].name: expected a string, got int"),
        ({"name": ""}, "distributions[1].name: '' is not a canonical (PEP 503) name"),
        ({"requires_dist": "six"}, "distributions[1].requires_dist: expected a list of strings"),
        ({"requires_dist": ["six", 1]}, "distributions[1].requires_dist: expected a list of"),
        ({"requires_python": None}, "distributions[1].requires_python: expected a string, got"),
        ({"extra": "x"}, "distributions[1]: expected an object with keys"),
    ],
)
def test_a_malformed_distribution_after_a_well_formed_one_is_named_by_its_index(
    value: dict[str, object], problem: str
) -> None:
    def edit(env: dict[str, list[dict[str, object]]]) -> None:
        env["distributions"].append(dict(env["distributions"][0], **value))

    with pytest.raises(SnapshotError) as caught:
        parse_snapshot(_resealed(edit), "after.json")
    assert caught.value.message.startswith(f"after.json: environments[0].{problem}")


def test_parsed_distributions_equal_constructed_ones_in_both_schemas() -> None:
    """The reader's fast path builds what the constructor builds: every field, the hash, and
    schema 1's unrecorded requirements (None) with the default ``requires_python``."""
    full = Distribution("foo", "1.0", SITE, "pip", "sha256:aa", "Foo", "dist-info", ("six",), ">=3")
    [env] = parse_snapshot(dump_snapshot([make_env(torch(), full)]), "x.json")
    assert env.distributions == (torch(), full) and hash(env.distributions[1]) == hash(full)
    document = json.loads(dump_snapshot([make_env(full)]))
    [item] = document["environments"][0]["distributions"]
    del item["requires_dist"], item["requires_python"], document["digest"]
    document["schema"] = "layer-audit.snapshot/1"
    sealed = canonical_json(dict(document, digest=_digest_of(document))).encode()
    [old] = parse_snapshot(sealed, "x.json")
    assert old.distributions == (Distribution("foo", "1.0", SITE, "pip", "sha256:aa", "Foo"),)
    assert vars(old.distributions[0]) == vars(replace(full, requires_dist=None, requires_python=""))


def test_read_snapshot_missing_file_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match="cannot read"):
        read_snapshot(tmp_path / "nope.json")
