"""Turn vLLM's PDL (programmatic dependent launch) gate off for sm_12x, as the field did (v6).

A patch edits code, so it needs the code: on a replica base (metadata-only stand-ins, a dry
build) vLLM's INSTALLER says ``layer-audit-replica`` and the patch says so and does nothing.
"""

import importlib.metadata
import pathlib
import sys

dist = importlib.metadata.distribution("vllm")
if (dist.read_text("INSTALLER") or "").strip() == "layer-audit-replica":
    print("pdl_gate_off: vllm is a replica stand-in (dry build): nothing to patch")
    sys.exit(0)
target = pathlib.Path(str(dist.locate_file("vllm/envs.py")))
text = target.read_text()
old = '"VLLM_USE_PDL": lambda: bool(int(os.getenv("VLLM_USE_PDL", "1"))),'
new = '"VLLM_USE_PDL": lambda: bool(int(os.getenv("VLLM_USE_PDL", "0"))),'
if new in text:
    print("pdl_gate_off: already applied")
elif old in text:
    target.write_text(text.replace(old, new))
    print("pdl_gate_off: applied")
else:
    sys.exit("pdl_gate_off: the VLLM_USE_PDL line is not where it was; update the patch")
