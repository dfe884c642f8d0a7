"""Walking images given as files (docker save and OCI layout tarballs and folders), bad input,
and the cache (no Docker: the files are made in memory)."""

from __future__ import annotations

import datetime
import gzip
import json
import multiprocessing
import os
import tarfile
from pathlib import Path

import pytest

from audit.errors import AuditError, BadInput, ImageFormatError, UsageError
from audit.history.walk import run
from audit.history.walk.cache import VERSION
from audit.history.walk.run import WalkContext, WalkResult, walk
from audit.history.walk.spec import ImageSpec, parse_registry_ref, parse_spec
from audit.policy.judge import judge_history
from audit.policy.model import Policy
from tests.support.walk_images import (
    Layer,
    Platform,
    config,
    dist_info,
    docker_archive,
    oci_layout,
    sha256,
    tar_of,
    write_layout,
)

SITE = "/usr/local/lib/python3.11/site-packages"


def python_layers(arch_note: str = "") -> list[bytes]:
    base = Layer(links={"/usr/local/bin/python3": "python3.11"}).add(
        {
            "/usr/local/bin/python3.11": b"\x7fELF",
            "/usr/local/lib/python3.11/os.py": arch_note,
            **dist_info(SITE, "nccl-like", "2.30.0"),
        }
    )
    downgrade = Layer(whiteouts=[f"{SITE}/nccl_like-2.30.0.dist-info"])
    downgrade.add(dist_info(SITE, "nccl-like", "2.29.7"))
    return [base.tar(), downgrade.tar()]


@pytest.fixture
def context(tmp_path: Path) -> WalkContext:
    return WalkContext(cache_root=tmp_path / "cache", docker=_no_engine)


def _no_engine() -> object:
    raise AssertionError("a file walk never talks to the engine")


def versions(result: WalkResult) -> list[list[tuple[str, str]]]:
    return [
        [(d.name, d.version) for env in state.environments for d in env.distributions]
        for state in result.history.states
    ]


EXPECTED = [[], [("nccl-like", "2.30.0")], [("nccl-like", "2.29.7")]]


@pytest.mark.parametrize("manifest_last", [True, False])
def test_a_docker_save_tarball(tmp_path: Path, context: WalkContext, manifest_last: bool) -> None:
    layers = python_layers()
    image_config = config(layers)
    path = tmp_path / "image.tar"
    path.write_bytes(
        docker_archive(layers, image_config, ["my/app:1"], manifest_last=manifest_last)
    )
    result = walk(f"docker-archive:{path}", context)
    assert versions(result) == EXPECTED
    assert result.image.id == sha256(image_config) and result.image.tags == ("my/app:1",)
    assert result.image.diff_ids == tuple(sha256(layer) for layer in layers)
    assert [layer.size for layer in result.image.layers] == [len(layer) for layer in layers]
    assert result.history.image == f"docker-archive:{path}"


def test_the_same_image_streamed_from_a_pipe(tmp_path: Path, context: WalkContext) -> None:
    layers = python_layers()
    fifo = tmp_path / "image.fifo"
    os.mkfifo(fifo)
    data = docker_archive(layers, config(layers))
    writer = multiprocessing.Process(target=fifo.write_bytes, args=(data,), daemon=True)
    writer.start()
    try:
        result = walk(f"docker-archive:{fifo}", context)
    finally:
        writer.join(10)
        writer.kill()
    assert versions(result) == EXPECTED and result.image.bytes_read == len(data)


@pytest.mark.parametrize("compress", [True, False])
@pytest.mark.parametrize("as_tar", [True, False])
def test_an_oci_layout(tmp_path: Path, context: WalkContext, compress: bool, as_tar: bool) -> None:
    layers = python_layers()
    files = oci_layout(
        [Platform(tuple(layers), config(layers), "linux/amd64")], compress=compress, tag="v1"
    )
    target = tmp_path / ("layout.tar" if as_tar else "layout")
    if as_tar:
        target.write_bytes(tar_of(files))
    else:
        write_layout(target, files)
    result = walk(f"oci:{target}:v1", context)
    assert versions(result) == EXPECTED
    assert result.image.manifest_digest.startswith("sha256:")
    with pytest.raises(ImageFormatError, match="no image tagged 'v2'"):
        walk(f"oci:{target}:v2", WalkContext(cache_root=None))


