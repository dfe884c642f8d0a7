"""vLLM."""
