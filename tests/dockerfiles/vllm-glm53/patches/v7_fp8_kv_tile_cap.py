"""v7_fp8_kv_tile_cap: a patch applied with python."""

print("patched v7_fp8_kv_tile_cap")
