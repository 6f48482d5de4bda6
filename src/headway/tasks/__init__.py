"""Tasks: the `Task` interface and registry, generic pools and export, and one folder per task
(its config, generator and reference views of its examples; what models trained on it do is
`headway.analysis.<task>`, docs/architecture.md)."""
