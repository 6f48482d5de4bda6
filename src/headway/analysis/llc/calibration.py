"""Calibrating SGLD for the LLC: λ̂ over a grid of step size ε × batch size × localisation γ, and the
setting where λ̂ is stable and the sampler well calibrated.

A setting is *stable* where λ̂ moves by less than `STABLE` (relative) both when ε is halved and when
the batch is doubled (both neighbours must be in the grid), and *accepted* where its mean MALA
acceptance is at least `MIN_ACCEPTANCE`. Each ε runs for the same sampling time as the base settings
(burn-in and draws scaled by base ε / ε), so a smaller step is not judged on a shorter walk. L(w*) is
evaluated once per model and shared by every setting, so its error cancels in the comparisons.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pandas as pd
from torch import Tensor, nn

from headway.analysis.llc import MIN_ACCEPTANCE, LossFn, SGLDSettings, anchor_loss, estimate_llc
from headway.analysis.llc.diagnostics import drift
from headway.analysis.llc.module_ensemble import ModuleLossFn
from headway.progress import tracked

STABLE = 0.1  # largest relative change of λ̂ when ε is halved or the batch doubled
SETTING = ("lr", "batch_size", "localization")
IDENTITY = ("step", "instance")  # the columns naming one model, where present


def calibration_grid(base: SGLDSettings, lrs: Sequence[float], batch_sizes: Sequence[int],
                     localizations: Sequence[float]) -> list[SGLDSettings]:
    """Every ε × batch × γ setting over `base`, each ε with base's sampling time ε·steps."""
    out = []
    for lr in lrs:
        scale = base.lr / lr
        for batch in batch_sizes:
            for gamma in localizations:
                out.append(replace(base, lr=lr, batch_size=batch, localization=gamma,
                                   burnin=round(base.burnin * scale), draws=max(1, round(base.draws * scale))))
    return out


def calibrate_sgld(model: nn.Module, loss_fn: LossFn | ModuleLossFn, tokens: Tensor, targets: Tensor,
                   base: SGLDSettings, lrs: Sequence[float], batch_sizes: Sequence[int],
                   localizations: Sequence[float], mask: Tensor | None = None, progress: bool = False,
                   desc: str = "SGLD calibration") -> pd.DataFrame:
    """λ̂ of every instance of `model` at every setting of `calibration_grid` (inputs as `estimate_llc`),
    judged by `judge_calibration`, with a progress bar (`desc`, one tick a setting) when `progress`. Rows: lr,
    batch_size, localization, burnin, draws, instance, llc_mean, llc_se, acceptance, llc_drift (`diagnostics.drift`:
    whether the chains settled within the draws), n_warnings, warnings, lr_change, batch_change, stable, accepted."""
    anchor = anchor_loss(model, loss_fn, tokens, targets, base)
    rows = []
    grid = calibration_grid(base, lrs, batch_sizes, localizations)
    for settings in tracked(grid, desc, "setting", enabled=progress):
        result = estimate_llc(model, loss_fn, tokens, targets, settings, mask=mask, init_loss=anchor)
        frame = result.to_frame().assign(llc_drift=[drift(chains, init) for chains, init
                                                    in zip(result.loss_trace, result.init_loss)])
        rows.append(frame[["instance", "llc_mean", "llc_se", "acceptance", "llc_drift", "n_warnings", "warnings"]]
                    .assign(**{name: getattr(settings, name) for name in (*SETTING, "burnin", "draws")}))
    table = pd.concat(rows, ignore_index=True)
    front = [*SETTING, "burnin", "draws"]
    return judge_calibration(table[front + [c for c in table.columns if c not in front]])


def judge_calibration(table: pd.DataFrame) -> pd.DataFrame:
    """`table` (one row per setting and model, see `calibrate_sgld`; an optional `step` column names
    the checkpoint) with lr_change = λ̂(ε/2)/λ̂(ε) − 1, batch_change = λ̂(2B)/λ̂(B) − 1 (NaN where that
    neighbour is not in the grid), stable and accepted."""
    table = table.drop(columns=["lr_change", "batch_change", "stable", "accepted"], errors="ignore")
    keys = ["lr_key", "batch_size", "localization", *[c for c in IDENTITY if c in table.columns]]
    own = table.assign(lr_key=_lr_key(table.lr))

    def neighbour(lr_factor: float, batch_factor: int) -> np.ndarray:
        """λ̂ of each row's setting with ε × lr_factor and batch × batch_factor, aligned to the rows."""
        moved = own.assign(lr_key=_lr_key(own.lr / lr_factor), batch_size=own.batch_size // batch_factor)
        moved = moved[own.batch_size % batch_factor == 0][keys + ["llc_mean"]].rename(columns={"llc_mean": "other"})
        return own[keys].merge(moved.drop_duplicates(keys), on=keys, how="left").other.to_numpy(dtype=float)

    here = table.llc_mean.to_numpy(dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        table = table.assign(lr_change=neighbour(0.5, 1) / here - 1, batch_change=neighbour(1.0, 2) / here - 1)
    return table.assign(stable=(table.lr_change.abs() < STABLE) & (table.batch_change.abs() < STABLE),
                        accepted=table.acceptance >= MIN_ACCEPTANCE)


def _lr_key(lrs: pd.Series) -> list[str]:
    """Step sizes as exact-match keys (ε/2 computed and ε/2 typed agree to 12 digits)."""
    return [f"{lr:.12g}" for lr in lrs]


def choose_setting(table: pd.DataFrame, acceptance: bool = True) -> dict | None:
    """The setting (lr, batch_size, localization) that is stable (and, with `acceptance`, accepted) on
    every model of a judged table where λ̂ > 0 (λ̂ ≤ 0: w* is no local minimum there, and nothing is an
    LLC); among those the cheapest: smallest batch, then largest ε (fewer steps to mix), then smallest γ
    (the least pull towards w*). None when no setting qualifies."""
    good = []
    for setting, group in table.groupby(list(SETTING)):
        local = group[group.llc_mean > 0]
        if len(local) and (local.stable & (local.accepted | (not acceptance))).all():
            good.append(setting)
    if not good:
        return None
    lr, batch, gamma = min(good, key=lambda s: (s[1], -s[0], s[2]))
    return {"lr": float(lr), "batch_size": int(batch), "localization": float(gamma)}
