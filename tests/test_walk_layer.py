"""One layer's tar stream read into its delta: the tar reader, the scanner, the blob digests."""

from __future__ import annotations

import gzip
import io
import tarfile
from typing import IO, Any

import pytest

from audit.history.walk.blobs import LayerBlob
from audit.history.walk.delta import (
    DIST_DIR,
    EXECUTABLE,
    SITE_DIR,
    STDLIB,
    Blob,
    LayerDelta,
    Library,
    Link,
    Marker,
    Meta,
    Packages,
    delta_from_json,
    delta_to_json,
)
from audit.history.walk.layer import LayerFormatError, LayerScanner, normalise
from audit.history.walk.tarstream import TarFormatError, TarMember, TarReader
from tests.support.walk_images import Layer, dist_info, dpkg_status, egg_info, sha256

SITE = "/usr/local/lib/python3.11/site-packages"


def scan(data: bytes, chunk: int = 1 << 20, **options: Any) -> LayerDelta:
    scanner = LayerScanner(**options)
    for at in range(0, len(data), chunk):
        scanner.feed(data[at : at + chunk])
    return scanner.finish()


def facts(delta: LayerDelta) -> dict[str, Any]:
    return {fact.path: fact for fact in delta.facts}


class Collect:
    def __init__(self, found: dict[str, bytes], name: str) -> None:
        self.found, self.name, self.parts = found, name, bytearray()

    def write(self, data: memoryview) -> None:
        self.parts += data

    def close(self) -> None:
        self.found[self.name] = bytes(self.parts)


def read_all(data: bytes, chunk: int) -> tuple[list[TarMember], dict[str, bytes]]:
    members: list[TarMember] = []
    contents: dict[str, bytes] = {}

    def on_member(member: TarMember) -> Collect:
        members.append(member)
        return Collect(contents, member.name)

    reader = TarReader(on_member)
    for at in range(0, len(data), chunk):
        reader.feed(data[at : at + chunk])
    reader.finish()
    return members, contents


def odd_archive(fmt: int) -> bytes:
    long_name = "usr/lib/" + "deep/" * 30 + "METADATA"
    layer = Layer(links={"usr/bin/python3": "python3.11", "x/" + "l" * 120: "/" + "t" * 130})
    layer.add({long_name: "Name: deep\n\n", "usr/bin/python3.11": b"\x7fELF" + bytes(3000)})
    layer.hard["usr/bin/python3.11-hard"] = "usr/bin/python3.11"
    return layer.tar(fmt)


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT])
@pytest.mark.parametrize("chunk", [1, 7, 511, 512, 513, 4096, 1 << 20])
def test_the_reader_sees_what_tarfile_sees_in_any_chunking(fmt: int, chunk: int) -> None:
    data = odd_archive(fmt)
    members, contents = read_all(data, chunk)
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        expected = [(m.name, m.size if m.isreg() else 0, m.linkname) for m in archive]
        blobs = {m.name: archive.extractfile(m).read() for m in archive if m.isreg()}  # type: ignore[union-attr]
    assert [(m.name.rstrip("/"), m.size, m.linkname) for m in members] == expected
    assert {k: v for k, v in contents.items() if k in blobs} == blobs


def test_a_cut_or_damaged_archive_is_refused() -> None:
    data = odd_archive(tarfile.PAX_FORMAT)
    with pytest.raises(TarFormatError, match="truncated"):
        read_all(data[:1500], 512)
    damaged = bytearray(data)
    damaged[100:108] = b"garbage!"
    damaged[257:262] = b"xxxxx"  # no ustar magic: the checksum must add up, and does not
    with pytest.raises(TarFormatError, match="checksum"):
        read_all(bytes(damaged), 512)
    with pytest.raises(TarFormatError, match="empty"):
        read_all(b"", 512)


def test_whiteouts_opaque_folders_and_paths() -> None:
    layer = Layer(
        whiteouts=[f"{SITE}/nccl_like-2.30.0.dist-info", "/etc/gone"], opaque=["/opt/app"]
    )
    layer.add(dist_info(SITE, "nccl-like", "2.29.7"))
    delta = scan(layer.tar())
    assert delta.whiteouts == (f"{SITE}/nccl_like-2.30.0.dist-info", "/etc/gone")
    assert delta.opaque == ("/opt/app",)
    assert f"{SITE}/nccl_like-2.29.7.dist-info/METADATA" in delta.others
    assert SITE in delta.dirs and "/usr" in delta.dirs
    assert delta.files == len(delta.others) and delta.size == len(layer.tar())


