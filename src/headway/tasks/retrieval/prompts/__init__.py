"""Prompted renderings of retrieval instances for language models (F1-F5) and their lm-eval export."""
