"""What ``import`` knows of a base image from its reference alone: the CUDA it is built for
and whether it holds a Python.

Invariants: an answer is given only from the reference's own words or from a fact looked up
and cited here, never guessed; an NGC release this table does not hold answers ``None`` (the
import then says so and asks for ``--cuda``), and a base this module does not know is taken to
hold a Python, as before (``import --base-without-python`` says otherwise).

NGC releases (``nvcr.io/nvidia/pytorch:YY.MM-py3``, ``nvcr.io/nvidia/vllm:YY.MM-py3``: one
monthly train, one CUDA per release). Sources: NVIDIA's PyTorch release notes for 25.12
("Release 25.12 is based on CUDA 13.1.0", docs.nvidia.com/deeplearning/frameworks/
pytorch-release-notes/rel-25-12.html); for the others, Dockerfiles and notes that build on them
and state their CUDA (25.04: 12.9; 25.08, 25.09, 25.10: 13.0; 25.11: 13.0.2; 26.01: 13.1;
26.05: 13.2). A release missing here is missing on purpose: look it up, then add it.
"""

from __future__ import annotations

import re

NGC_CUDA = {
    "25.04": "cu129",
    "25.08": "cu130",
    "25.09": "cu130",
    "25.10": "cu130",
    "25.11": "cu130",
    "25.12": "cu131",
    "26.01": "cu131",
    "26.05": "cu132",
}
NGC_TRAINS = ("nvcr.io/nvidia/pytorch", "nvcr.io/nvidia/vllm")
NGC_TAG = re.compile(r"(\d{2}\.\d{2})(?:-py3)?(?:-|$)")
CUDA_REPOSITORY = re.compile(r"(?:^|/)nvidia/cuda$")
CUDA_VERSION_TAG = re.compile(r"^(\d{2})\.(\d)(?:\.\d+)?(?:-|$)")  # nvidia/cuda:13.0.1-devel-…
CUDA_WORD = re.compile(r"(?:^|[-_.])cuda(\d{2})\.(\d)(?:[-_.]|$)")  # pytorch/pytorch:2.9-cuda13.0-…
CUDA_SUFFIX = re.compile(r"(?:^|[-_.:])(cu\d{2,4})(?:$|[-_.])")  # …-cu130, v0.5.9-cu130-arm64
# repositories whose images hold no Python: the OS bases and NVIDIA's CUDA images
NO_PYTHON = re.compile(
    r"(?:^|/)(?:nvidia/cuda|ubuntu|debian|alpine|rockylinux|almalinux|centos|fedora|"
    r"amazonlinux|busybox|scratch|redhat/ubi\d+(?:-minimal)?)$"
)
SYSTEM_PYTHON = "/usr/bin/python3"
OFFICIAL_PYTHON = re.compile(r"(?:^|/)(?:library/)?python$")  # python:3.12: /usr/local


def split_reference(reference: str) -> tuple[str, str]:
    """``(repository, tag)`` of ``repo[:tag][@digest]`` (tag '' when none)."""
    name = reference.partition("@")[0]
    last = name.rpartition("/")[2]
    if ":" in last:
        repository, _, tag = name.rpartition(":")
        return repository, tag
    return name, ""


def cuda_of(reference: str) -> tuple[str | None, bool]:
    """``(cuNNN or None, known)``: the CUDA the reference names; ``known`` False only for an
    NGC release the table lacks (the one case where a CUDA image would pass for ``cpu``)."""
    repository, tag = split_reference(reference)
    if repository in NGC_TRAINS:
        release = NGC_TAG.match(tag)
        found = NGC_CUDA.get(release.group(1)) if release else None
        return found, found is not None
    if CUDA_REPOSITORY.search(repository):
        version = CUDA_VERSION_TAG.match(tag)
        return (f"cu{version.group(1)}{version.group(2)}" if version else None), True
    word = CUDA_WORD.search(tag)
    if word:
        return f"cu{word.group(1)}{word.group(2)}", True
    suffix = CUDA_SUFFIX.search(tag)
    return (suffix.group(1) if suffix else None), True


def has_python(reference: str) -> bool:
    """False for the bases known to hold no Python; True otherwise (the old assumption)."""
    repository, _ = split_reference(reference)
    return not NO_PYTHON.search(repository)


def interpreter_of(reference: str) -> str:
    """Where a base's Python usually is: /usr/local/bin/python3 in the official python
    images, else the system one."""
    repository, _ = split_reference(reference)
    return "/usr/local/bin/python3" if OFFICIAL_PYTHON.search(repository) else SYSTEM_PYTHON
