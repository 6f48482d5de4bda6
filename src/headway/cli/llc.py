"""`headway llc …`: the local learning coefficient of trained runs. `llc calibrate` sweeps the SGLD sampler's
step size ε, batch and localisation γ on a run's own checkpoints, pool and loss and picks the setting where λ̂ is
stable (`headway.analysis.llc.calibration`; docs/cli.md#headway-llc-calibrate)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from headway.analysis.llc.settings import PRECONDITIONERS
from headway.cli.options import OutputPath, option_flag, parse_value, parse_values
from headway.errors import ConfigError
from headway.limits import MAX_BATCH, MAX_LIST, MAX_STEPS

if TYPE_CHECKING:  # torch and pandas load when the command runs, not for its help
    import pandas as pd
    import torch

    from headway.analysis.llc import SGLDSettings

MAX_CHAINS = 4096  # SGLD chains per instance: each is a copy of the model's weights, sampled in one batch
SHOWN = ["ensemble", "step", "run_id", "lr", "batch_size", "localization", "llc_mean", "llc_se", "acceptance",
         "llc_drift", "lr_change", "batch_change", "stable", "accepted"]
# The base settings a single value each may replace, and the type of each.
BASE_TYPES = {"nbeta": float, "chains": int, "draws": int, "burnin": int, "seed": int, "preconditioner": str}


@click.group()
def llc() -> None:
    """Calibrate the SGLD sampler of the local learning coefficient on trained runs."""


@llc.command()
@click.argument("run_paths", metavar="RUN...", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--instances", default="all", show_default=True, metavar="I[,I…]",
              help="Instances of each ensemble: all, or a comma list or A..B.")
@click.option("--steps", default="last", show_default=True, metavar="S[,S…]",
              help="Checkpoints: first, middle, last or saved step numbers (comma list).")
@click.option("--lr", default=None, metavar="ε[,ε…]",
              help="Step sizes ε to sweep [default: 2ε, ε and ε/2 of the base settings].")
@click.option("--batch-size", default=None, metavar="B[,B…]",
              help="Batch sizes to sweep [default: B/2, B and 2B of the base settings].")
@click.option("--localization", default=None, metavar="γ[,γ…]",
              help="Localisations γ to sweep [default: the base settings' γ].")
@click.option("--study", default=None, help="Base settings: this study plan's SGLD settings (sorting, modular) "
                                            "[default: headway.analysis.llc.SGLDSettings()].")
@click.option("--scale", default=None, help="The --study plan's scale [default: the study's first].")
@click.option("--nbeta", default=None, metavar="V", help="Replace the base n·β (inverse temperature).")
@click.option("--chains", default=None, metavar="N", help="Replace the base chains per instance.")
@click.option("--draws", default=None, metavar="N",
              help="Replace the base draws (at the reference ε; each ε samples as long as it does).")
@click.option("--burnin", default=None, metavar="N", help="Replace the base burn-in steps (at the reference ε).")
@click.option("--seed", default=None, metavar="N", help="Replace the sampler's seed.")
@click.option("--preconditioner", default=None, type=click.Choice(PRECONDITIONERS),
              help="Replace the base sampler: none (plain SGLD) or diagonal (a fixed metric 1/(nβ·Hᵢᵢ + γ) measured "
                   "at w*; ε is then the step in units of each coordinate's stiffness).")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda, cuda:1, …")
@click.option("--progress/--no-progress", default=True, help="Progress bar on a terminal.")
@click.option("--out", type=OutputPath(folder=False), default=None, help="Also write the whole table as CSV.")
def calibrate(run_paths: tuple[Path, ...], instances: str, steps: str, lr: str | None, batch_size: str | None,
              localization: str | None, study: str | None, scale: str | None, device: str, progress: bool,
              out: Path | None, **base_values: str | None) -> None:
    """Sweep SGLD's ε × batch × γ on trained runs' checkpoints and print λ̂ ± SE, the acceptance, and the
    cheapest setting where λ̂ moves < 10% when ε is halved and when the batch is doubled.

    RUN is an ensemble folder or any folder above some (a `headway train --out` or a study's `runs/`). Each
    instance is sampled on its own training pool with its own loss. Each ε samples for the reference ε's time
    (burn-in and draws scaled by reference ε / ε): the reference is the --study plan's ε, else (or when
    --preconditioner changes the plan's sampler, and with it ε's units) the largest --lr.

    Example: headway llc calibrate runs/sort --instances 0,1 --lr 3e-6,1.5e-6,7.5e-7 --batch-size 32,64,128
    """
    from headway.execution.devices import resolve_device
    from headway.runs import layout

    base = base_settings(study, scale, base_values)
    lrs = number_list("lr", lr, float) if lr is not None else [2 * base.lr, base.lr, base.lr / 2]
    plan_step = study is not None and base.preconditioner == study_sgld(study, scale).preconditioner
    if lr is not None and not plan_step:  # the plan's ε is no reference in another sampler's units
        base = replace(base, lr=max(lrs))
    batches = (number_list("batch_size", batch_size, int) if batch_size is not None
               else [b for b in (base.batch_size // 2, base.batch_size, 2 * base.batch_size) if b >= 1])
    gammas = number_list("localization", localization, float) if localization is not None else [base.localization]
    base = replace(base, batch_size=min(batches))  # each setting has its own batch; base's sizes only L(w*)'s batches
    check_grid(base, lrs, batches, gammas)
    chosen_instances = None if instances.strip() == "all" else number_list("instances", instances, int)
    wanted = parse_steps(steps)
    target = resolve_device(device)
    plans = ensemble_plans(run_paths, chosen_instances, wanted, max(batches))
    table = calibrate_all(plans, base, lrs, batches, gammas, target, progress)
    if out is not None:
        layout.write_text(out, table.to_csv(index=False))
    click.echo(format_table(table))
    click.echo(chosen_line(table))


def number_list(name: str, text: str, kind: type) -> list:
    """A comma list (or, of integers, A..B) of numbers for option `name`; 'none' is no number here."""
    values = parse_values(name, text, kind)
    if any(value is None for value in values):
        raise ConfigError(f"{option_flag(name)} got 'none'; give {'whole numbers' if kind is int else 'numbers'}, "
                          "a comma list")
    return values


def base_settings(study: str | None, scale: str | None, values: dict[str, str | None]) -> SGLDSettings:
    """The settings the grid varies: the --study plan's at --scale, or the defaults, with the single values
    given replacing theirs; refused when a value is not allowed or a study has no SGLD settings."""
    from headway.analysis.llc import SGLDSettings

    if scale is not None and study is None:
        raise ConfigError(f"--scale {scale} needs --study; give the study whose SGLD settings to start from")
    base = SGLDSettings() if study is None else study_sgld(study, scale)
    given = {name: parse_value(name, text, BASE_TYPES[name]) for name, text in values.items() if text is not None}
    if given.get("chains") is not None and given["chains"] > MAX_CHAINS:
        raise ConfigError(f"--chains {given['chains']} is too many; use at most {MAX_CHAINS}")
    return replace(base, **given)


def study_sgld(study: str, scale: str | None) -> SGLDSettings:
    """The SGLD settings of the registered study `study`'s plan at `scale` (default: its first scale)."""
    from headway.analysis.llc import SGLDSettings
    from headway.studies.registry import study_class, study_names

    cls = study_class(study)
    sgld = getattr(cls.plan_for(scale or cls.scales[0]), "sgld", None)
    if not isinstance(sgld, SGLDSettings):
        having = [name for name in study_names()
                  if isinstance(getattr(study_class(name).plan_for(study_class(name).scales[0]), "sgld", None),
                                SGLDSettings)]
        raise ConfigError(f"--study {study} has no SGLD settings; use one of {', '.join(having)}, or none")
    return sgld


