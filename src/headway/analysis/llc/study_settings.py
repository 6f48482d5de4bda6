"""The SGLD settings of a study's LLC estimates: chosen once per ensemble by `auto.choose_settings` on the runs it
traces, at their last checkpoint and within the plan's step budget, and saved with why, so that every LLC the study
estimates of that ensemble (over training and at the end) is taken at the same settings and comparable, and a rerun
reuses the choice. Each estimate still carries its own resolution check, which says where the chosen settings cannot
see another checkpoint's basin."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from headway.analysis.llc.resolution import RESOLUTION_ROWS
from headway.analysis.llc.settings import SGLDSettings
from headway.analysis.llc.validity import REFUSED, ValidityLimits, refusal
from headway.errors import TimeLimitReached
from headway.runs import layout
from headway.runs.checkpoints import checkpoint_steps, load_checkpoint
from headway.runs.config import RunConfig
from headway.runs.store import load_model
from headway.tasks.objective import run_loss

CHOICE = "settings_choice.json"  # the choice, its reason, its tries and what it was made from


@dataclass(frozen=True)
class StudySettings:
    """The settings a study's estimates use, why, and whether the choice was refused."""

    settings: SGLDSettings  # the choice; the plan's own when it asked for none or none qualified
    reason: str  # the choice's reason (`AutoChoice.reason`), or that the plan's settings are used as given
    refused: str = ""  # "no SGLD setting qualified: …" when refused: every estimate at `settings` is then invalid

    def to_dict(self) -> dict:
        """The settings, reason and refusal as a results file records them."""
        return {"settings": self.settings.stored_dict(), "reason": self.reason, "refused": self.refused}


def study_settings(run_dir: Path, folder: Path, runs: list[RunConfig], instances: list[int], base: SGLDSettings,
                   budget: int | None, device: torch.device | str, validity: ValidityLimits, precision: str = "fp32",
                   stamp: dict | None = None, deadline: float | None = None, progress: bool = False,
                   compile_mode: str | None = None) -> StudySettings:
    """The settings for the LLC estimates of the ensemble at `run_dir`: `base` as given when `budget` is None, else
    chosen from `base` (its nβ, chains, batch and seed) by `choose_settings` on `instances` (which share a training
    pool) at the last saved checkpoint, with at most `budget` SGLD steps a chain, judged by `validity`, the Hessian on
    `RESOLUTION_ROWS` pool rows. The choice is saved in `folder` and reused while what it was made from (`stamp`
    included) is unchanged. Past `deadline` (a `time.time()` value) no new choice starts: TimeLimitReached. `progress`
    shows a bar for each setting tried; `compile_mode` compiles their sampler (`estimate_llc`)."""
    if budget is None:
        return StudySettings(base, "the plan's SGLD settings, as given (no step budget to choose within)")
    from headway.analysis.llc.auto import choose_settings
    from headway.analysis.llc.trace import training_pool, uniform_guess_loss

    step = checkpoint_steps(run_dir)[-1]
    made_from = {"base": base.stored_dict(), "budget": budget, "runs": [runs[i].run_id for i in instances], "step": step,
                 "validity": validity.to_dict(), "rows": RESOLUTION_ROWS, "precision": precision, **(stamp or {})}
    path = folder / CHOICE
    if path.is_file():
        saved = layout.read_json(path)
        if saved.get("made_from") == made_from:
            return StudySettings(SGLDSettings.from_dict(saved["settings"]), saved["reason"], saved["refused"])
    TimeLimitReached.check(deadline, f"before choosing the LLC settings of {run_dir.name}")
    first = runs[instances[0]]
    model = load_model(run_dir, instances, device=device)
    model.load_instances(load_checkpoint(run_dir, step, runs, model), instances)
    tokens, targets = training_pool(first, len(instances), device)
    choice = choose_settings(model, run_loss(first.task, first.train.loss), tokens, targets, base=base,
                             validity=validity, max_steps=budget, chance_loss=uniform_guess_loss(first, targets),
                             precision=precision, rows=RESOLUTION_ROWS, progress=progress, compile_mode=compile_mode)
    refused = "" if choice.settings is not None else refusal(choice.reason)
    chosen = StudySettings(choice.settings or base, choice.reason, refused)
    folder.mkdir(parents=True, exist_ok=True)
    layout.write_json(path, {"made_from": made_from, **chosen.to_dict(), "tries": choice.to_dict()["tries"]})
    return chosen


def recorded_settings(table: pd.DataFrame, planned: SGLDSettings) -> StudySettings:
    """The settings an LLC table's estimates were taken at, as its `settings` and `choice` columns record them (the
    first row's; when ensembles chose differently the reason says how many settings there are); a table written
    before they were recorded, or an empty one, was taken at the plan's `planned` settings."""
    if table.empty or "settings" not in table or table.settings.isna().all():
        return StudySettings(planned, "the plan's SGLD settings, as given")
    distinct = table.settings.dropna().unique()
    used = SGLDSettings.from_dict(json.loads(distinct[0]))
    choice = str(table.choice.dropna().iloc[0]) if "choice" in table and table.choice.notna().any() else ""
    more = f" (the first of {len(distinct)} settings, one chosen per ensemble)" if len(distinct) > 1 else ""
    refused = table.invalid.str.startswith(REFUSED).all() if "invalid" in table else False
    return StudySettings(used, choice + more, choice if refused else "")


def sgld_record(table: pd.DataFrame, planned: SGLDSettings) -> dict:
    """A study summary's record of its LLC settings (`recorded_settings` of its table): sgld, sgld_choice (why) and
    sgld_refused ("" unless no setting qualified)."""
    chosen = recorded_settings(table, planned)
    return {"sgld": chosen.settings.stored_dict(), "sgld_choice": chosen.reason, "sgld_refused": chosen.refused}