def test_metadata_header_installer_and_record_digest() -> None:
    layer = Layer().add(
        dist_info(SITE, "Foo_Bar", "1.0+cu130", requires=["alpha>=1"], installer="uv")
    )
    data = layer.tar()
    found = facts(scan(data))
    meta = found[f"{SITE}/foo_bar-1.0+cu130.dist-info/METADATA"]
    assert isinstance(meta, Meta)
    assert (meta.name, meta.version, meta.requires) == ("Foo_Bar", "1.0+cu130", ("alpha>=1",))
    record = found[f"{SITE}/foo_bar-1.0+cu130.dist-info/RECORD"]
    assert isinstance(record, Blob)
    assert record.sha256 == sha256(layer.files[f"{SITE}/foo_bar-1.0+cu130.dist-info/RECORD"])
    installer = found[f"{SITE}/foo_bar-1.0+cu130.dist-info/INSTALLER"]
    assert isinstance(installer, Blob) and installer.text == "uv\n"
    assert found[f"{SITE}/foo_bar-1.0+cu130.dist-info"] == Marker(
        f"{SITE}/foo_bar-1.0+cu130.dist-info", DIST_DIR
    )
    assert found[SITE] == Marker(SITE, SITE_DIR)
    assert f"{SITE}/foo_bar/__init__.py" not in found  # skipped: not a fact


def test_a_long_header_is_read_to_its_end_and_no_further() -> None:
    header = "Name: big\nVersion: 2\n" + "".join(f"Requires-Dist: dep{i}\n" for i in range(900))
    body = "x" * 3_000_000
    layer = Layer().add({f"{SITE}/big-2.dist-info/METADATA": header + "\n" + body})
    meta = facts(scan(layer.tar(), chunk=65536))[f"{SITE}/big-2.dist-info/METADATA"]
    assert isinstance(meta, Meta) and len(meta.requires) == 900
    assert meta.sha256 == sha256((header + "\n" + body).encode())


def test_egg_info_folder_and_file_and_system_files() -> None:
    layer = Layer().add(
        {
            **egg_info("/usr/lib/python3/dist-packages", "wheel", "0.38.4", "[test]\npytest\n"),
            "/usr/lib/python3/dist-packages/six-1.16.0.egg-info": "Name: six\nVersion: 1.16.0\n\n",
            "/var/lib/dpkg/status": dpkg_status([("libc6", "2.36-9"), ("python3.11", "3.11.2-6")]),
            "/var/lib/dpkg/status.d/base": dpkg_status([("base-files", "12.4")]),
            "/var/lib/dpkg/status.d/base.md5sums": "ignored",
            "/usr/lib/os-release": "ID=debian\n",
            "/etc/ld.so.conf.d/cuda.conf": "/usr/local/cuda/lib64\n",
            "/opt/venv/pyvenv.cfg": "home = /usr/bin\n",
            "/usr/local/include/python3.12/patchlevel.h": '#define PY_VERSION "3.12.4"\n',
            "/usr/lib/python3.11/os.py": "",
            "/usr/bin/python3.11": b"\x7fELF",
            "/usr/bin/python3-config": "#!/bin/sh\n",
        }
    )
    found = facts(scan(layer.tar()))
    assert isinstance(found["/usr/lib/python3/dist-packages/six-1.16.0.egg-info"], Meta)
    requires = found["/usr/lib/python3/dist-packages/wheel-0.38.4.egg-info/requires.txt"]
    assert isinstance(requires, Blob) and requires.text == "[test]\npytest\n"
    status = found["/var/lib/dpkg/status"]
    assert isinstance(status, Packages) and [p.name for p in status.packages] == [
        "libc6",
        "python3.11",
    ]
    assert isinstance(found["/var/lib/dpkg/status.d/base"], Packages)
    assert "/var/lib/dpkg/status.d/base.md5sums" not in found
    for path in (
        "/usr/lib/os-release",
        "/etc/ld.so.conf.d/cuda.conf",
        "/opt/venv/pyvenv.cfg",
        "/usr/local/include/python3.12/patchlevel.h",
    ):
        assert isinstance(found[path], Blob), path
    assert found["/usr/lib/python3.11/os.py"] == Marker("/usr/lib/python3.11/os.py", STDLIB)
    assert found["/usr/bin/python3.11"] == Marker("/usr/bin/python3.11", EXECUTABLE)
    assert "/usr/bin/python3-config" not in found


def test_member_names_that_leave_the_root_are_refused() -> None:
    assert normalise("./usr/bin/") == "/usr/bin"
    assert normalise("a/../b") == "/b"
    assert normalise("/abs/path") == "/abs/path"
    with pytest.raises(LayerFormatError, match="leaves the image root"):
        normalise("../../etc/passwd")
    evil = Layer().add({"usr/x": "x"})
    buffer = io.BytesIO(evil.tar())
    data = buffer.getvalue().replace(b"usr/x", b"../..x")  # same length: the header stays valid
    header = bytearray(data)
    # fix the checksum of the first file header so only the name is wrong
    for at in range(0, len(header), 512):
        if bytes(header[at : at + 6]) == b"../..x":
            block = header[at : at + 512]
            block[148:156] = b" " * 8
            header[at + 148 : at + 156] = (f"{sum(block):06o}\0 ").encode()
    with pytest.raises(LayerFormatError, match="leaves the image root"):
        scan(bytes(header))


