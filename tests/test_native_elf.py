"""ELF facts with pyelftools: the path reader, the streaming reader, bad input, JSON."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path
from typing import IO, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit.native.elf import (
    ElfFacts,
    ElfFormatError,
    Unreadable,
    facts_from_json,
)
from audit.native.elfread import read_path, read_stream
from tests.support.native_build import CC, PATCHELF, build, needs_gcc, needs_patchelf

SYSTEM_LIBRARIES = [p for p in (Path("/lib/x86_64-linux-gnu/libstdc++.so.6"),
                                Path("/lib/x86_64-linux-gnu/libc.so.6")) if p.exists()]  # fmt: skip


class _Forward(io.RawIOBase):
    """A stream that cannot seek (as a tar member read from a pipe)."""

    def __init__(self, data: bytes) -> None:
        super().__init__()
        self.data, self.at = data, 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        end = len(self.data) if size < 0 else self.at + size
        chunk, self.at = self.data[self.at : end], min(end, len(self.data))
        return chunk


def _streamed(path: Path, cap: int = 64 << 20) -> tuple[object, int]:
    kept: list[int] = []
    data = path.read_bytes()
    stream = cast("IO[bytes]", _Forward(data))
    return read_stream(stream, len(data), str(path), cap=cap, kept=kept), sum(kept)


@pytest.fixture
def libraries(tmp_path: Path) -> list[Path]:
    found = list(SYSTEM_LIBRARIES)
    if CC is None:  # gcc missing: the system libraries alone
        if not found:
            pytest.skip("needs gcc or the system's libstdc++/libc to read")
        return found
    script = "JIT_1 { global: a; b; }; JIT_2 { global: c; } JIT_1;\n"
    provider = build(tmp_path / "p/libjit.so.1", "libjit.so.1", defines=("a", "b", "c"),
                     version_script=script)  # fmt: skip
    user = build(tmp_path / "u/libuser.so", "libuser.so", calls=("a", "c"), needs=[provider],
                 runpath="$ORIGIN/../p:$LIB")  # fmt: skip
    return [*found, provider, user]


def test_facts_of_a_versioned_library_built_here(libraries: list[Path]) -> None:
    facts = {p.name: read_path(p) for p in libraries}
    if "libuser.so" not in facts:
        pytest.skip("needs gcc")
    provider, user = facts["libjit.so.1"], facts["libuser.so"]
    assert isinstance(provider, ElfFacts) and isinstance(user, ElfFacts)
    assert provider.soname == "libjit.so.1"
    # ld also defines each version's name as an absolute symbol of that version
    assert {d.name: d.symbols for d in provider.defines if d.symbols} == {
        "JIT_1": ("JIT_1", "a", "b"), "JIT_2": ("JIT_2", "c")}  # fmt: skip
    assert "libjit.so.1" in provider.version_names()  # the base definition
    assert user.runpath == "$ORIGIN/../p:$LIB" and user.rpath is None
    assert "libjit.so.1" in user.needed
    need = user.need("libjit.so.1")
    assert need is not None
    assert {v.name: v.symbols for v in need.versions} == {"JIT_1": ("a",), "JIT_2": ("c",)}
    assert provider.defines_symbol("c", "JIT_2") and not provider.defines_symbol("c", "JIT_1")


def test_the_facts_agree_with_readelf(libraries: list[Path]) -> None:
    for path in libraries:
        facts = read_path(path)
        assert isinstance(facts, ElfFacts)
        dynamic = subprocess.run(["readelf", "-dW", str(path)], capture_output=True, text=True,
                                 check=True).stdout  # fmt: skip
        needed = [line.split("[", 1)[1].rstrip("]") for line in dynamic.splitlines()
                  if "(NEEDED)" in line]  # fmt: skip
        assert list(facts.needed) == needed
        versions = subprocess.run(["readelf", "-VW", str(path)], capture_output=True, text=True,
                                  check=True).stdout  # fmt: skip
        for version in facts.version_names():
            assert f"Name: {version}" in versions


def test_the_stream_reader_equals_the_path_reader(libraries: list[Path]) -> None:
    for path in libraries:
        streamed, kept = _streamed(path)
        assert streamed == read_path(path), path
        assert 0 < kept <= path.stat().st_size


def test_a_tar_member_streamed_from_a_pipe(tmp_path: Path, libraries: list[Path]) -> None:
    archive = tmp_path / "layer.tar"
    with tarfile.open(archive, "w") as tar:
        for path in libraries:
            tar.add(path.resolve(), arcname=f"usr/lib/{path.name}")
    with archive.open("rb") as raw, tarfile.open(fileobj=raw, mode="r|") as tar:
        found = {}
        for member in tar:
            handle = tar.extractfile(member)
            assert handle is not None
            found[Path(member.name).name] = read_stream(handle, member.size, member.name)
    assert found == {p.name: read_path(p) for p in libraries}


def test_memory_stays_within_the_cap(libraries: list[Path]) -> None:
    big = max(libraries, key=lambda p: p.stat().st_size)
    cap = 256 << 10
    streamed, kept = _streamed(big, cap=cap)
    assert kept <= cap
    if isinstance(streamed, Unreadable):
        assert not streamed.invalid and str(big) in streamed.reason
    tiny, kept = _streamed(big, cap=100)
    assert isinstance(tiny, Unreadable) and "cap of 100" in tiny.reason and not tiny.invalid
    assert kept == 0


@needs_gcc
@needs_patchelf
def test_tables_patchelf_moved_to_the_end_are_found(tmp_path: Path) -> None:
    """NVIDIA's cuDNN wheels: patchelf appended a segment holding .dynstr after PT_DYNAMIC."""
    library = build(tmp_path / "libcudnn_graph.so.9", "libcudnn_graph.so.9", defines=("g",),
                    version_script="libcudnn_graph.so.9 { global: g; local: *; };\n")  # fmt: skip
    assert PATCHELF is not None
    long_runpath = (
        "$ORIGIN:$ORIGIN/../../cublas/lib:$ORIGIN/../../cuda_nvrtc/lib:$ORIGIN/../../cu13/lib"
    )
    subprocess.run([PATCHELF, "--set-rpath", long_runpath, str(library)], check=True)
    streamed, _ = _streamed(library)
    assert isinstance(streamed, ElfFacts) and streamed.runpath == long_runpath
    assert streamed == read_path(library)


