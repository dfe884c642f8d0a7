"""Hostile images given to the layer walk: each answered inside the contract (exit 2 with a
clear message, never a traceback), with bounded resources, and shown without letting what the
image says act on a terminal or a report.

Pure: every image is made in memory (tests/support/walk_images.py) and walked as a file.
"""

from __future__ import annotations

import contextlib
import http.server
import io
import json
import os
import socketserver
import tarfile
import threading
import time
from pathlib import Path

import pytest

from audit.errors import BadInput, EnvironmentProblem, ImageFormatError, UsageError
from audit.history.walk import files as walk_files
from audit.history.walk import registry
from audit.history.walk.blobs import LayerBlob
from audit.history.walk.registry import RegistrySettings
from audit.history.walk.run import WalkContext, walk
from audit.history.walk.source import Known, SourceSettings
from audit.policy.findings import Finding
from audit.redact import printable
from audit.report.findings import _markdown_table
from tests.support.walk_images import (
    Layer,
    Platform,
    config,
    debian_python,
    dist_info,
    docker_archive,
    oci_layout,
    sha256,
    tar_of,
    write_layout,
)

SITE = "/usr/lib/python3.11/site-packages"


def _context(tmp_path: Path) -> WalkContext:
    return WalkContext(cache_root=tmp_path / "cache", elf_reader=None)


def _python() -> bytes:
    return Layer().add(debian_python()).tar()


def test_a_layout_folder_missing_its_config_is_bad_input(tmp_path: Path) -> None:
    """A manifest naming a config blob the folder lacks: exit 2 naming the blob (it was an
    uncaught ``Incomplete``: a traceback and exit 1)."""
    layer = _python()
    files = oci_layout([Platform((layer,), config([layer]), "linux/amd64")], index=False)
    folder = write_layout(tmp_path / "layout", files)
    (folder / "blobs" / "sha256" / sha256(config([layer]))[7:]).unlink()
    with pytest.raises(ImageFormatError, match="not an image folder: no blobs/sha256/"):
        walk(f"oci:{folder}", _context(tmp_path))


def test_a_whole_gzipped_archive_is_named_as_such(tmp_path: Path) -> None:
    """``docker save IMAGE | gzip``: the message says it is compressed and how to read it."""
    import gzip

    layer = _python()
    path = tmp_path / "image.tar.gz"
    path.write_bytes(gzip.compress(docker_archive([layer], config([layer]))))
    with pytest.raises(ImageFormatError, match=r"gzip-compressed.*gunzip"):
        walk(f"docker-archive:{path}", _context(tmp_path))


def test_a_pipe_that_would_need_a_second_read_is_refused_clearly(tmp_path: Path) -> None:
    """A ``manifest.json`` written twice changes the image after its layers passed: a file
    is read again; a pipe cannot be, and says so (it said "an empty stream")."""
    python = _python()
    first = Layer().add(dist_info(SITE, "aaa", "1.0")).tar()
    second = Layer().add(dist_info(SITE, "bbb", "2.0")).tar()
    members = [
        ("manifest.json", [{"Config": "a.json", "RepoTags": [], "Layers": ["p", "a/layer.tar"]}]),
        ("a.json", config([python, first])),
        ("b.json", config([python, second])),
        ("p/layer.tar", python),
        ("a/layer.tar", first),
        ("b/layer.tar", second),
        ("manifest.json", [{"Config": "b.json", "RepoTags": [], "Layers": ["p", "b/layer.tar"]}]),
    ]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, value in members:
            data = value if isinstance(value, bytes) else json.dumps(value).encode()
            data = data.replace(b'"p"', b'"p/layer.tar"')
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(buffer.getvalue()), daemon=True)
    writer.start()
    with pytest.raises(ImageFormatError, match="a pipe cannot be read again") as caught:
        walk(f"docker-archive:{fifo}", _context(tmp_path))
    writer.join(timeout=5)
    assert caught.value.hint == "write the archive to a file and give that file"


def test_a_plain_layer_leaves_no_thread_behind() -> None:
    """Every blob joins its hash threads on close (a plain tar's second hasher never ended:
    an image of 100k layers ran out of threads, a traceback)."""
    layer = _python()
    before = threading.active_count()
    for _ in range(50):
        blob = LayerBlob(scan=False)
        blob.write(memoryview(layer))
        blob.close()
        assert blob.diff_id == blob.digest
    assert threading.active_count() <= before


def test_many_plain_layers_walk(tmp_path: Path) -> None:
    """300 one-file layers: walked, each verified, no thread left (a scaled-down 100k)."""
    layers = [Layer().add({f"/f{i}": b""}).tar() for i in range(300)]
    path = tmp_path / "many.tar"
    path.write_bytes(docker_archive(layers, config(layers)))
    before = threading.active_count()
    result = walk(f"docker-archive:{path}", _context(tmp_path))
    assert len(result.image.layers) == 300
    assert threading.active_count() <= before


@pytest.mark.parametrize("spec", ["user:pw-S3cret@host.example/x", "docker:u:pw-S3cret@h/x"])
def test_engine_references_with_credentials_are_refused_unrepeated(spec: str) -> None:
    """The engine's own error echoed them URL-encoded (``%40``), past redaction."""
    with pytest.raises(UsageError) as caught:
        walk(spec, WalkContext(cache_root=None))
    assert "S3cret" not in caught.value.message + caught.value.hint


