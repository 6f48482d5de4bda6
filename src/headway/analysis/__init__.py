"""Analyses of trained models. For any task: ablation, inputs, emergence, development and stages, statistics;
per task: `retrieval`, `sorting`, `modular`; the local learning coefficient: `llc`."""
