"""Snapshot files for tests: one environment of chosen distributions, written as the in-image script
writes it."""

from __future__ import annotations

from pathlib import Path

from audit.history.snapshot import Distribution, Environment, dump_snapshot

SITE = "/usr/local/lib/python3.11/site-packages"


def write(path: Path, *dists: tuple[str, str]) -> Path:
    env = Environment(
        "/usr/bin/python3", "3.11.2", {}, (SITE,),
        tuple(Distribution(n, v, SITE, "pip", f"sha256:{v}", n) for n, v in dists),
    )  # fmt: skip
    path.write_bytes(dump_snapshot([env]))
    return path
