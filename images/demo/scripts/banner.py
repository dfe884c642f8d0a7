"""Print the demo image's release banner (the v2 run layer writes it to /etc/demo-release)."""

import platform
from importlib.metadata import version

print(f"layer-audit demo: Python {platform.python_version()}, rich {version('rich')}")