def test_a_spec_of_two_lines_does_not_repeat_registry_credentials() -> None:
    with pytest.raises(UsageError) as caught:
        walk("registry:user:pw-S3cret@host.example/x\n", WalkContext(cache_root=None))
    assert "S3cret" not in caught.value.message
    assert "registry:host.example/x" in caught.value.message


def test_control_characters_are_shown_not_acted_on() -> None:
    """ESC, NUL, DEL and C1 controls become visible ``\\u00XX``; tab and newline stay; a JSON
    document stays valid and equal."""
    shown = printable("evil\x1b[2J\x00\x7f\x9b\tok\n")
    assert shown == "evil\\u001b[2J\\u0000\\u007f\\u009b\tok\n"
    assert printable(shown) == shown
    document = json.dumps({"name": "x\x7f\x85"}, ensure_ascii=False)
    assert json.loads(printable(document)) == json.loads(document)


def test_a_package_name_cannot_break_the_markdown_findings_table() -> None:
    """``|`` splits no cell, a backquote ends no code span early, HTML is shown as text."""
    finding = Finding(
        rule="forbidden",
        severity="error",
        package="a|b`<i>c</i>",
        before=None,
        after=None,
        message="<script>x</script>|y",
    )
    row = _markdown_table([finding])[2]
    assert row.count(" | ") == 4
    assert "`a\\|b'<i>c</i>`" in row
    assert "&lt;script&gt;x&lt;/script&gt;\\|y" in row


def test_the_terminal_console_shows_escapes() -> None:
    """What the console prints passes printable: an image's ``ESC[2J`` clears no screen."""
    from audit.host import console

    buffer = io.StringIO()
    drawn = console.file_console(buffer, 80)
    drawn.print("name \x1b]0;title\x07 \x1b[2J", markup=False)
    assert "\x1b" not in buffer.getvalue()
    assert "\\u001b]0;title" in buffer.getvalue()


def test_a_missing_file_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInput):
        walk_files.fetch_file(str(tmp_path / "nope.tar"), "", SourceSettings(), Known())


def test_a_huge_document_is_named_with_its_limit(tmp_path: Path) -> None:
    """A config past the document limit: "no c.json" also says such a document is not read."""
    layer = _python()
    path = tmp_path / "huge.tar"
    manifest = json.dumps([{"Config": "c.json", "RepoTags": [], "Layers": ["l.tar"]}]).encode()
    monkey_limit = 1 << 10
    path.write_bytes(
        tar_of({"l.tar": layer, "c.json": b" " * (monkey_limit + 1), "manifest.json": manifest})
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(walk_files, "JSON_LIMIT", monkey_limit)
        with pytest.raises(ImageFormatError, match=r"no c\.json .*MiB is not read"):
            walk(f"docker-archive:{path}", _context(tmp_path))


class _HostileTokens(http.server.BaseHTTPRequestHandler):
    """A registry that asks for a bearer token, and a token service whose answer is
    ``self.server.answer`` (nested too deep, or too big)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.startswith("/token"):
            body: bytes = self.server.answer  # type: ignore[attr-defined]
            self.send_response(200)
        else:
            body = b""
            self.send_response(401)
            port = self.server.server_address[1]  # type: ignore[index]
            realm = f'Bearer realm="http://127.0.0.1:{port}/token",service="x"'
            self.send_header("WWW-Authenticate", realm)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (b"[" * 1500 + b"]" * 1500, "recursion"),
        (b'{"token": "' + b"t" * 5000 + b'"}', "is not a token"),
    ],
)
def test_a_hostile_token_service_is_an_environment_problem(
    answer: bytes, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nesting too deep was a RecursionError traceback; an answer of gigabytes was held whole
    (6 GB RSS): it is read up to TOKEN_LIMIT (here 4 KiB)."""
    monkeypatch.setattr(registry, "TOKEN_LIMIT", 4096)
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _HostileTokens)
    server.daemon_threads = True
    server.answer = answer  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(EnvironmentProblem, match=said):
            walk(f"registry:127.0.0.1:{server.server_address[1]}/x:1", WalkContext(cache_root=None))
    finally:
        server.shutdown()
        server.server_close()


class _Trickle(http.server.BaseHTTPRequestHandler):
    """A registry that answers a manifest one byte every 0.1 s: each wait within any read
    timeout, the whole for ever."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        with contextlib.suppress(OSError):
            for _ in range(1000):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.1)


def test_a_registry_that_trickles_meets_a_deadline() -> None:
    """The read timeout bounds each wait only; a document's whole read has a deadline (the
    walk waited 100 s here, and a 16 MiB document at a byte a minute, years)."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Trickle)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    context = WalkContext(cache_root=None, registry=RegistrySettings(timeout=0.5))
    started = time.monotonic()
    try:
        with pytest.raises(EnvironmentProblem, match=r"the answer took over"):
            walk(f"registry:127.0.0.1:{server.server_address[1]}/x:1", context)
    finally:
        server.shutdown()
        server.server_close()
    assert time.monotonic() - started < 5
