print("patched: NoPE sparse-MLA on sm_12x")