def test_links_are_kept_as_written_and_hard_links_copy_the_fact() -> None:
    layer = Layer(links={"/lib": "usr/lib", "/etc/evil": "/../../../etc/shadow"})
    layer.add({"/usr/bin/python3.11": b"\x7fELF"})
    layer.hard["/usr/bin/python3"] = "/usr/bin/python3.11"
    layer.hard["/usr/share/other"] = "/usr/share/untracked"
    found = facts(scan(layer.tar()))
    assert found["/lib"] == Link("/lib", "usr/lib")
    assert found["/etc/evil"] == Link("/etc/evil", "/../../../etc/shadow")
    assert found["/usr/bin/python3"] == Marker("/usr/bin/python3", EXECUTABLE)
    assert found["/usr/share/other"] == Link("/usr/share/other", "/usr/share/untracked", hard=True)


def test_cuda_libraries_and_nvidia_record_libraries() -> None:
    site = "/opt/venv/lib/python3.11/site-packages"
    layer = Layer().add(
        dist_info(
            site,
            "nvidia-nccl-cu13",
            "2.30.7",
            files={"nvidia/nccl/lib/libnccl.so.2": b"\x7fELF" + bytes(100)},
        )
    )
    layer.add({"/usr/lib/x86_64-linux-gnu/libcudnn_ops.so.9.14.0": b"\x7fELF" + bytes(10)})
    found = facts(scan(layer.tar()))
    assert found[f"{site}/nvidia/nccl/lib/libnccl.so.2"] == Library(
        f"{site}/nvidia/nccl/lib/libnccl.so.2", 104
    )
    assert isinstance(found["/usr/lib/x86_64-linux-gnu/libcudnn_ops.so.9.14.0"], Library)
    record = found[f"{site}/nvidia_nccl_cu13-2.30.7.dist-info/RECORD"]
    assert isinstance(record, Blob) and record.libraries == ("nvidia/nccl/lib/libnccl.so.2",)


def test_the_elf_hook_reads_the_library_as_it_streams() -> None:
    seen: list[tuple[str, int]] = []

    def reader(path: str, stream: IO[bytes], size: int) -> dict[str, Any]:
        head = stream.read(4)
        seen.append((path, size))
        return {"magic": head.hex(), "soname": "libnccl.so.2"}

    def broken(path: str, stream: IO[bytes], size: int) -> dict[str, Any]:
        raise RuntimeError("cannot parse")

    payload = b"\x7fELF" + bytes(3 << 20)  # bigger than a chunk: the feeder must not block
    layer = Layer().add({"/usr/lib/libnccl.so.2.29.7": payload})
    found = facts(scan(layer.tar(), chunk=65536, elf_reader=reader))
    assert found["/usr/lib/libnccl.so.2.29.7"] == Library(
        "/usr/lib/libnccl.so.2.29.7", len(payload), {"magic": "7f454c46", "soname": "libnccl.so.2"}
    )
    assert seen == [("/usr/lib/libnccl.so.2.29.7", len(payload))]
    delta = scan(layer.tar(), elf_reader=broken)
    assert facts(delta)["/usr/lib/libnccl.so.2.29.7"] == Library(
        "/usr/lib/libnccl.so.2.29.7", len(payload)
    )
    assert delta.notes == (
        "/usr/lib/libnccl.so.2.29.7: the ELF reader failed (RuntimeError: cannot parse)",
    )


def test_a_delta_survives_its_json_round_trip() -> None:
    layer = Layer(whiteouts=["/gone"], opaque=["/opaque"], links={"/lib": "usr/lib"})
    layer.add({**dist_info(SITE, "a", "1"), "/var/lib/dpkg/status": dpkg_status([("x", "1")])})
    layer.add({"/usr/lib/libcudart.so.13": b"x", "/bad-\udcff-name": b"x"})
    delta = scan(layer.tar())
    assert delta_from_json(delta_to_json(delta)) == delta


def test_gzip_blobs_give_their_digest_and_diff_id() -> None:
    tar = Layer().add(dist_info(SITE, "a", "1")).tar()
    packed = gzip.compress(tar[:5000]) + gzip.compress(tar[5000:])  # two gzip members
    blob = LayerBlob()
    for at in range(0, len(packed), 1000):
        blob.write(memoryview(packed[at : at + 1000]))
    blob.close()
    assert (blob.digest, blob.diff_id, blob.compression) == (sha256(packed), sha256(tar), "gzip")
    assert blob.delta is not None and blob.delta == scan(tar)
    plain = LayerBlob(scan=False)
    plain.write(memoryview(tar))
    plain.close()
    assert plain.digest == plain.diff_id == sha256(tar) and plain.delta is None
    cut = LayerBlob()
    cut.write(memoryview(packed[: len(packed) // 2]))
    with pytest.raises(LayerFormatError):
        cut.close()
