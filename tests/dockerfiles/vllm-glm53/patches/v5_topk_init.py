"""v5_topk_init: a patch applied with python."""

print("patched v5_topk_init")