def test_an_extracted_docker_save_folder(tmp_path: Path, context: WalkContext) -> None:
    """``docker save IMG -o a.tar; tar -xf a.tar -C d``: the folder is read like the tarball,
    and a folder that is neither layout is refused by name."""
    layers = python_layers()
    archive = tmp_path / "a.tar"
    archive.write_bytes(docker_archive(layers, config(layers), ["my/app:1"]))
    folder = tmp_path / "d"
    folder.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    assert versions(walk(str(folder), context)) == EXPECTED  # a bare path, as users give it
    (tmp_path / "empty").mkdir()
    with pytest.raises(ImageFormatError, match=r"neither index\.json nor manifest\.json"):
        walk(f"oci:{tmp_path / 'empty'}", context)


def test_an_index_of_two_platforms(tmp_path: Path, context: WalkContext) -> None:
    amd = python_layers("amd64")
    arm = python_layers("arm64")
    images = [
        Platform(tuple(amd), config(amd), "linux/amd64"),
        Platform(tuple(arm), config(arm, architecture="arm64"), "linux/arm64/v8"),
    ]
    folder = write_layout(tmp_path / "layout", oci_layout(images))
    host = walk(f"oci:{folder}", context)
    assert host.image.platform == "linux/amd64"
    arm_context = WalkContext(cache_root=context.cache_root, platform="linux/arm64")
    chosen = walk(f"oci:{folder}", arm_context)
    assert chosen.image.platform == "linux/arm64"
    assert chosen.history.states[-1].environments[0].markers["platform_machine"] == "aarch64"
    with pytest.raises(
        ImageFormatError, match=r"no image for linux/s390x \(it has: linux/amd64, linux/arm64/v8\)"
    ):
        walk(f"oci:{folder}", WalkContext(cache_root=None, platform="linux/s390x"))


def test_the_spec_syntax() -> None:
    def exists(path: str) -> bool:
        return path in ("/x/a:b.tar", "/y/layout")

    assert parse_spec("my/app:1", exists).kind == "engine"
    assert parse_spec("docker:my/app:1", exists).target == "my/app:1"
    spec = parse_spec("docker-archive:/x/a:b.tar:my/app:1", exists)
    assert (spec.kind, spec.target, spec.tag) == ("docker-archive", "/x/a:b.tar", "my/app:1")
    assert parse_spec("oci:/y/layout", exists).tag == ""
    # a bare existing path is the file (as syft reads one); a bare name stays the engine's
    assert parse_spec("/y/layout", exists) == ImageSpec("docker-archive", "/y/layout")
    assert parse_spec("/y/missing.tar", exists).kind == "engine"
    assert parse_spec("docker:/y/layout", exists).kind == "engine"
    assert parse_spec("layout", lambda _: True).kind == "engine"
    assert parse_spec("app.tar", lambda _: True).kind == "docker-archive"
    assert parse_spec("registry:127.0.0.1:5000/a/b:2", exists).kind == "registry"
    ref = parse_registry_ref("127.0.0.1:5000/team/app:2")
    assert (ref.host, ref.repository, ref.reference) == ("127.0.0.1:5000", "team/app", "2")
    hub = parse_registry_ref("python@sha256:" + "a" * 64)
    assert (hub.host, hub.repository, hub.by_digest) == (
        "registry-1.docker.io",
        "library/python",
        True,
    )
    with pytest.raises(UsageError):
        parse_spec("", exists)
    with pytest.raises(UsageError) as caught:
        parse_registry_ref("user:s3cret-password@registry.example/x")
    assert "s3cret-password" not in str(caught.value)


