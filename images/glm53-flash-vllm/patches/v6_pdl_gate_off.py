"""v6: keep programmatic dependent launch (PDL) off in the KDA recurrent-state kernels on sm_12x.

vLLM enables PDL for every capability >= 9; it was never validated on sm_121.
"""

from patchlib import package_file, replace_once

replace_once(
    package_file("vllm", "model_executor/layers/fla/ops/kda.py"),
    "use_pdl = current_platform.has_device_capability(90)",
    "use_pdl = current_platform.has_device_capability(90) and "
    "current_platform.get_device_capability().major != 12",
)
