"""Prompted evaluation of language models on the retrieval formulations (in-process and over HTTP)."""
