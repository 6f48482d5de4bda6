"""Analyse the instances of one trained sorting ensemble that share their data: circuits and modes,
ablations, DLA, the final LLC, and the mode at every checkpoint. All of them are measured on the same
fixed lists. The final OV/QK circuits are kept as safetensors beside the tables.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from headway.analysis.llc import SGLDSettings, estimate_llc
from headway.runs import layout
from headway.runs.checkpoints import checkpoint_steps, load_tensors, read_tensors
from headway.runs.config import RunConfig
from headway.runs.store import load_model
from headway.studies.llc_trace import training_pool
from headway.tasks.sorting.circuits import measure_readout_scale, ov_circuits, qk_circuits
from headway.tasks.sorting.effects import ablate_heads, autoregressive_accuracy, direct_logit_attribution
from headway.model.transformer import EnsembleTransformer
from headway.studies.sorting.rules import SortingRules
from headway.tasks.sorting.modes import ModeThresholds, classify_modes, diagonal_scores, threshold_sweep
from headway.tasks.sorting.task import SortingConfig, generate
from headway.train.objective import run_loss

CIRCUITS = "circuits.safetensors"
LLC_TRACE = "llc_trace"
ANALYSIS_SEED = 20_250_130  # the lists analysed; fixed so every model is judged on the same examples


def load_circuits(analysis_dir: Path, ensemble: str) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Final OV, QK circuits and diagonal scores of an analysed ensemble, with the run ids of their rows; the
    file's digest is verified, so a damaged one is refused with one line naming it."""
    path = analysis_dir / ensemble / CIRCUITS
    tensors, metadata = read_tensors(path)
    if "run_ids" not in metadata:
        raise layout.damaged(path, "no run_ids in its metadata")
    return tensors, metadata["run_ids"].split(",")


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


def circuit_state(model, task: SortingConfig, tokens: torch.Tensor, thresholds: ModeThresholds = ModeThresholds()):
    """OV, QK, diagonal scores and the mode table (at `thresholds`) of every instance of `model`."""
    scale = measure_readout_scale(model, tokens, task)
    ov, qk = ov_circuits(model, task, scale), qk_circuits(model, task)
    return ov, qk, diagonal_scores(ov), classify_modes(ov, qk, thresholds)


def analyse_members(run_dir: Path, runs: list[RunConfig], members: list[int], device: torch.device | str,
                    examples: int, sgld: SGLDSettings, progress: bool, label: str, rules: SortingRules,
                    precision: str = "fp32") -> tuple[dict[str, pd.DataFrame], dict[str, torch.Tensor]]:
    """The tables final, ablation, dla, mode_curve, llc_final and mode_sweep of the instances `members` (one task)
    of the ensemble at `run_dir` (`instance` indexing `members`), and their final circuits; the modes follow
    the mode rule's thresholds in `rules` and its sweeps, and the LLC is sampled at `precision` (`headway.compute`)."""
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
    result = estimate_llc(model, run_loss(task, run.train.loss), pool_tokens, pool_targets, sgld, progress=progress,
                          desc=f"LLC {label}", precision=precision)
    curve = []
    few = tokens[:, :256]
    for step in checkpoint_steps(run_dir):
        model.load_instances(load_tensors(layout.checkpoint_path(run_dir, step)), members)
        frame = circuit_state(model, task, few, thresholds)[3]
        frame.insert(0, "step", step)
        curve.append(frame)
    tables = {"final": final, "ablation": ablation, "dla": dla, "mode_curve": pd.concat(curve, ignore_index=True),
              "llc_final": result.to_frame(), "mode_sweep": threshold_sweep(ov, qk, rules.mode_sweeps(), thresholds)}
    return tables, {"ov": ov, "qk": qk, "scores": scores}