def check_grid(base: SGLDSettings, lrs: list[float], batches: list[int], gammas: list[float]) -> None:
    """Refuse, before any run is loaded, a grid with a setting SGLD cannot take or one too long to sample."""
    from headway.analysis.llc.calibration import calibration_grid

    size = len(lrs) * len(batches) * len(gammas)
    if size > MAX_LIST:
        raise ConfigError(f"--lr × --batch-size × --localization is {size} settings; a grid holds at most {MAX_LIST}")
    big = next((b for b in batches if b > MAX_BATCH), None)
    if big is not None:
        raise ConfigError(f"--batch-size {big} is too large; use at most {MAX_BATCH}")
    for settings in calibration_grid(base, lrs, batches, gammas):  # each is checked as it is built
        if settings.steps > MAX_STEPS:
            raise ConfigError(f"--lr {settings.lr:g} samples {settings.steps} steps a chain to match the reference "
                              f"ε {base.lr:g}'s time; at most {MAX_STEPS}: give step sizes nearer it or fewer --draws")


def parse_steps(text: str) -> list[str | int]:
    """The checkpoints --steps names: first, middle, last or step numbers ≥ 0."""
    from headway.analysis.llc.run_calibration import STEP_NAMES

    out: list[str | int] = []
    for part in parse_values("steps", text, str):
        word = part.strip()
        if word in STEP_NAMES:
            out.append(word)
            continue
        try:
            number = parse_value("steps", word, int)
        except ConfigError:
            number = None
        if number is None or number < 0:
            raise ConfigError(f"--steps got {word!r}; use first, middle, last or a saved step number")
        out.append(number)
    return out


