"""The build plan (audit.build.plan): argv, targets, tags, labels, secrets, network; no Docker."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from audit.build.plan import (
    NO_GUARD_ARG,
    BuildOptions,
    choose_network,
    find_ca_bundle,
    netrc_text,
    plan_build,
    secret_sources,
    target_stages,
)
from audit.errors import UsageError
from audit.recipe.model import (
    CopyLayer,
    EnvLayer,
    Layer,
    PipLayer,
    Stage,
)
from tests.support.build_plan import BUILDX, CONTEXT, LEGACY, PROVENANCE, make_recipe, plan


def flag_values(argv: tuple[str, ...], flag: str) -> list[str]:
    return [argv[i + 1] for i, word in enumerate(argv) if word == flag]


def test_building_all_stages_builds_the_target_first_then_the_earlier_stages() -> None:
    assert target_stages(make_recipe(), None) == ("v3", "v1", "v2")
    assert target_stages(make_recipe(), "v2") == ("v2",)


def test_an_unknown_stage_is_bad_input_naming_the_choices() -> None:
    with pytest.raises(UsageError) as error:
        target_stages(make_recipe(), "v9")
    assert "v9" in error.value.message and "v1, v2, v3" in error.value.hint


def test_tags_follow_the_pattern_and_latest_moves_only_with_the_last_stage() -> None:
    built = plan(BuildOptions(image="spark"))
    tags = {build.stage: build.tags for build in built.builds}
    assert tags["v1"] == ("local/spark:v1-arm64-cu130",)
    assert tags["v2"] == ("local/spark:v2-arm64-cu130",)
    assert tags["v3"] == ("local/spark:v3-arm64-cu130", "local/spark:latest-arm64-cu130")


def test_platform_override_changes_the_arch_in_tags_and_argv() -> None:
    built = plan(BuildOptions(image="spark", stage="v1", platform="linux/amd64"))
    assert built.builds[0].tags == ("local/spark:v1-amd64-cu130",)
    assert flag_values(built.builds[0].argv, "--platform") == ["linux/amd64"]


def test_a_custom_tag_pattern_is_used() -> None:
    recipe = make_recipe(tag_pattern="{cuda}-{stage}", latest_tag_pattern="edge")
    built = plan(BuildOptions(image="spark", stage="v3"), recipe=recipe)
    assert built.builds[0].tags == ("local/spark:cu130-v3", "local/spark:edge")


def test_legacy_client_argv_builds_with_buildkit_env_to_a_temporary_tag() -> None:
    argv = plan(BuildOptions(image="spark", stage="v2")).builds[0].argv
    assert argv[:2] == ("/usr/bin/docker", "build")
    assert "--load" not in argv and "--progress=plain" in argv
    assert flag_values(argv, "--target") == ["v2"]
    assert flag_values(argv, "-t") == ["local/spark:layer-audit-build-t0k3n-v2"]
    assert flag_values(argv, "-f") == [str(CONTEXT / "Dockerfile")]
    assert argv[-1] == str(CONTEXT)


def test_buildx_argv_loads_the_result_and_names_the_builder() -> None:
    argv = plan(BuildOptions(image="spark", builder="remote-arm"), client=BUILDX).builds[0].argv
    assert argv[:4] == ("/usr/local/bin/docker", "buildx", "build", "--load")
    assert flag_values(argv, "--builder") == ["remote-arm"]


def test_builder_without_buildx_is_refused() -> None:
    with pytest.raises(UsageError, match="--builder remote"):
        plan(BuildOptions(image="spark", builder="remote"))


def test_labels_carry_oci_provenance_and_digests_and_the_stage() -> None:
    argv = plan(BuildOptions(image="spark")).builds[1].argv
    labels = dict(value.split("=", 1) for value in flag_values(argv, "--label"))
    assert labels["org.opencontainers.image.revision"] == "0123abcd"
    assert labels["org.opencontainers.image.source"] == "https://example.org/images.git"
    assert labels["org.opencontainers.image.created"] == "2026-01-02T03:04:05Z"
    assert labels["io.layer-audit.recipe.digest"] == "sha256:aaaa"
    assert labels["io.layer-audit.locks.digest"] == "sha256:bbbb"
    assert labels["io.layer-audit.stage"] == "v1"
    assert labels["io.layer-audit.guard"] == "on"


def test_unknown_provenance_leaves_its_labels_out() -> None:
    bare = replace(PROVENANCE, source="", revision="")
    built = plan_build(
        make_recipe(), BuildOptions(image="spark"), client=LEGACY, context=CONTEXT,
        provenance=bare, secrets={}, token="x",
    )  # fmt: skip
    keys = {label for label, _ in built.labels}
    assert "org.opencontainers.image.revision" not in keys
    assert "org.opencontainers.image.source" not in keys


def test_secrets_are_passed_as_buildkit_secrets_only() -> None:
    secrets = {"pip-ca": Path("/etc/ssl/ca.pem"), "pip-netrc": Path("/tmp/s/netrc")}
    argv = plan(BuildOptions(image="spark", stage="v1"), secrets=secrets).builds[0].argv
    assert flag_values(argv, "--secret") == [
        "id=pip-ca,src=/etc/ssl/ca.pem",
        "id=pip-netrc,src=/tmp/s/netrc",
    ]
    assert "--build-arg" not in argv
    assert not any("ca.pem" in value for value in flag_values(argv, "--label"))


def test_no_cache_applies_to_the_target_build_only() -> None:
    builds = plan(BuildOptions(image="spark", no_cache=True)).builds
    assert ["--no-cache" in build.argv for build in builds] == [True, False, False]


def test_an_unguarded_build_sets_the_switch_and_earns_no_tags() -> None:
    built = plan(BuildOptions(image="spark", guard=False))
    assert all(f"{NO_GUARD_ARG}=1" in flag_values(b.argv, "--build-arg") for b in built.builds)
    assert built.tags == ()
    assert ("io.layer-audit.guard", "off") in built.labels


def test_smoke_commands_come_from_the_stages() -> None:
    builds = {b.stage: b for b in plan(BuildOptions(image="spark")).builds}
    assert builds["v1"].smoke == "python3 -c 'import alpha'"
    assert builds["v2"].smoke is None


@pytest.mark.parametrize(
    ("index", "layers", "requested", "expected"),
    [
        ("http://127.0.0.1:8080/simple/", (CopyLayer("a", "/a"),), "auto", "host"),
        ("http://localhost/simple/", (EnvLayer((("A", "1"),)),), "auto", "host"),
        ("https://pypi.org/simple", (PipLayer("r.in"),), "auto", "host"),
        ("https://pypi.org/simple", (CopyLayer("a", "/a"),), "auto", None),
        ("http://127.0.0.1/simple/", (PipLayer("r.in"),), "default", None),
        ("https://pypi.org/simple", (PipLayer("r.in"),), "none", "none"),
    ],
)
def test_network_choice(
    index: str, layers: tuple[Layer, ...], requested: str, expected: str | None
) -> None:
    recipe = make_recipe(index_url=index, indexes=(), stages=(Stage("v1", layers),))
    assert choose_network(recipe, requested) == expected


def test_the_ca_bundle_comes_from_the_option_or_the_environment(tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    assert find_ca_bundle(bundle, {}) == bundle
    assert find_ca_bundle(None, {"SSL_CERT_FILE": str(bundle)}) == bundle
    assert find_ca_bundle(None, {"PIP_CERT": str(bundle)}) == bundle
    assert find_ca_bundle(None, {"SSL_CERT_FILE": str(tmp_path / "gone.pem")}) is None
    with pytest.raises(UsageError, match="no such file"):
        find_ca_bundle(tmp_path / "missing.pem", {})


def test_credentials_become_a_netrc_for_every_declared_index_host() -> None:
    text = netrc_text(make_recipe(), "alice:s3cret")
    assert text == (
        "machine flashinfer.ai login alice password s3cret\n"
        "machine pypi.org login alice password s3cret\n"
    )


def test_malformed_credentials_are_refused_without_echoing_them() -> None:
    with pytest.raises(UsageError) as error:
        netrc_text(make_recipe(), "only-a-token-XYZ")
    assert "XYZ" not in str(error.value)


def test_credentials_and_netrc_come_from_the_environment_then_home(tmp_path: Path) -> None:
    named, home_netrc = tmp_path / "named-netrc", tmp_path / ".netrc"
    named.write_text("machine example.org login u password p\n")
    home_netrc.write_text("machine example.org login u password p\n")
    env = {"LAYER_AUDIT_INDEX_CREDENTIALS": "bot:t0ken", "NETRC": str(named)}
    sources = secret_sources(BuildOptions(), env, tmp_path)
    assert (sources.credentials, sources.netrc) == ("bot:t0ken", named.resolve())
    fallback = secret_sources(BuildOptions(), {}, tmp_path)
    assert (fallback.credentials, fallback.netrc) == (None, home_netrc.resolve())
