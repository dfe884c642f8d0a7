"""v6_pdl_gate_off: a patch applied with python."""

print("patched v6_pdl_gate_off")
