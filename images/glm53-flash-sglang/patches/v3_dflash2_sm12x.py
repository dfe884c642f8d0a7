"""v3: let SGLang's DFlash2 draft worker accept a NoPE MLA target on capability 12 (GB10).

The capability check was written for Hopper and Blackwell datacenter parts (9.x, 10.x); the
draft path itself runs unchanged on sm_121 with bf16 KV.
"""

import importlib.metadata
import importlib.util
import sys
from pathlib import Path

OLD = "if major not in (9, 10):"
NEW = "if major not in (9, 10, 12):"

# On a replica base (a dry build) sglang is a metadata-only stand-in: no code to patch.
try:
    installer = importlib.metadata.distribution("sglang").read_text("INSTALLER") or ""
except importlib.metadata.PackageNotFoundError:
    sys.exit("patch: sglang is not installed")
if installer.strip() == "layer-audit-replica":
    print("patch: sglang is a stand-in (dry build): nothing to patch")
    sys.exit(0)
spec = importlib.util.find_spec("sglang")
if spec is None or spec.origin is None:
    sys.exit("patch: sglang is not installed")
path = Path(spec.origin).parent / "srt/speculative/dflash_worker.py"
text = path.read_text(encoding="utf-8")
if NEW in text:
    print(f"patch: {path} already patched")
elif text.count(OLD) == 1:
    path.write_text(text.replace(OLD, NEW), encoding="utf-8")
    print(f"patch: {path} patched")
else:
    sys.exit(f"patch: anchor found {text.count(OLD)} times in {path}: upstream changed, re-check")
