"""Writes arm64-oci.tar (and arm64-oci.json): a small linux/arm64/v8 OCI layout tarball for the
layer walk's tests on any host, without Docker or emulation.

Run from the repository root: ``python tests/data/walk/make_arm64_layout.py``. The image: a
Debian-like layer with Python 3.11 and nccl-like 2.30.0 in /usr/lib/python3/dist-packages, then
a layer that downgrades it to 2.29.7 (a new .dist-info and a whiteout of the old one), gzip
layers, an image index with the platform. The bytes are reproducible (fixed times, gzip mtime 0).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from tests.support.walk_images import (  # noqa: E402
    Layer,
    Platform,
    config,
    debian_python,
    dist_info,
    dpkg_status,
    oci_layout,
    tar_of,
)

SITE = "/usr/lib/python3/dist-packages"


def main() -> None:
    files = debian_python()
    files["/var/lib/dpkg/status"] = dpkg_status(
        [("python3.11-minimal", "3.11.2-6"), ("libc6", "2.36-9+deb12u4")], arch="arm64"
    )
    base = Layer(links={"/usr/bin/python3": "python3.11"}).add(files)
    base.add(dist_info(SITE, "nccl-like", "2.30.0", installer=""))
    late = Layer(whiteouts=[f"{SITE}/nccl_like-2.30.0.dist-info"])
    late.add(dist_info(SITE, "nccl-like", "2.29.7"))
    layers = (base.tar(), late.tar())
    history = [("ADD rootfs.tar /", False), ("RUN pip install nccl-like==2.29.7", False)]
    image = Platform(layers, config(layers, history, architecture="arm64", variant="v8"),
                     "linux/arm64/v8")  # fmt: skip
    (HERE / "arm64-oci.tar").write_bytes(tar_of(oci_layout([image])))
    (HERE / "arm64-oci.json").write_text(json.dumps({"platform": "linux/arm64/v8"}) + "\n")


if __name__ == "__main__":
    main()
