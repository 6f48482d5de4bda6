"""Analyse one trained sorting ensemble: circuits and modes, ablations, DLA, the LLC over training.

Results go to `<analysis>/<ensemble>/` as Parquet files tagged with each run's `run_id`, plus the
final OV/QK circuits as safetensors. The LLC trace is saved checkpoint by checkpoint, and
`done.json` names the runs and the settings the tables cover, so an interrupted study redoes only
what is missing. All instances trained on the same data are measured on the same fixed lists.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from safetensors import safe_open
from tqdm.auto import tqdm

from headway.analysis.circuits import measure_readout_scale, ov_circuits, qk_circuits
from headway.analysis.head_effects import ablate_heads, autoregressive_accuracy, direct_logit_attribution
from headway.analysis.llc import SGLDSettings, estimate_llc, head_mask
from headway.analysis.modes import classify_modes, diagonal_scores
from headway.runs import layout
from headway.runs.checkpoints import checkpoint_steps, load_tensors, save_tensors
from headway.runs.config import RunConfig
from headway.runs.store import load_model, load_runs
from headway.studies.ensembles import DONE, by_task
from headway.studies.sorting.plan import data_label
from headway.tasks.pools import make_pools
from headway.tasks.sorting import SortingConfig, generate
from headway.train.objective import readout, readout_loss

TABLES = ("final", "ablation", "dla", "mode_curve", "llc_final", "llc_curve")
CIRCUITS = "circuits.safetensors"
LLC_TRACE = "llc_trace"
ANALYSIS_SEED = 20_250_130  # the lists analysed; fixed so every model is judged on the same examples
VERSION = 3  # bump when an analysis or rule changes, so cached tables are recomputed


def analyse_ensemble(run_dir: Path, analysis_dir: Path, sgld: SGLDSettings, development: Iterable[str],
                     llc_checkpoints: int | None, examples: int, device: torch.device | str = "cpu",
                     progress: bool = True) -> dict[str, pd.DataFrame]:
    """The analysis tables of the ensemble at `run_dir`, computed once and then read from
    `analysis_dir`. Runs whose id is in `development` get the LLC (whole model and per head)
    at every saved checkpoint (or `llc_checkpoints` log-spaced ones)."""
    target = analysis_dir / run_dir.name
    runs = load_runs(run_dir)
    development = sorted(set(development) & {run.run_id for run in runs})
    stamp = {"runs": [run.run_id for run in runs], "version": VERSION, "sgld": sgld.to_dict(),
             "development": development, "llc_checkpoints": llc_checkpoints, "examples": examples}
    done = target / DONE
    if done.is_file() and {k: v for k, v in layout.read_json(done).items() if k != "seconds"} == stamp:
        return {name: pd.read_parquet(target / f"{name}.parquet") for name in TABLES}
    started = time.perf_counter()
    parts: dict[str, list[pd.DataFrame]] = {name: [] for name in TABLES}
    circuits: dict[str, list[torch.Tensor]] = {"ov": [], "qk": [], "scores": []}
    order: list[int] = []
    for members in by_task(runs).values():
        tables, arrays = _analyse_members(run_dir, runs, members, device, examples, sgld, progress)
        for name, frame in tables.items():
            parts[name].append(frame)
        for name, array in arrays.items():
            circuits[name].append(array)
        order += members
    dev_index = [i for i, run in enumerate(runs) if run.run_id in development]
    trace = llc_trace(run_dir, target / LLC_TRACE, runs, dev_index, sgld, llc_checkpoints, device, progress)
    parts["llc_curve"] = [trace]
    out = {name: pd.concat(frames, ignore_index=True) if frames else pd.DataFrame() for name, frames in parts.items()}
    target.mkdir(parents=True, exist_ok=True)
    for name, frame in out.items():
        frame.to_parquet(target / f"{name}.parquet", index=False)
    inverse = np.argsort(order)
    save_tensors(target / CIRCUITS, {name: torch.cat(arrays)[inverse] for name, arrays in circuits.items()},
                 {"run_ids": ",".join(run.run_id for run in runs)})
    layout.write_json(done, {**stamp, "seconds": round(time.perf_counter() - started, 2)})
    return out


def load_circuits(analysis_dir: Path, ensemble: str) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Final OV, QK circuits and diagonal scores of an analysed ensemble, with the run ids of their rows."""
    with safe_open(str(analysis_dir / ensemble / CIRCUITS), "pt") as file:
        names = file.keys()  # a safetensors handle, not a mapping: it has no __iter__
        return {name: file.get_tensor(name) for name in names}, file.metadata()["run_ids"].split(",")


