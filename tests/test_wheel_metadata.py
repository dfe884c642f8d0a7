"""Metadata without payloads: real wheels on a 127.0.0.1 index, read the way resolvers do."""

from __future__ import annotations

import hashlib
import random
import socket
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from audit.errors import EnvironmentProblem, MetadataUnavailable
from audit.index import wheel_metadata as wm
from audit.index.simple import IndexFile, _from_html, _from_json
from tests.support.metaindex import serve_metadata_index
from tests.support.wheels import make_wheel

REQUIRES = ["nvidia-nccl-cu13==2.30.7; platform_system == 'Linux'", "filelock", "sympy>=1.13"]


def _noise(size: int, seed: int = 7) -> str:
    """Text that deflate cannot shrink much (a payload that would be costly to download)."""
    return random.Random(seed).randbytes(size // 2).hex()


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """torchish 2.14.0 with a 2 MB payload, an aarch64 and an x86_64 build of one version."""
    root = tmp_path_factory.mktemp("wheels")
    make_wheel(
        root, "torchish", "2.14.0", requires=REQUIRES, files={"torchish/lib.txt": _noise(2_000_000)}
    )
    make_wheel(
        root, "Plat_Pkg", "1.0", requires=["arm-only"], tag="cp312-cp312-manylinux_2_28_aarch64"
    )
    make_wheel(
        root, "Plat_Pkg", "1.0", requires=["x86-only"], tag="cp312-cp312-manylinux_2_28_x86_64"
    )
    return root


def _size(root: Path, prefix: str) -> int:
    return next(root.glob(f"{prefix}*.whl")).stat().st_size


@pytest.mark.parametrize("json_api", [True, False], ids=["pep691-json", "pep503-html"])
def test_range_requests_read_metadata_and_download_a_small_fraction(
    wheels: Path, json_api: bool
) -> None:
    stats = wm.FetchStats()
    with serve_metadata_index(wheels, json_api=json_api) as (index, served):
        meta = wm.fetch_metadata(index, "torchish", "2.14.0", stats=stats)
    assert (meta.name, meta.version, meta.how) == ("torchish", "2.14.0", "range")
    assert list(meta.requires_dist) == [
        'nvidia-nccl-cu13==2.30.7; platform_system == "Linux"',
        "filelock",
        "sympy>=1.13",
    ]
    assert meta.file.url.startswith(index.replace("/simple/", "/files/"))  # relative URL resolved
    assert stats.requests == served.requests == 2  # page, tail (METADATA sits near the end)
    assert stats.range_reads == 1 and stats.fallbacks == 0
    assert served.bytes_sent < _size(wheels, "torchish") / 10
    assert served.ranges[0] == f"bytes=-{64 * 1024}"


def test_gzip_pages_are_inflated_and_counted_as_sent(wheels: Path) -> None:
    stats = wm.FetchStats()
    with serve_metadata_index(wheels, gzip_pages=True) as (index, served):
        files = wm.project_files(index, "torchish", context=None, stats=stats)
    assert [f.filename for f in files] == ["torchish-2.14.0-py3-none-any.whl"]
    assert stats.bytes_downloaded == served.bytes_sent


def test_pep658_metadata_file_is_preferred_and_hash_checked(wheels: Path) -> None:
    stats = wm.FetchStats()
    with serve_metadata_index(wheels, metadata=True) as (index, served):
        meta = wm.fetch_metadata(index, "torchish", "2.14.0", stats=stats)
        bad = IndexFile(
            meta.file.filename,
            meta.file.url,
            meta.file.hashes,
            metadata_hashes={"sha256": "0" * 64},
        )
        with pytest.raises(EnvironmentProblem, match="metadata file's sha256 does not match"):
            wm.read_wheel_metadata(bad)
    assert meta.how == "pep658" and stats.metadata_files == 1
    assert served.ranges == [] and served.bytes_sent < 2000
    assert b"Requires-Dist: filelock" in meta.raw


@pytest.mark.parametrize("mode", ["ignore", "refuse"])
def test_a_server_without_ranges_costs_one_whole_download_counted(wheels: Path, mode: str) -> None:
    stats = wm.FetchStats()
    with serve_metadata_index(wheels, mode) as (index, _served):  # type: ignore[arg-type]
        meta = wm.fetch_metadata(index, "torchish", "2.14.0", stats=stats)
    assert meta.how == "download" and stats.fallbacks == 1 and stats.range_reads == 0
    assert stats.bytes_downloaded >= _size(wheels, "torchish")
    assert "filelock" in meta.requires_dist


def test_a_whole_download_is_checked_against_the_index_hash(wheels: Path) -> None:
    with serve_metadata_index(wheels, "ignore") as (index, _served):
        good = wm.fetch_metadata(index, "torchish", "2.14.0").file
        forged = IndexFile(good.filename, good.url, {"sha256": "f" * 64})
        with pytest.raises(EnvironmentProblem, match="wheel's sha256 does not match") as caught:
            wm.read_wheel_metadata(forged)
    assert caught.value.exit_code == 3


def test_the_wheel_for_the_target_platform_is_the_one_read(wheels: Path) -> None:
    arm = wm.target_tags("linux/arm64", "3.12", "2.36")
    amd = wm.target_tags("linux/amd64", "3.12", "2.36")
    with serve_metadata_index(wheels) as (index, _served):
        on_arm = wm.fetch_metadata(index, "plat-pkg", "1.0", tags=arm)
        on_amd = wm.fetch_metadata(index, "PLAT.pkg", "1.0", tags=amd)
        with pytest.raises(MetadataUnavailable, match="no wheel of that version"):
            wm.fetch_metadata(
                index, "plat-pkg", "1.0", tags=wm.target_tags("linux/arm64", "3.11", "2.36")
            )
    assert on_arm.requires_dist == ("arm-only",) and on_amd.requires_dist == ("x86-only",)


def test_missing_projects_and_versions_are_metadata_unavailable(wheels: Path) -> None:
    with serve_metadata_index(wheels) as (index, _served):
        with pytest.raises(MetadataUnavailable, match="does not carry the project") as caught:
            wm.fetch_metadata(index, "vllm", "0.11.1.dev5+gabc.cu130")
        with pytest.raises(MetadataUnavailable, match="no wheel of that version"):
            wm.fetch_metadata(index, "torchish", "2.14.0+cu130")
    assert caught.value.exit_code == 2 and "snapshot file" in caught.value.hint


def _rewrite(
    source: Path, dest: Path, monkeypatch: pytest.MonkeyPatch, *, zip64: bool, pad: int = 0
) -> Path:
    """``source`` rewritten into ``dest`` (zip64 records forced, or ``pad`` extra members)."""
    with zipfile.ZipFile(source) as archive:
        members = [(info, archive.read(info)) for info in archive.infolist()]
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / source.name
    with monkeypatch.context() as patch:
        if zip64:
            patch.setattr(zipfile, "ZIP64_LIMIT", 1)
            patch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", 1)
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
            for n in range(pad):
                out.writestr(f"torchish/data/{'deep/' * 8}file_{n:05d}.py", f"# {n}\n")
            for info, data in members:
                out.writestr(info, data)
    return target


def test_zip64_wheels_are_read(
    wheels: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheel = _rewrite(next(wheels.glob("torchish*.whl")), tmp_path / "z64", monkeypatch, zip64=True)
    assert b"PK\x06\x06" in wheel.read_bytes()[-200:]  # a zip64 end-of-central-directory record
    with serve_metadata_index(wheel.parent) as (index, served):
        meta = wm.fetch_metadata(index, "torchish", "2.14.0")
    assert meta.how == "range" and "filelock" in meta.requires_dist
    assert served.bytes_sent < wheel.stat().st_size / 10


def test_a_central_directory_bigger_than_the_tail_costs_one_more_request(
    wheels: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheel = _rewrite(
        next(wheels.glob("torchish*.whl")), tmp_path / "big", monkeypatch, zip64=False, pad=3000
    )
    stats = wm.FetchStats()
    with serve_metadata_index(wheel.parent) as (index, served):
        meta = wm.fetch_metadata(index, "torchish", "2.14.0", stats=stats)
    assert meta.how == "range" and "sympy>=1.13" in meta.requires_dist
    assert served.requests == 4  # page, tail, rest of the central directory, member
    assert served.bytes_sent < wheel.stat().st_size / 2


def test_a_truncated_wheel_is_an_environment_problem_naming_the_file(
    wheels: Path, tmp_path: Path
) -> None:
    source = next(wheels.glob("torchish*.whl"))
    cut = tmp_path / "cut" / source.name
    cut.parent.mkdir()
    cut.write_bytes(source.read_bytes()[: source.stat().st_size // 2])
    with (
        serve_metadata_index(cut.parent) as (index, _served),
        pytest.raises(EnvironmentProblem, match=source.name) as caught,
    ):
        wm.fetch_metadata(index, "torchish", "2.14.0")
    assert "not a readable zip" in caught.value.message and caught.value.exit_code == 3


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_index_that_does_not_answer_is_exit_3_with_the_index_redacted() -> None:
    index = f"http://ci-user:s3cret-token@127.0.0.1:{_closed_port()}/simple/"
    with pytest.raises(EnvironmentProblem) as caught:
        wm.fetch_metadata(index, "torchish", "2.14.0")
    assert caught.value.exit_code == 3
    assert "127.0.0.1" in caught.value.message and "s3cret" not in str(caught.value)


def test_the_cache_is_keyed_by_the_wheel_hash(wheels: Path, tmp_path: Path) -> None:
    first, second = wm.FetchStats(), wm.FetchStats()
    with serve_metadata_index(wheels) as (index, _served):
        one = wm.fetch_metadata(index, "torchish", "2.14.0", stats=first, cache=tmp_path)
        two = wm.fetch_metadata(index, "torchish", "2.14.0", stats=second, cache=tmp_path)
    digest = hashlib.sha256(next(wheels.glob("torchish*.whl")).read_bytes()).hexdigest()
    assert (tmp_path / f"{digest}.metadata").read_bytes() == one.raw == two.raw
    assert two.how == "cache" and second.requests == 1  # the project page only


def test_fetch_many_returns_what_the_index_lacks_instead_of_stopping(wheels: Path) -> None:
    seen: list[str] = []
    with serve_metadata_index(wheels) as (index, _served):
        got = wm.fetch_many(
            index,
            [("torchish", "2.14.0"), ("Plat_Pkg", "1.0"), ("vllm", "0.11.1.dev5+gabc")],
            tags=wm.target_tags("linux/arm64", "3.12", "2.36"),
            on_done=lambda name, _outcome: seen.append(name),
        )
    assert sorted(got) == ["plat-pkg", "torchish", "vllm"] and sorted(seen) == [
        "Plat_Pkg",
        "torchish",
        "vllm",
    ]
    assert isinstance(got["vllm"], MetadataUnavailable)
    plat = got["plat-pkg"]
    assert isinstance(plat, wm.Metadata) and plat.requires_dist == ("arm-only",)


# -- the index pages (pure parsing) ------------------------------------------------------------


def test_json_pages_note_yanked_files_pep714_metadata_and_relative_urls() -> None:
    page = {
        "files": [
            {"filename": "a-1.0-py3-none-any.whl", "url": "../../f/a-1.0-py3-none-any.whl",
             "hashes": {"sha256": "ab" * 32}, "yanked": "broken",
             "core-metadata": {"sha256": "cd" * 32}},
            {"filename": "a-1.1-py3-none-any.whl", "url": "https://files.example/a-1.1-py3-none-any.whl",
             "hashes": {}, "data-dist-info-metadata": True, "requires-python": ">=3.9"},
        ]
    }  # fmt: skip
    old, new = _from_json(page, "https://idx.example/simple/a/")
    assert old.url == "https://idx.example/f/a-1.0-py3-none-any.whl" and old.yanked == "broken"
    assert old.metadata_hashes == {"sha256": "cd" * 32}
    assert new.metadata_hashes == {} and new.yanked is None and new.requires_python == ">=3.9"


def test_html_pages_note_the_same() -> None:
    text = (
        '<html><head><base href="https://mirror.example/pkgs/"></head><body>'
        f'<a href="a-1.0-py3-none-any.whl#sha256={"ab" * 32}" data-yanked="" '
        f'data-dist-info-metadata="sha256={"cd" * 32}">a-1.0-py3-none-any.whl</a>'
        '<a href="/x/a-1.1-py3-none-any.whl" data-requires-python="&gt;=3.9">'
        "a-1.1-py3-none-any.whl</a>"
        "</body></html>"
    )
    old, new = _from_html(text, "https://idx.example/simple/a/")
    assert old.url == "https://mirror.example/pkgs/a-1.0-py3-none-any.whl" and old.yanked == ""
    assert old.hashes == {"sha256": "ab" * 32} and old.metadata_hashes == {"sha256": "cd" * 32}
    assert new.url == "https://mirror.example/x/a-1.1-py3-none-any.whl"
    assert new.yanked is None and new.metadata_hashes is None and new.requires_python == ">=3.9"


def test_a_yanked_file_is_read_only_when_nothing_else_fits() -> None:
    yanked = IndexFile("a-1.0-py3-none-any.whl", "u1", {}, yanked="bad")
    fine = IndexFile("a-1.0-cp312-cp312-manylinux_2_17_aarch64.whl", "u2", {})
    tags = wm.target_tags("linux/arm64", "3.12", "2.36")
    assert wm.best_wheel([yanked, fine], "1.0", tags) == fine
    assert wm.best_wheel([yanked], "1.0", tags) == yanked
    assert wm.best_wheel([fine], "1.0", wm.target_tags("linux/amd64", "3.12", "2.36")) is None


def test_target_tags_rank_the_newest_manylinux_first() -> None:
    tags = [str(t) for t in wm.target_tags("linux/arm64", "3.12", "2.39")]
    assert tags[0] == "cp312-cp312-manylinux_2_39_aarch64"
    assert "cp312-cp312-manylinux2014_aarch64" in tags and "py3-none-any" in tags
    assert not any("manylinux_2_16_aarch64" in t or "x86_64" in t for t in tags)


@pytest.fixture(autouse=True)
def _no_ambient_proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """127.0.0.1 is reached directly whatever proxy the machine configures."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    yield
