"""Stand-in wheels: metadata only, byte-identical for the same input, readable by pip."""

from __future__ import annotations

import hashlib
import io
import zipfile

from audit.lock.plan import Constraint
from audit.lock.standins import (
    metadata_text,
    provided_extras,
    standin_digests,
    standin_wheel,
    standin_wheels,
)

VLLM = Constraint(
    "vllm",
    "0.11.1.dev5+gabc1234.cu130",
    "the base image",
    ("torch==2.9.0+cu130", 'flashinfer-python; extra == "FlashInfer"', "not a requirement !!"),
    ">=3.10",
    "vllm",
)


def test_a_stand_in_carries_name_version_requirements_and_the_extras_they_use() -> None:
    text = metadata_text(VLLM, "0.11.1.dev5+gabc1234.cu130")
    assert "Name: vllm\nVersion: 0.11.1.dev5+gabc1234.cu130\n" in text
    assert "Requires-Python: >=3.10\n" in text
    assert "Requires-Dist: torch==2.9.0+cu130\n" in text
    assert "Provides-Extra: flashinfer\n" in text  # pip ignores an undeclared extra
    assert "not a requirement" not in text  # one bad line must not spoil the whole stand-in


def test_stand_in_wheels_are_deterministic_and_hold_only_metadata() -> None:
    name, data = standin_wheel(VLLM)
    assert name == "vllm-0.11.1.dev5+gabc1234.cu130-py3-none-any.whl"
    assert standin_wheel(VLLM) == (name, data)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        names = archive.namelist()
        assert all(info.date_time == (1980, 1, 1, 0, 0, 0) for info in archive.infolist())
    info = "vllm-0.11.1.dev5+gabc1234.cu130.dist-info"
    assert names == [f"{info}/METADATA", f"{info}/RECORD", f"{info}/WHEEL"]
    assert list(standin_wheels({"vllm": VLLM})) == [name]


def test_extras_are_normalised() -> None:
    assert provided_extras(["a; extra == 'Fast_Path'", 'b; extra=="gpu" or extra == "x"']) == [
        "fast-path",
        "gpu",
        "x",
    ]


def test_a_stand_in_digest_is_the_sha256_of_the_wheel_the_resolver_is_offered() -> None:
    digests = standin_digests({"vllm": VLLM})
    data = next(iter(standin_wheels({"vllm": VLLM}).values()))
    assert digests == {"vllm": "sha256:" + hashlib.sha256(data).hexdigest()}