def sorting_loss(task: SortingConfig):
    """Per-instance teacher-forced cross-entropy of a batch: the training loss, for SGLD."""
    def loss(model, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return readout_loss(readout(model, tokens, task.readout_positions), targets, task.vocab, "cross_entropy")
    return loss


def _tag(frame: pd.DataFrame, runs: list[RunConfig], members: list[int]) -> pd.DataFrame:
    """Replace the sub-ensemble's instance index by the run's id, data label and ensemble position."""
    frame = frame.copy()
    frame["run_id"] = [runs[members[i]].run_id for i in frame.instance]
    frame["data"] = [data_label(runs[members[i]]) for i in frame.instance]
    frame["instance"] = [members[i] for i in frame.instance]
    return frame


def _pool(run: RunConfig, n_instances: int, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """The run's training pool, shared by `n_instances` instances (a view, no copy) for SGLD."""
    train = make_pools(run.task, run.train.train_size, run.train.val_size, run.data_seed)[0]
    tokens = torch.from_numpy(train.tokens).to(device)
    targets = torch.from_numpy(train.targets).to(device)
    return tokens.expand(n_instances, *tokens.shape), targets.expand(n_instances, *targets.shape)


def _circuit_state(model, task: SortingConfig, tokens: torch.Tensor):
    """OV, QK, diagonal scores and the mode table of every instance of `model`."""
    scale = measure_readout_scale(model, tokens, task)
    ov, qk = ov_circuits(model, task, scale), qk_circuits(model, task)
    return ov, qk, diagonal_scores(ov), classify_modes(ov, qk)


def _analyse_members(run_dir: Path, runs: list[RunConfig], members: list[int], device: torch.device | str,
                     examples: int, sgld: SGLDSettings, progress: bool):
    """Every per-model analysis of the instances `members` (one task) of the ensemble at `run_dir`."""
    task = runs[members[0]].task
    batch = generate(task, examples, np.random.default_rng(ANALYSIS_SEED))
    model = load_model(run_dir, members, device=device)
    e = len(members)
    tokens = torch.from_numpy(batch.tokens).to(device).expand(e, *batch.tokens.shape)
    ov, qk, scores, modes = _circuit_state(model, task, tokens)
    greedy = autoregressive_accuracy(model, batch, task)[["instance", "accuracy", "list_accuracy"]].rename(
        columns={"accuracy": "ar_token_accuracy", "list_accuracy": "ar_list_accuracy"})
    final = modes.merge(greedy, on="instance")
    # measured on the analysed lists: redrawn geometric lists lower δ̄ below the requested mean_gap
    final["mean_gap"] = float(batch.gaps.mean())
    ablation = ablate_heads(model, batch, task)
    dla = direct_logit_attribution(model, batch, task)
    pool_tokens, pool_targets = _pool(runs[members[0]], e, device)
    result = estimate_llc(model, sorting_loss(task), pool_tokens, pool_targets, sgld, progress=progress,
                          desc=f"LLC {data_label(runs[members[0]])}")
    llc_final = result.to_frame()
    curve = []
    few = tokens[:, :256]
    for step in checkpoint_steps(run_dir):
        model.load_instances(load_tensors(layout.checkpoint_path(run_dir, step)), members)
        frame = _circuit_state(model, task, few)[3]
        frame.insert(0, "step", step)
        curve.append(frame)
    tables = {"final": final, "ablation": ablation, "dla": dla, "mode_curve": pd.concat(curve, ignore_index=True),
              "llc_final": llc_final}
    return {name: _tag(frame, runs, members) for name, frame in tables.items()}, {"ov": ov, "qk": qk, "scores": scores}


def trace_steps(saved: list[int], count: int) -> list[int]:
    """`count` saved steps spread evenly in log(step): the first and last always included."""
    if len(saved) <= count:
        return list(saved)
    grid = np.log10(np.asarray(saved, dtype=float) + 1)
    wanted = np.linspace(grid[0], grid[-1], count)
    picked = sorted({int(np.argmin(np.abs(grid - w))) for w in wanted})
    return [saved[i] for i in picked]


def llc_trace(run_dir: Path, folder: Path, runs: list[RunConfig], instances: list[int], sgld: SGLDSettings,
              count: int | None, device: torch.device | str, progress: bool) -> pd.DataFrame:
    """LLC of the whole model and of each head, restricted to that head's weights, at every saved
    checkpoint (or `count` log-spaced ones) of `instances` (which share a task), with each chain's
    loss trace. Each checkpoint is saved as it finishes."""
    if not instances:
        return pd.DataFrame()
    task = runs[instances[0]].task
    if any(repr(runs[i].task) != repr(task) for i in instances):
        raise ValueError("the traced instances must share their data")
    saved = checkpoint_steps(run_dir)
    steps = saved if count is None else trace_steps(saved, count)
    model = load_model(run_dir, instances, device=device)
    pool_tokens, pool_targets = _pool(runs[instances[0]], len(instances), device)
    masks = {"all": None, **{f"L0H{h}": head_mask(model, 0, h) for h in range(model.cfg.heads)}}
    stamp = {"sgld": sgld.to_dict(), "runs": [runs[i].run_id for i in instances], "version": VERSION}
    if (folder / "settings.json").is_file() and layout.read_json(folder / "settings.json") != stamp:
        for stale in folder.glob("step_*.parquet"):  # traced with other settings: start again
            stale.unlink()
    layout.write_json(folder / "settings.json", stamp)
    frames = []
    for step in tqdm(steps, desc="LLC over training", unit="checkpoint", disable=not progress):
        path = folder / f"step_{step:07d}.parquet"
        if path.is_file():
            frames.append(pd.read_parquet(path))
            continue
        model.load_instances(load_tensors(layout.checkpoint_path(run_dir, step)), instances)
        parts = []
        for name, mask in masks.items():
            result = estimate_llc(model, sorting_loss(task), pool_tokens, pool_targets, sgld, mask=mask)
            frame = result.to_frame()
            frame["loss_trace"] = [chains.tolist() for chains in result.loss_trace]  # [chains][draws]
            frame.insert(0, "weights", name)
            frame.insert(0, "step", step)
            parts.append(frame)
        frame = _tag(pd.concat(parts, ignore_index=True), runs, instances)
        frame.to_parquet(path, index=False)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)
