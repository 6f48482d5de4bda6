"""A plan option of the tracing studies replacing the burn-in of every LLC chain they run (`--llc-burnin`), so that
a confirmation can fix a longer burn-in chosen on a screen without changing the scale's settings, which the
committed folders' analyses are stamped with."""

from __future__ import annotations

from dataclasses import field, replace
from typing import Any

from headway.settings import check_int
from headway.studies.base import axis

LLC_BURNIN_HELP = ("Burn-in steps of every LLC chain, at the scale's step size ('scale': the scale's SGLD settings as "
                   "given; docs/decisions.md).")


def llc_burnin_field() -> Any:
    """The plan field behind `--llc-burnin` (None: the scale's burn-in)."""
    return field(default=None, metadata=axis(LLC_BURNIN_HELP, words={"scale": None}))


def traced_line(plan: Any) -> str:
    """What `--dry-run` says about the LLC trace: how many runs, and each chain's burn-in and draws."""
    where = "--llc-burnin" if plan.llc_burnin is not None else "the scale's"
    return (f"LLC traced over training for {len(plan.development_runs())} of them; each chain {plan.sgld.burnin} "
            f"burn-in steps ({where}) and {plan.sgld.draws} draws")


def apply_llc_burnin(plan: Any) -> None:
    """In a frozen plan's `__post_init__`: check `plan.llc_burnin` and put it into `plan.sgld` (nothing when None)."""
    if plan.llc_burnin is not None:
        check_int("llc_burnin", plan.llc_burnin, 1)
        object.__setattr__(plan, "sgld", replace(plan.sgld, burnin=plan.llc_burnin))