# ----------------------------------------------------------------------------- bad input


def snapshot_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def refused(spec: str, context: WalkContext) -> AuditError:
    with pytest.raises(AuditError) as caught:
        walk(spec, context)
    assert "Traceback" not in str(caught.value)
    return caught.value


def test_bad_files_are_refused_with_exit_2_and_nothing_written(tmp_path: Path) -> None:
    layers = python_layers()
    archive = docker_archive(layers, config(layers))
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "random.bin").write_bytes(os.urandom(5000))
    (inputs / "plain.tar").write_bytes(tar_of({"hello.txt": b"hi"}))
    (inputs / "cut.tar").write_bytes(archive[: len(archive) // 2])
    tampered = bytearray(archive)
    at = tampered.index(b"Version: 2.29.7")
    tampered[at : at + 10] = b"Version: 9"  # a file's bytes change, the config's diff-id does not
    (inputs / "tampered.tar").write_bytes(bytes(tampered))
    (inputs / "layout").mkdir()
    before = snapshot_of(tmp_path)
    context = WalkContext(cache_root=tmp_path / "cache")
    cases = {
        "random.bin": "not an image archive",
        "plain.tar": "no manifest.json or index.json",
        "cut.tar": "truncated",
        "tampered.tar": "damaged or tampered with",
        "layout": "not an OCI image layout",
    }
    for name, message in cases.items():
        error = refused(f"docker-archive:{inputs / name}", context)
        assert isinstance(error, ImageFormatError) and error.exit_code == 2, name
        assert message in str(error), (name, str(error))
        assert str(inputs / name) in error.message and error.hint
    missing = refused(f"oci:{inputs / 'absent'}", context)
    assert isinstance(missing, BadInput) and missing.exit_code == 2
    after = snapshot_of(tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith("cache/")} == before


def test_a_layer_that_climbs_out_of_the_root_is_refused(tmp_path: Path) -> None:
    good = Layer().add({"usr/evil": "x"}).tar()
    evil = bytearray(good)
    at = evil.index(b"usr/evil")
    evil[at : at + 8] = b"../.evil"
    block = at - at % 512
    evil[block + 148 : block + 156] = b" " * 8
    evil[block + 148 : block + 156] = f"{sum(evil[block : block + 512]):06o}\0 ".encode()
    layers = [bytes(evil)]
    path = tmp_path / "evil.tar"
    path.write_bytes(docker_archive(layers, config(layers)))
    error = refused(f"docker-archive:{path}", WalkContext(cache_root=tmp_path / "cache"))
    assert error.exit_code == 2 and "leaves the image root" in str(error)
    assert not (tmp_path / "evil").exists() and not Path("/evil").exists()


def test_a_gzip_layer_cut_short_is_refused(tmp_path: Path) -> None:
    layers = python_layers()
    files = oci_layout([Platform(tuple(layers), config(layers), "linux/amd64")])
    for name, data in files.items():
        if data.startswith(b"\x1f\x8b"):
            files[name] = data[: len(data) // 2]
            break
    folder = write_layout(tmp_path / "layout", files)
    error = refused(f"oci:{folder}", WalkContext(cache_root=None))
    assert error.exit_code == 2 and ("truncated" in str(error) or "damaged" in str(error))


# ----------------------------------------------------------------------------- the cache


def test_a_second_walk_reads_no_layer(tmp_path: Path, context: WalkContext) -> None:
    layers = python_layers()
    path = tmp_path / "image.tar"
    path.write_bytes(docker_archive(layers, config(layers)))
    first = walk(f"docker-archive:{path}", context)
    assert first.cache.layer_hits == 0 and not any(layer.cached for layer in first.image.layers)
    second = walk(f"docker-archive:{path}", context)
    assert second.history == first.history
    assert all(layer.cached for layer in second.image.layers) and second.cache.layer_hits == 2
    assert second.image.bytes_read < 2000  # the manifest and the config: no layer byte


def test_a_damaged_entry_is_ignored_and_written_again(tmp_path: Path, context: WalkContext) -> None:
    layers = python_layers()
    path = tmp_path / "image.tar"
    path.write_bytes(docker_archive(layers, config(layers)))
    first = walk(f"docker-archive:{path}", context)
    assert context.cache_root is not None
    entries = sorted((context.cache_root / VERSION / "layers").glob("*.json"))
    assert len(entries) == 2
    entries[0].write_bytes(entries[0].read_bytes()[:-40])  # truncated
    entries[1].write_bytes(b'{"format": "layer-audit.walk-delta/0"}\n{}')  # another format
    second = walk(f"docker-archive:{path}", context)
    assert second.history == first.history
    assert second.cache.layer_hits == 0 and second.cache.damaged == 1
    third = walk(f"docker-archive:{path}", context)
    assert third.cache.layer_hits == 2 and third.history == first.history


def _walk_in_child(spec: str, root: str) -> None:
    for _ in range(3):
        walk(spec, WalkContext(cache_root=Path(root)))


def test_concurrent_walks_keep_the_cache_whole(tmp_path: Path) -> None:
    layers = [
        Layer().add({f"/data/{i}/{j}": os.urandom(64) for j in range(300)}).tar() for i in range(4)
    ]
    layers.append(Layer().add(dist_info(SITE, "alpha", "1")).tar())
    path = tmp_path / "image.tar"
    path.write_bytes(docker_archive(layers, config(layers)))
    spec, root = f"docker-archive:{path}", tmp_path / "cache"
    children = [
        multiprocessing.Process(target=_walk_in_child, args=(spec, str(root))) for _ in range(3)
    ]
    for child in children:
        child.start()
    for child in children:
        child.join(120)
    assert [child.exitcode for child in children] == [0, 0, 0]
    alone = walk(spec, WalkContext(cache_root=None))
    cached = walk(spec, WalkContext(cache_root=root))
    assert cached.cache.layer_hits == len(layers) and cached.cache.damaged == 0
    assert cached.history == alone.history
    assert not list(root.rglob("*.tmp"))


def test_no_cache_root_writes_nothing(tmp_path: Path) -> None:
    layers = python_layers()
    path = tmp_path / "image.tar"
    path.write_bytes(docker_archive(layers, config(layers)))
    before = snapshot_of(tmp_path)
    walk(f"docker-archive:{path}", WalkContext(cache_root=None))
    assert snapshot_of(tmp_path) == before


def test_the_default_cache_is_under_the_cache_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert WalkContext().cache_root == tmp_path / "layer-audit" / "walk"
    assert run.host_platform().startswith("linux/")


def test_gzip_module_agrees() -> None:  # the helpers' gzip layers are real gzip
    data = Layer().add({"/a": "b"}).tar()
    assert gzip.decompress(gzip.compress(data)) == data


def test_the_committed_arm64_layout_walks_anywhere(tmp_path: Path) -> None:
    """The small OCI tarball under tests/data (tests/data/walk/make_arm64_layout.py made it)."""
    data = Path(__file__).parent / "data" / "walk" / "arm64-oci.tar"
    result = walk(f"oci:{data}", WalkContext(cache_root=None, platform="linux/arm64"))
    assert result.image.platform == "linux/arm64/v8"
    (env,) = result.history.states[-1].environments
    assert env.markers["platform_machine"] == "aarch64" and env.interpreter == "/usr/bin/python3.11"
    assert [(d.name, d.version) for d in env.distributions] == [("nccl-like", "2.29.7")]
    verdicts = judge_history(result.history, Policy(), today=datetime.date(2026, 12, 1))
    assert [f.rule for v in verdicts for f in v.findings if f.fails] == ["downgraded"]
    assert json.loads(data.with_suffix(".json").read_text())["platform"] == "linux/arm64/v8"
    assert os.path.getsize(data) < 64_000