@needs_gcc
def test_truncated_files_are_named_never_raised(tmp_path: Path) -> None:
    whole = build(tmp_path / "whole/libt.so.1", "libt.so.1").read_bytes()
    for size in (0, 3, 40, 63, 64, 120, len(whole) // 3, len(whole) - 9):
        cut = tmp_path / f"cut{size}/libt.so.1"
        cut.parent.mkdir()
        cut.write_bytes(whole[:size])
        for facts in (read_path(cut), _streamed(cut)[0]):
            if isinstance(facts, Unreadable):
                assert str(cut) in facts.reason
            else:  # the dynamic tables can still be whole when only section headers are cut
                assert isinstance(facts, ElfFacts) and size > len(whole) // 2


def test_not_elf_and_loops_and_folders_are_named(tmp_path: Path) -> None:
    text = tmp_path / "libtext.so.1"
    text.write_text("INPUT(libfoo.so.1)\n")  # a linker script, as libc.so is
    loop = tmp_path / "libloop.so.1"
    loop.symlink_to(loop.name)
    for path, words, invalid in ((text, "not an ELF file", True), (loop, "cannot be read", False),
                                 (tmp_path, "cannot be read", False)):  # fmt: skip
        facts = read_path(path)
        assert isinstance(facts, Unreadable)
        assert facts.reason.startswith(f"{path}: ") and words in facts.reason
        assert facts.invalid is invalid
    streamed, _ = _streamed(text)
    assert streamed == read_path(text)


@needs_gcc
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.data())
def test_damaged_bytes_never_raise(tmp_path: Path, data: st.DataObject) -> None:
    path = tmp_path / "libd.so.1"
    if not path.exists():
        build(path, "libd.so.1", defines=("a", "b"), version_script="D_1 { global: a; b; };\n")
    original = bytearray(path.read_bytes())
    damaged = bytearray(original)
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, min(len(damaged) - 1, 4096)))
        damaged[at] = data.draw(st.integers(0, 255))
    target = tmp_path / "damaged/libd.so.1"
    target.parent.mkdir(exist_ok=True)
    target.write_bytes(bytes(damaged))
    for facts in (read_path(target), _streamed(target)[0]):
        assert isinstance(facts, (ElfFacts, Unreadable))
        if isinstance(facts, Unreadable):
            assert str(target) in facts.reason


def test_facts_round_trip_through_json(libraries: list[Path]) -> None:
    for path in libraries:
        facts = read_path(path)
        text = json.dumps(facts.to_json(), sort_keys=True)
        assert facts_from_json(json.loads(text)) == facts
    gone = Unreadable("x: not an ELF file", invalid=True)
    assert facts_from_json(gone.to_json()) == gone


def test_malformed_facts_json_says_where() -> None:
    good = ElfFacts("x86_64", 64, "libx.so.1").to_json()
    for key, value in (("needed", "libc.so.6"), ("bits", "64"), ("rpath", 3)):
        with pytest.raises(ElfFormatError, match=rf"scene.files\[x\].{key}"):
            facts_from_json({**good, key: value}, "scene.files[x]")
    with pytest.raises(ElfFormatError, match="missing 'soname'"):
        facts_from_json({k: v for k, v in good.items() if k != "soname"}, "f")
