"""v1_nope_sparse_mla_sm12x: a patch applied with python."""

print("patched v1_nope_sparse_mla_sm12x")
