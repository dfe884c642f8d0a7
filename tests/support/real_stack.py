"""Where the real-stack example lives: its image name and the committed torch 2.13.0 fixture."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "vllm-arm64-cu13"
FIXTURE = ROOT / "tests" / "data" / "real_stack" / "torch-2.13.0"
