"""Plan options of the tracing studies replacing the length of every LLC chain they run (`--llc-burnin`,
`--llc-draws`), so that a confirmation can fix a longer chain chosen on a screen without changing the scale's
settings, which the committed folders' analyses are stamped with."""

from __future__ import annotations

from dataclasses import field, replace
from typing import Any

from headway.settings import check_int
from headway.studies.base import axis

LLC_BURNIN_HELP = ("Burn-in steps of every LLC chain, at the scale's step size ('scale': the scale's SGLD settings as "
                   "given; docs/decisions.md).")
LLC_DRAWS_HELP = ("Draws of every LLC chain after its burn-in, at the scale's step size ('scale': the scale's SGLD "
                  "settings as given; docs/decisions.md).")


def llc_burnin_field() -> Any:
    """The plan field behind `--llc-burnin` (None: the scale's burn-in)."""
    return field(default=None, metadata=axis(LLC_BURNIN_HELP, words={"scale": None}))


def llc_draws_field() -> Any:
    """The plan field behind `--llc-draws` (None: the scale's draws)."""
    return field(default=None, metadata=axis(LLC_DRAWS_HELP, words={"scale": None}))


def traced_line(plan: Any) -> str:
    """What `--dry-run` says about the LLC trace: how many runs, and each chain's burn-in and draws."""
    burnin = "--llc-burnin" if plan.llc_burnin is not None else "the scale's"
    draws = "--llc-draws" if plan.llc_draws is not None else "the scale's"
    return (f"LLC traced over training for {len(plan.development_runs())} of them; each chain {plan.sgld.burnin} "
            f"burn-in steps ({burnin}) and {plan.sgld.draws} draws ({draws})")


def apply_llc_chains(plan: Any) -> None:
    """In a frozen plan's `__post_init__`: check `plan.llc_burnin` and `plan.llc_draws` and put them into
    `plan.sgld` (each left as the scale's when None)."""
    lengths = {name: value for name, value in (("burnin", plan.llc_burnin), ("draws", plan.llc_draws))
               if value is not None}
    for name, value in lengths.items():
        check_int(f"llc_{name}", value, 1)
    if lengths:
        object.__setattr__(plan, "sgld", replace(plan.sgld, **lengths))
