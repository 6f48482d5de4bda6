"""Analyse the instances of one trained sorting ensemble that share their data: circuits and modes,
ablations, DLA, the final LLC, and the mode at every checkpoint. All of them are measured on the same
fixed lists. The final OV/QK circuits are kept as safetensors beside the tables.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from headway.analysis.llc import estimate_llc
from headway.runs import layout
from headway.runs.checkpoints import (TensorSpec, checkpoint_steps, load_checkpoint, read_tensors, save_tensors,
                                      tensor_spec)
from headway.runs.config import RunConfig
from headway.runs.store import load_model
from headway.analysis.llc.resolution import RESOLUTION_ROWS
from headway.analysis.llc.study_settings import StudySettings
from headway.analysis.llc.trace import training_pool
from headway.analysis.sorting.circuits import measure_readout_scale, ov_circuits, qk_circuits
from headway.analysis.sorting.effects import ablate_heads, autoregressive_accuracy, direct_logit_attribution
from headway.model.transformer import EnsembleTransformer
from headway.studies.sorting.rules import SortingRules
from headway.analysis.sorting.modes import ModeThresholds, classify_modes, diagonal_scores, threshold_sweep
from headway.tasks.sorting.task import SortingConfig, generate
from headway.tasks.objective import run_loss

CIRCUITS = "circuits.safetensors"
ANALYSIS_SEED = 20_250_130  # the lists analysed; fixed so every model is judged on the same examples


def circuits_spec(runs: list[RunConfig]) -> dict[str, TensorSpec]:
    """The tensors of the circuits file of an ensemble of `runs` (float32, a row per run): the OV circuits
    [E, H, values, values], the QK circuits [E, H, values + 1, values] and the diagonal scores [E, H, values]."""
    e, h, v = len(runs), runs[0].model.heads, runs[0].task.values
    return {"ov": (torch.float32, (e, h, v, v)), "qk": (torch.float32, (e, h, v + 1, v)),
            "scores": (torch.float32, (e, h, v))}


def save_circuits(folder: Path, circuits: dict[str, torch.Tensor], runs: list[RunConfig]) -> None:
    """Keep the final circuits of an ensemble of `runs` (`circuits_spec`) beside its tables, with their run ids."""
    if tensor_spec(circuits) != circuits_spec(runs):
        raise RuntimeError(f"the circuits {tensor_spec(circuits)} differ from their declaration {circuits_spec(runs)}")
    save_tensors(folder / CIRCUITS, circuits, {"run_ids": ",".join(run.run_id for run in runs)})


def load_circuits(analysis_dir: Path, ensemble: str,
                  runs: list[RunConfig]) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Final OV, QK circuits and diagonal scores of the analysed ensemble of `runs`, with the run ids of their
    rows; the file is checked against `circuits_spec` and its digest verified, so a damaged one, or one of other
    runs or another shape, is refused with one line naming it."""
    path = analysis_dir / ensemble / CIRCUITS
    tensors, metadata = read_tensors(path, circuits_spec(runs), ("run_ids",))
    ids = [run.run_id for run in runs]
    if metadata["run_ids"] != ",".join(ids):
        raise layout.damaged(path, f"it holds the circuits of runs {metadata['run_ids'][:100]!r}, not of its "
                                   f"ensemble's {len(ids)} runs")
    return tensors, ids


def untrained_scores(run: RunConfig, instances: int, examples: int = 64, chunk: int = 250) -> torch.Tensor:
    """Diagonal scores [instances, H, V] of randomly initialised models of `run`'s shape (seeds 0 …
    instances − 1), measured as trained ones are: the noise the copy threshold is set against, with
    no trained model seen."""
    task = run.task
    batch = torch.from_numpy(generate(task, examples, np.random.default_rng(ANALYSIS_SEED)).tokens)
    scores = []
    for start in range(0, instances, chunk):
        seeds = list(range(start, min(start + chunk, instances)))
        model = EnsembleTransformer.from_seeds(run.model, task.d_vocab, task.n_ctx, task.d_out, seeds, "cpu")
        tokens = batch.expand(len(seeds), *batch.shape)
        scores.append(diagonal_scores(ov_circuits(model, task, measure_readout_scale(model, tokens, task))))
    return torch.cat(scores)


def circuit_state(model, task: SortingConfig, tokens: torch.Tensor, thresholds: ModeThresholds):
    """OV, QK, diagonal scores and the mode table (at `thresholds`) of every instance of `model`."""
    scale = measure_readout_scale(model, tokens, task)
    ov, qk = ov_circuits(model, task, scale), qk_circuits(model, task)
    return ov, qk, diagonal_scores(ov), classify_modes(ov, qk, thresholds)


def analyse_members(run_dir: Path, runs: list[RunConfig], members: list[int], device: torch.device | str,
                    examples: int, chosen: StudySettings, progress: bool, label: str, rules: SortingRules,
                    precision: str = "fp32", compile_mode: str | None = None
                    ) -> tuple[dict[str, pd.DataFrame], dict[str, torch.Tensor]]:
    """The tables final, ablation, dla, mode_curve, llc_final and mode_sweep of the instances `members` (one task)
    of the ensemble at `run_dir` (`instance` indexing `members`), and their final circuits; the modes follow
    the mode rule's thresholds in `rules` and its sweeps, and the LLC is sampled at the `chosen` settings (invalid
    when their choice was refused) at `precision` (`headway.compute`; the sampler's loss compiled in `compile_mode`)
    and judged valid or not by the rules' LLC validity limits (`LLCRules.llc_validity`)."""
    thresholds = rules.mode_thresholds()
    run = runs[members[0]]
    task = run.task
    batch = generate(task, examples, np.random.default_rng(ANALYSIS_SEED))
    model = load_model(run_dir, members, device=device)
    e = len(members)
    tokens = torch.from_numpy(batch.tokens).to(device).expand(e, *batch.tokens.shape)
    ov, qk, scores, modes = circuit_state(model, task, tokens, thresholds)
    greedy = autoregressive_accuracy(model, batch, task)[["instance", "accuracy", "list_accuracy"]].rename(
        columns={"accuracy": "ar_token_accuracy", "list_accuracy": "ar_list_accuracy"})
    final = modes.merge(greedy, on="instance")
    # measured on the analysed lists: redrawn geometric lists lower δ̄ below the requested mean_gap
    final["mean_gap"] = float(batch.gaps.mean())
    ablation = ablate_heads(model, batch, task)
    dla = direct_logit_attribution(model, batch, task)
    pool_tokens, pool_targets = training_pool(run, e, device)
    result = estimate_llc(model, run_loss(task, run.train.loss), pool_tokens, pool_targets, chosen.settings,
                          progress=progress,
                          desc=f"LLC {label}", precision=precision, validity=rules.llc_validity(), resolve=True,
                          resolution_rows=RESOLUTION_ROWS, compile_mode=compile_mode)
    curve = []
    few = tokens[:, :256]
    for step in checkpoint_steps(run_dir):
        model.load_instances(load_checkpoint(run_dir, step, runs, model), members)
        frame = circuit_state(model, task, few, thresholds)[3]
        frame.insert(0, "step", step)
        curve.append(frame)
    tables = {"final": final, "ablation": ablation, "dla": dla, "mode_curve": pd.concat(curve, ignore_index=True),
              "llc_final": replace(result, refused=chosen.refused).to_frame().assign(choice=chosen.reason),
              "mode_sweep": threshold_sweep(ov, qk, rules.mode_sweeps(), thresholds)}
    return tables, {"ov": ov, "qk": qk, "scores": scores}
