"""patchlib: a patch applied with python."""

print("patched patchlib")
