"""Which CUDA an image is built for, read from its configuration or its packages."""

from __future__ import annotations

from audit.history.cuda import cuda_tag
from audit.history.snapshot import Distribution, Environment


def env(*pins: tuple[str, str]) -> Environment:
    dists = tuple(Distribution(name, version) for name, version in pins)
    return Environment("/usr/bin/python3", "3.12.3", {}, ("/site",), dists)


def test_nvidia_bases_say_it_in_their_configuration() -> None:
    assert cuda_tag({"CUDA_VERSION": "13.0.1"}, []) == "cu130"
    assert cuda_tag({"CUDA_VERSION": "12.8.1"}, [env(("torch", "2.9.0+cu130"))]) == "cu128"


def test_packages_say_it_otherwise() -> None:
    assert cuda_tag({}, [env(("torch", "2.9.0+cu130"), ("vllm", "0.11.1+cu130"))]) == "cu130"
    assert cuda_tag({}, [env(("nvidia-nccl-cu13", "2.30.7"))]) == "cu130"
    assert cuda_tag({}, [env(("torch", "2.9.0+cpu"), ("numpy", "2.1.0"))]) is None
