"""v5: initialise the kpool indexer's top-k buffer to -1 and clamp before the gather.

The buffer came from torch.empty and the kernels fill only min(k, valid) entries: the rest
were stale pool ids, so attention gathered unwritten KV and produced intermittent NaN.
"""

from patchlib import package_file, replace_once

replace_once(
    package_file("vllm", "model_executor/layers/sparse_attn_indexer.py"),
    "topk_indices = torch.empty((num_tokens, topk), dtype=torch.int32, device=device)",
    "topk_indices = torch.full((num_tokens, topk), -1, dtype=torch.int32, device=device)",
)
