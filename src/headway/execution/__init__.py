"""Where ensembles run: in this process one after another (`local`), or as tasks on a Ray cluster
(`ray`, the `headway[cluster]` extra). Training and study analysis hand their per-ensemble work to an
executor as a list of jobs; every job writes its results into the run store, so a job that is run
again (a retry, a resumed sweep) reuses or resumes what is there."""

from headway.execution.base import EXECUTORS, Executor, Job, LocalExecutor, make_executor

__all__ = ["EXECUTORS", "Executor", "Job", "LocalExecutor", "make_executor"]
