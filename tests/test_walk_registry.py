"""Walking an image in a registry through the distribution API: token and basic auth,
redirects, platforms, the cache, and registries that refuse or do not answer (no Docker:
:mod:`tests.support.walk_registry` serves the API; the real registry is in
``test_walk_docker.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from audit.errors import AuditError, BadInput, EnvironmentProblem
from audit.history.walk.registry import RegistrySettings, credentials, parse_challenge, scheme_for
from audit.history.walk.run import WalkContext, walk
from tests.support.registry import free_port
from tests.support.walk_images import (
    Layer,
    Platform,
    config,
    dist_info,
    docker_config,
    oci_layout,
    write_layout,
)
from tests.support.walk_registry import token_registry

SITE = "/usr/local/lib/python3.11/site-packages"
REPO = "team/ml"
USER, PASSWORD = "ci", "s3cret-pw"


def layers(note: str) -> list[bytes]:
    base = Layer().add(
        {
            "/usr/local/bin/python3.11": b"\x7fELF",
            "/usr/local/lib/python3.11/os.py": note,
            **dist_info(SITE, "nccl-like", "2.30.0"),
        }
    )
    late = Layer(whiteouts=[f"{SITE}/nccl_like-2.30.0.dist-info"]).add(
        dist_info(SITE, "nccl-like", "2.29.7")
    )
    return [base.tar(), late.tar()]


def two_platforms() -> dict[str, bytes]:
    amd, arm = layers("amd64"), layers("arm64")
    return oci_layout(
        [
            Platform(tuple(amd), config(amd), "linux/amd64"),
            Platform(tuple(arm), config(arm, architecture="arm64"), "linux/arm64"),
        ],
        tag="1",
    )


def logged_in(tmp_path: Path, **options: object) -> WalkContext:
    environ = {"LAYER_AUDIT_REGISTRY_USER": USER, "LAYER_AUDIT_REGISTRY_PASSWORD": PASSWORD}
    settings = RegistrySettings(config_dir=tmp_path / "no-docker-config", environ=environ)
    return WalkContext(cache_root=tmp_path / "cache", registry=settings, **options)  # type: ignore[arg-type]


def test_a_token_registry_by_tag_with_platforms_and_redirects(tmp_path: Path) -> None:
    files = two_platforms()
    with token_registry(files, REPO, USER, PASSWORD) as served:
        result = walk(f"registry:{served.host}/{REPO}:1", logged_in(tmp_path))
        arm = walk(f"registry:{served.host}/{REPO}:1", logged_in(tmp_path, platform="linux/arm64"))
    local = walk(f"oci:{write_layout(tmp_path / 'layout', files)}", WalkContext(cache_root=None))
    assert result.history.states[1:] == local.history.states[1:]
    assert result.image.platform == "linux/amd64" and arm.image.platform == "linux/arm64"
    assert result.image.tags == (f"{served.host}/{REPO}:1",)
    assert served.storage_authorizations and set(served.storage_authorizations) == {""}
    assert all(PASSWORD not in line for line in served.paths)


def test_a_second_walk_downloads_no_layer(tmp_path: Path) -> None:
    with token_registry(two_platforms(), REPO, USER, PASSWORD) as served:
        first = walk(f"registry:{served.host}/{REPO}:1", logged_in(tmp_path))
        blobs_before = len(served.storage_authorizations)
        second = walk(f"registry:{served.host}/{REPO}:1", logged_in(tmp_path))
    assert len(served.storage_authorizations) == blobs_before + 1  # the config blob only
    assert second.history == first.history and second.cache.layer_hits == 2
    assert all(layer.cached for layer in second.image.layers)


def test_a_registry_that_asks_for_basic_auth(tmp_path: Path) -> None:
    with token_registry(two_platforms(), REPO, USER, PASSWORD, scheme="basic") as served:
        result = walk(f"registry:{served.host}/{REPO}:1", logged_in(tmp_path))
        anonymous = WalkContext(
            cache_root=None, registry=RegistrySettings(config_dir=tmp_path, environ={})
        )
        error = refused(f"registry:{served.host}/{REPO}:1", anonymous)
    assert [d.version for d in result.history.states[-1].environments[0].distributions] == [
        "2.29.7"
    ]
    assert not any("/token" in path for path in served.paths)
    assert error.exit_code == 3 and "a login is required" in error.message


def test_credentials_from_the_docker_config(tmp_path: Path) -> None:
    with token_registry(two_platforms(), REPO, USER, PASSWORD) as served:
        folder = docker_config(tmp_path / "docker", served.host, USER, PASSWORD)
        context = WalkContext(
            cache_root=None, registry=RegistrySettings(config_dir=folder, environ={})
        )
        result = walk(f"registry:{served.host}/{REPO}:1", context)
    assert len(result.history.states) == 3


def refused(spec: str, context: WalkContext) -> AuditError:
    with pytest.raises(AuditError) as caught:
        walk(spec, context)
    return caught.value


def test_refusals_say_what_and_exit_2_or_3(tmp_path: Path) -> None:
    anonymous = WalkContext(
        cache_root=None, registry=RegistrySettings(config_dir=tmp_path, environ={})
    )
    wrong = RegistrySettings(
        config_dir=tmp_path,
        environ={
            "LAYER_AUDIT_REGISTRY_USER": USER,
            "LAYER_AUDIT_REGISTRY_PASSWORD": "wrong-password",
        },
    )
    with token_registry(two_platforms(), REPO, USER, PASSWORD) as served:
        no_token = refused(f"registry:{served.host}/{REPO}:1", anonymous)
        bad_login = refused(
            f"registry:{served.host}/{REPO}:1", WalkContext(cache_root=None, registry=wrong)
        )
        missing = refused(f"registry:{served.host}/{REPO}:2", logged_in(tmp_path))
    assert isinstance(no_token, EnvironmentProblem) and no_token.exit_code == 3
    assert "no token" in no_token.message and "docker login" in no_token.hint
    assert bad_login.exit_code == 3 and "wrong-password" not in str(bad_login)
    assert (
        isinstance(missing, BadInput)
        and missing.exit_code == 2
        and "no manifest 2" in missing.message
    )
    gone = refused(f"registry:127.0.0.1:{free_port()}/{REPO}:1", anonymous)
    assert isinstance(gone, EnvironmentProblem) and "does not answer" in gone.message


def test_transport_credentials_and_challenges() -> None:
    plain = RegistrySettings(environ={})
    assert scheme_for("127.0.0.1:5000", plain) == "http"
    assert scheme_for("localhost:5000", plain) == "http"
    assert scheme_for("registry.example:5000", plain) == "https"
    assert (
        scheme_for(
            "registry.example:5000", RegistrySettings(insecure=("registry.example",), environ={})
        )
        == "http"
    )
    assert parse_challenge(
        'Bearer realm="https://auth.example/token",service="reg",scope="repository:a:pull"'
    ) == (
        "bearer",
        {"realm": "https://auth.example/token", "service": "reg", "scope": "repository:a:pull"},
    )


def test_docker_hub_logins_are_found_by_their_legacy_key(tmp_path: Path) -> None:
    folder = tmp_path / "docker"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps({"auths": {"https://index.docker.io/v1/": {"username": "me", "password": "pw"}}})
    )
    settings = RegistrySettings(config_dir=folder, environ={})
    assert credentials("registry-1.docker.io", settings) == ("me", "pw")
    assert credentials("ghcr.io", settings) is None
