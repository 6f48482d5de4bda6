"""Tasks: the `Task` interface and registry, generic pools and export, and one folder per task
(its config, generator and the analyses that only make sense for it)."""
