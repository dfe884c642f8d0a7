"""``lock --record-base --from-snapshot FILE``: one interpreter, two different documents.

The field case: a bookworm document and then a bullseye one in one file, both of
``/usr/bin/python3``. Recording either would put one image's packages under the other's
identity; it used to record the last one silently. Real documents here: the snapshot script run
by two real Pythons through one path (a link switched between them, as ``--entrypoint
/usr/bin/python3`` is the same path in two images).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from audit.base.snapshot_file import one_per_interpreter, parse_documents
from audit.errors import EXIT_BAD_INPUT, UsageError
from audit.history.snapshot import SCRIPT_PATH
from tests.support.cli import edit, fails

PYTHONS = [Path(f"/root/.pyenv/versions/{v}/bin/python3") for v in ("3.11.7", "3.12.1")]
ID = "sha256:" + "a" * 64
TWO_PYTHONS = pytest.mark.skipif(
    not all(p.exists() for p in PYTHONS), reason="needs two Pythons (3.11 and 3.12) here"
)


def documents(tmp_path: Path) -> tuple[Path, bytes]:
    """(the one path, two documents of it): first by one Python, then by the other."""
    link = tmp_path / "bin" / "python3"
    link.parent.mkdir()
    data = b""
    for python in PYTHONS:
        link.unlink(missing_ok=True)
        link.symlink_to(python)
        script = SCRIPT_PATH.read_bytes()
        data += subprocess.run(
            [str(link), "-"], input=script, capture_output=True, check=True
        ).stdout
    return link, data


@TWO_PYTHONS
def test_two_documents_of_one_interpreter_are_refused(tmp_path: Path) -> None:
    link, data = documents(tmp_path)
    environments = parse_documents(data, "snap.json")
    assert [e.interpreter for e in environments] == [str(link), str(link)]
    with pytest.raises(UsageError) as caught:
        one_per_interpreter(environments, "snap.json")
    assert caught.value.exit_code == EXIT_BAD_INPUT
    message = str(caught.value)
    assert f"two different snapshots of {link}" in message
    assert "Python 3.11.7" in message and "Python 3.12.1" in message


@TWO_PYTHONS
def test_the_same_document_twice_counts_once(tmp_path: Path) -> None:
    link, data = documents(tmp_path)
    first = data.split(b"\n")[0] + b"\n"
    (environment,) = one_per_interpreter(parse_documents(first + first, "snap.json"), "x").values()
    assert environment.interpreter == str(link)


@TWO_PYTHONS
def test_lock_from_snapshot_names_the_conflict_and_writes_nothing(
    demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    link, data = documents(tmp_path)
    edit(demo, "images/demo/image.toml", '["/opt/venv/bin/python"]', json.dumps([str(link)]))
    (demo / "snap.json").write_bytes(data)
    base = (demo / "locks/demo/base.json").read_bytes()
    argv = ["lock", "demo", "--record-base", "--from-snapshot", "snap.json", "--image-id", ID]
    err = fails(capsys, EXIT_BAD_INPUT, *argv)
    assert "two different snapshots of" in err and "3.12.1" in err
    assert (demo / "locks/demo/base.json").read_bytes() == base


def test_lock_from_snapshot_refuses_an_oversized_file_before_reading_it(
    demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from audit.history.snapshot import SNAPSHOT_LIMIT

    big = demo / "snap.json"
    with big.open("wb") as handle:
        handle.truncate(SNAPSHOT_LIMIT + 2**20)  # sparse: nothing is written
    argv = ["lock", "demo", "--record-base", "--from-snapshot", "snap.json", "--image-id", ID]
    err = " ".join(fails(capsys, EXIT_BAD_INPUT, *argv).split())
    assert "snap.json: 33 MiB, over the 32 MiB a snapshot file may be" in err
