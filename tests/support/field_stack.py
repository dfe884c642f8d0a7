"""The field's vendor stack for real-bases tests: the off-index base (source-built vLLM, CUDA
torch), the nightly and its index of stand-in wheels, the policy and the override that re-pins NCCL
and cutlass-dsl."""

from __future__ import annotations

from tests.support.fixtures import Wheelhouse

NIGHTLY = "0.6.18.dev20261120"
VLLM = "0.11.1.dev5+gabc1234.cu130"
TORCH = "2.9.0+cu130"
POLICY = """
[policy]
require = ["nvidia-nccl-cu13>=2.30"]
[policy.lockstep]
cutlass-dsl = ["nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-*"]
"""


# What the vendor base image holds (name, version, Requires-Dist).
BASE: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("vllm", VLLM, (f"torch=={TORCH}", "nvidia-nccl-cu13>=2.27", "flashinfer-python>=0.6")),
    ("torch", TORCH, ("nvidia-nccl-cu13>=2.27",)),
    ("nvidia-nccl-cu13", "2.30.7", ()),
    ("nvidia-cutlass-dsl", "4.3.1", ("nvidia-cutlass-dsl-libs-base==4.3.1",)),
    ("nvidia-cutlass-dsl-libs-base", "4.3.1", ()),
    ("flashinfer-python", "0.6.13", ("nvidia-nccl-cu13>=2.27",)),
)


def field_index(wheelhouse: Wheelhouse) -> None:
    """What the indexes serve: never vllm or a +cu130 torch (those exist only in the image)."""
    wheelhouse("torch", "2.9.0")  # the plain PyPI build: must never replace the +cu130 one
    wheelhouse("torch", "2.9.1")
    wheelhouse("torch", "2.9.0+cpu")
    wheelhouse("nvidia-nccl-cu13", "2.29.7")
    wheelhouse("nvidia-nccl-cu13", "2.30.7")
    wheelhouse("nvidia-cutlass-dsl", "4.3.1", requires=["nvidia-cutlass-dsl-libs-base==4.3.1"])
    wheelhouse("nvidia-cutlass-dsl", "4.4.0", requires=["nvidia-cutlass-dsl-libs-base>=4.3"])
    wheelhouse("nvidia-cutlass-dsl-libs-base", "4.3.1")
    wheelhouse("nvidia-cutlass-dsl-libs-base", "4.4.0")
    wheelhouse("flashinfer-python", "0.6.13", requires=["nvidia-nccl-cu13>=2.27"])
    wheelhouse(
        "flashinfer-python",
        NIGHTLY,
        requires=["nvidia-nccl-cu13==2.29.7", "nvidia-cutlass-dsl>=4.4"],
    )
    wheelhouse("vllm-router", "1.0", requires=["vllm>=0.11.1.dev0", f"torch=={TORCH}"])
    wheelhouse("sglang-kernel", "0.3.0", requires=[f"flashinfer-python>={NIGHTLY}"])


REQUIREMENTS = {
    "v1.in": "vllm-router\n",
    "v2.in": f"flashinfer-python=={NIGHTLY}\n",
    "v3.in": "sglang-kernel\n",
}


OVERRIDE = '  pre = true\n  override = ["nvidia-nccl-cu13==2.30.7", "nvidia-cutlass-dsl==4.3.1"]'
