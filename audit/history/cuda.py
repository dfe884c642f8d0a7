"""Which CUDA an image is built for, read from the image itself (no recipe says so).

Best first: the ``CUDA_VERSION`` NVIDIA's CUDA bases set in the image configuration
(``13.0.1`` -> ``cu130``); else the CUDA builds its Python packages carry: the most common
``+cuNNN`` local label (``torch 2.9.0+cu130``), else the ``-cuNN`` suffix of NVIDIA's wheels
(``nvidia-nccl-cu13`` -> ``cu130``). None when nothing says CUDA: a CPU image.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence

from audit.history.snapshot import Environment

_VERSION = re.compile(r"^(\d{2})\.(\d)")
_LOCAL = re.compile(r"\+(?:[a-z0-9]+\.)*cu(\d{3})(?:\.|$)")
_SUFFIX = re.compile(r"^nvidia-.+-cu(\d{2})$")


def cuda_tag(config_env: Mapping[str, str], environments: Sequence[Environment]) -> str | None:
    """``cu130`` for an image whose configuration or packages say CUDA 13.0; None otherwise."""
    match = _VERSION.match(config_env.get("CUDA_VERSION", ""))
    if match:
        return f"cu{match.group(1)}{match.group(2)}"
    dists = [d for env in environments for d in env.winners().values()]
    labels = Counter(m.group(1) for d in dists if (m := _LOCAL.search(d.version)))
    if labels:
        return "cu" + labels.most_common(1)[0][0]
    suffixes = Counter(m.group(1) for d in dists if (m := _SUFFIX.match(d.name)))
    if suffixes:
        return f"cu{suffixes.most_common(1)[0][0]}0"
    return None