def ensemble_plans(run_paths: tuple[Path, ...], instances: list[int] | None, wanted: list[str | int],
                   batch_size: int) -> list[tuple[Path, list[int], list[int]]]:
    """(ensemble folder, instances, saved steps) for every ensemble at or below `run_paths`, each once, all
    checked (instances, steps, a pool for the largest `batch_size`) before any is sampled."""
    from headway.analysis.llc.run_calibration import check_instances, check_pools, pick_steps
    from headway.runs import layout
    from headway.runs.store import load_runs

    plans, seen = [], set()
    for path in run_paths:
        found = layout.ensemble_dirs(path)
        if not found:
            raise ConfigError(f"{path} holds no runs (no {layout.CONFIG} in it or below it)")
        for run_dir in found:
            if run_dir.resolve() in seen:
                continue
            seen.add(run_dir.resolve())
            runs = load_runs(run_dir)
            chosen = check_instances(run_dir, runs, instances)
            steps = pick_steps(run_dir, wanted)
            check_pools(run_dir, runs, chosen, batch_size)
            plans.append((run_dir, chosen, steps))
    return plans


def calibrate_all(plans: list[tuple[Path, list[int], list[int]]], base: SGLDSettings, lrs: list[float],
                  batches: list[int], gammas: list[float], device: torch.device, progress: bool) -> pd.DataFrame:
    """The calibration table of every planned ensemble, one after another."""
    import pandas as pd

    from headway.analysis.llc.run_calibration import calibrate_ensemble

    return pd.concat([calibrate_ensemble(run_dir, chosen, steps, base, lrs, batches, gammas, device, progress)
                      for run_dir, chosen, steps in plans], ignore_index=True)


def format_table(table: pd.DataFrame) -> str:
    """The table's main columns as text, one row per ensemble, step, instance and setting."""
    import pandas as pd

    with pd.option_context("display.width", 250, "display.max_columns", 50):
        return table[SHOWN].to_string(index=False, float_format=lambda v: f"{v:.3g}")


def chosen_line(table: pd.DataFrame) -> str:
    """The cheapest setting stable and accepted on every instance and checkpoint with λ̂ > 0, or why there is
    none (and then the cheapest merely stable one, if any): no λ̂ > 0, no stable setting, none also accepted."""
    from headway.analysis.llc import MIN_ACCEPTANCE
    from headway.analysis.llc.calibration import choose_setting

    if not (table.llc_mean > 0).any():
        return ("no setting to choose: λ̂ ≤ 0 everywhere, so w* is no local minimum of the loss at these checkpoints "
                "(train longer, or name later --steps)")
    chosen = choose_setting(table)
    if chosen is not None:
        return f"chosen (stable and accepted everywhere λ̂ > 0): {describe(chosen)}"
    stable = choose_setting(table, acceptance=False)
    if stable is None:
        return ("no setting is stable (λ̂ moves ≥ 10% when ε is halved or the batch doubled, or that neighbour is "
                "not in the grid); try smaller step sizes or larger batches")
    return f"no stable setting has acceptance ≥ {MIN_ACCEPTANCE:g} everywhere; stable only: {describe(stable)}"


def describe(setting: dict) -> str:
    """A chosen setting as the options that give it."""
    return f"--lr {setting['lr']:g} --batch-size {setting['batch_size']} --localization {setting['localization']:g}"
