"""vLLM v1 (for the test image)."""
