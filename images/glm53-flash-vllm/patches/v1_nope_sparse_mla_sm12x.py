"""v1: run vLLM's SM90 NoPE sparse-MLA backend on capability 12 (GB10, sm_121), FA2 path.

GLM-5.3 is NoPE MLA (qk_rope_head_dim = 0). The only stock sm_12x sparse-attention backend
requires DeepSeek's fp8_ds_mla packed layout and asserts pe_dim == 64 in concat_and_cache_mla.
The SM90 backend handles NoPE; its kernel was probed on-GPU with the model's real geometry
before this gate was widened.
"""

from patchlib import package_file, replace_once

replace_once(
    package_file("vllm", "v1/attention/backends/mla/flashmla_sparse.py"),
    "return capability.major == 9 and self.qk_rope_head_dim == 0",
    "return capability.major in (9, 12) and self.qk_rope_head_dim == 0",
)
