"""The ensemble trainer: E runs of one shape, one forward/backward per step, checkpoints, resume."""

from __future__ import annotations

import dataclasses
import math
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from headway.errors import STOP_SIGNALS, ConfigError, Interrupted, TimeLimitReached, note_stop
from headway.model.transformer import EnsembleTransformer
from headway.progress import progress
from headway.runs import layout
from headway.runs.checkpoints import load_resume_state, save_resume_state, save_tensors, tensor_spec
from headway.runs.config import RunConfig
from headway.runs.cost import training_work
from headway.runs.metrics import is_logged, metrics_schema
from headway.runs.store import finished_metrics, plain_value
from headway.compute import ComputeSettings, maybe_compiled, precision_context
from headway.train.data import EnsembleData
from headway.execution.allocator import keep_freed_memory
from headway.execution.devices import device_name
from headway.tasks.objective import evaluate, run_loss
from headway.train.optim import EnsembleAdam
from headway.train.schedule import lr_multiplier


def checkpoint_schedule(steps: int, every: int, n_log: int) -> list[int]:
    """Steps whose weights are kept: 0, every `every`, `n_log` log-spaced steps, and the last."""
    regular = set(range(0, steps + 1, every))
    logs = {round(x) for x in np.logspace(0, math.log10(steps), n_log)} if n_log else set()
    return sorted(regular | logs | {0, steps})


@dataclass
class TrainerState:
    """Per-instance counters carried between steps and saved with every resume state."""

    active: torch.Tensor  # [E] bool: still training (False once its loss or gradient is not finite)
    diverged_step: torch.Tensor  # [E] long: the update after which it was frozen, -1 if never
    loss_sum: torch.Tensor  # [E] training losses summed since the last evaluation
    loss_count: torch.Tensor  # [] number of steps summed
    grad_norm: torch.Tensor  # [E] gradient norm of the last step (before clipping)

    @classmethod
    def fresh(cls, n: int, device: torch.device) -> TrainerState:
        """The state at step 0 of an ensemble of n instances."""
        return cls(active=torch.ones(n, dtype=torch.bool, device=device),
                   diverged_step=torch.full((n,), -1, dtype=torch.long, device=device),
                   loss_sum=torch.zeros(n, device=device), loss_count=torch.zeros((), device=device),
                   grad_norm=torch.zeros(n, device=device))

    def tensors(self) -> dict[str, torch.Tensor]:
        """The counters by field name, as saved in a resume state."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @torch.no_grad()
    def load(self, tensors: dict[str, torch.Tensor]) -> None:
        """Copy saved counters into this state, in place."""
        for name, tensor in self.tensors().items():
            tensor.copy_(tensors[name])


def build_model(runs: list[RunConfig], device: torch.device | str) -> EnsembleTransformer:
    """An untrained ensemble for runs of one shape, instance e initialised from runs[e].seed."""
    task = runs[0].task
    return EnsembleTransformer.from_seeds(runs[0].model, task.d_vocab, task.n_ctx, task.d_out,
                                          [run.seed for run in runs], device, task.n_slots)


class EnsembleTrainer:
    """Trains runs that share an ensemble key (see `RunConfig.ensemble_key`) in `run_dir`.

    `compute` sets precision and compilation (`headway.compute`); with `deadline` (a `time.time()`
    value) training saves its state and stops at the first step past it, to be resumed later."""

    def __init__(self, runs: list[RunConfig], run_dir: Path | str, device: torch.device | str = "cpu",
                 progress: bool = True, compute: ComputeSettings | None = None, deadline: float | None = None) -> None:
        if not runs:
            raise ConfigError("no runs to train")
        keys = {str(run.ensemble_key()) for run in runs}
        if len(keys) != 1:
            raise ConfigError("runs of different shapes cannot share an ensemble; group them with group_runs()")
        self.runs = runs
        self.run_dir = Path(run_dir)
        self.device = torch.device(device)
        if self.device.type == "cpu":
            keep_freed_memory()
        self.progress = progress
        self.cfg = runs[0].train
        self.task = runs[0].task
        self.vocab = self.task.vocab
        self.compute = compute or ComputeSettings()
        self.precision = self.compute.resolved_precision(self.device)
        self.work = training_work(runs)
        mode = self.compute.compile_mode(self.device, self.work)
        self.attention_kernel = self.compute.resolved_attention_kernel(self.device, self.task.n_ctx, self.work)
        self.loss = maybe_compiled(run_loss(self.task, self.cfg.loss), mode, "training loss")
        self.update_mode = None if mode is None else "default"  # in-place updates gain nothing from CUDA graphs
        self.deadline = deadline
        self._stop_signal: int | None = None  # the signal that asked training to stop, once one has
        self._repeated_stops = 0  # stop signals after that one, noted while the state is saved
        self._reported: set[int] = set()

    def fit(self) -> pd.DataFrame:
        """Train to the last step (resuming from the latest saved state) and return the metrics; refused
        while another process trains the same directory."""
        with layout.locked(self.run_dir):
            return self._fit()

    def _fit(self) -> pd.DataFrame:
        cfg = self.cfg
        config = {"runs": [r.stored() for r in self.runs]}
        config_path = self.run_dir / layout.CONFIG
        if config_path.is_file():
            if layout.read_json(config_path) != config:
                raise ConfigError(f"{self.run_dir} already holds other runs; choose a new output directory")
            if (self.run_dir / layout.SUMMARY).is_file():
                return finished_metrics(self.run_dir)
        layout.write_json(config_path, config)
        data, model, optim, state = self.setup()
        rows: list[dict] = []
        start = 0
        # the state is checked against the tensors this trainer saves (`tensor_spec`), so a file of another shape
        # is refused before it is read
        resumed = load_resume_state(self.run_dir, self.runs, tensor_spec(dict(model.named_parameters())),
                                    tensor_spec({**optim.state_tensors(), **state.tensors()}), self.device)
        if resumed is not None:
            weights, tensors, counters, metrics = resumed
            model.load_instances(weights)
            optim.load_state(tensors, counters["optimizer_steps"])
            state.load(tensors)
            start = counters["step"]
            rows = metrics.to_dict("records")
        keep = set(checkpoint_schedule(cfg.steps, cfg.checkpoint_every, cfg.log_checkpoints))
        started = time.perf_counter()
        bar = progress(cfg.steps, self.run_dir.name, "step", enabled=self.progress, initial=start)
        on_main_thread = threading.current_thread() is threading.main_thread()
        previous = ({signum: signal.signal(signum, self._request_stop) for signum in STOP_SIGNALS}
                    if on_main_thread else {})
        try:
            if resumed is None:  # a state saved at step 0 already holds step 0's row
                self._log(model, data, state, 0, rows, bar)
                self._save(model, optim, state, 0, rows, keep)
            for step in range(start, cfg.steps):
                self.train_step(model, data, optim, state, step)
                done = step + 1
                bar.update(1)
                if is_logged(cfg, done):
                    self._log(model, data, state, done, rows, bar)
                out_of_time = self.deadline is not None and time.time() >= self.deadline and done < cfg.steps
                stop = self._stop_signal
                if done in keep or stop is not None or out_of_time:
                    self._save(model, optim, state, done, rows, keep)
                if stop is not None:
                    raise Interrupted(done, stop, self._repeated_stops)
                if out_of_time:
                    raise TimeLimitReached(done)
        finally:
            bar.close()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        metrics = pd.DataFrame(rows)
        self._write_summary(metrics, state, time.perf_counter() - started, start)
        return metrics

    def setup(self) -> tuple[EnsembleData, EnsembleTransformer, EnsembleAdam, TrainerState]:
        """Fresh data, model, optimiser and per-instance counters at step 0."""
        cfg, n = self.cfg, len(self.runs)
        data = EnsembleData(self.runs, self.device)
        model = build_model(self.runs, self.device)
        model.use_attention_kernel(self.compute.attention_kernel)  # `auto` decides per pass (evaluation: no gradients)
        flat = model.flat
        optim = EnsembleAdam(
            flat,
            lr=torch.tensor([r.train.lr for r in self.runs]),
            weight_decay=torch.tensor([r.train.weight_decay for r in self.runs]),
            decay_mask=flat.mask(lambda name: name.rsplit(".", 1)[-1].startswith("W_")),
            betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, decoupled=cfg.optimizer == "adamw", compile_mode=self.update_mode,
        )
        return data, model, optim, TrainerState.fresh(n, self.device)

    def _request_stop(self, signum: int, frame) -> None:
        """The first Ctrl-C, SIGTERM or SIGHUP lets the step finish and saves; one that comes after it (a scheduler
        repeating its SIGTERM) is counted, never obeyed, so that it cannot cut the save short (`note_stop`)."""
        note_stop(signum)
        if self._stop_signal is None:
            self._stop_signal = signum
        else:
            self._repeated_stops += 1

    def train_step(self, model, data: EnsembleData, optim: EnsembleAdam, state: TrainerState, step: int) -> None:
        """Update `step` → `step + 1` for every active instance; flags instances that diverge."""
        cfg = self.cfg
        tokens, targets = data.train_batch(step)
        model.flat.zero_grad()
        with precision_context(self.precision, self.device):
            losses = self.loss(model, tokens, targets)
        losses.sum().backward()
        grad = model.flat.grad
        norms = grad.norm(dim=1)
        if cfg.grad_clip > 0:
            grad.mul_(torch.clamp(cfg.grad_clip / (norms + 1e-6), max=1.0)[:, None])
        ok = torch.isfinite(losses) & torch.isfinite(norms)
        active = state.active
        newly = active & ~ok
        state.diverged_step.masked_fill_(newly, step + 1)
        active &= ok
        state.loss_sum += torch.where(active, losses.detach(), 0.0)
        state.loss_count += 1
        state.grad_norm.copy_(norms)
        scale = lr_multiplier(cfg.schedule, step, cfg.steps, cfg.warmup_steps, cfg.final_lr_fraction)
        optim.step(scale, active)

    def _accuracies(self, model, tokens: torch.Tensor, targets: torch.Tensor, split: str) -> tuple[list, list]:
        """Loss [E] and the task's accuracy columns per instance on fixed examples."""
        with precision_context(self.precision, self.device):
            loss, per_target, all_correct = evaluate(model, tokens, targets, self.vocab, self.cfg.loss,
                                                     positions=self.task.readout_positions)
        columns = [self.task.accuracy_columns(hits, right, split)
                   for hits, right in zip(per_target.tolist(), all_correct.tolist())]
        return loss.tolist(), columns

    def _log(self, model, data: EnsembleData, state: TrainerState, step: int, rows: list, bar) -> None:
        val_loss, val_columns = self._accuracies(model, data.val_tokens, data.val_targets, "val")
        pool_columns = (self._accuracies(model, *data.pool(), "train")[1] if self.task.evaluates_training_pool
                        else [{} for _ in self.runs])
        count = state.loss_count.item()
        train_loss = (state.loss_sum / count).tolist() if count else [float("nan")] * len(self.runs)
        state.loss_sum.zero_()
        state.loss_count.zero_()
        active, diverged = state.active.tolist(), state.diverged_step.tolist()
        grad_norm = state.grad_norm.tolist()
        for e, run in enumerate(self.runs):
            row = {"step": step, "instance": e, "run_id": run.run_id,
                   "train_loss": train_loss[e] if active[e] else float("nan"),
                   "val_loss": val_loss[e], **val_columns[e], **pool_columns[e],
                   "grad_norm": grad_norm[e], "diverged": not active[e]}
            rows.append(row)
            if diverged[e] >= 0 and e not in self._reported:
                bar.write(f"instance {e} (seed {run.seed}, lr {run.train.lr}) diverged at step "
                          f"{diverged[e]}: frozen, the others go on")
                self._reported.add(e)
        logged = rows[-len(self.runs):]
        live = [e for e in range(len(self.runs)) if active[e]]
        if live:  # before the first step there is no training loss to show, only the validation accuracy
            shown = {"loss": f"{np.mean([train_loss[e] for e in live]):.4g}"} if count else {}
            bar.set_postfix(**shown, val_acc=f"{np.mean([logged[e]['val_accuracy'] for e in live]):.3f}")

    def _save(self, model, optim: EnsembleAdam, state: TrainerState, step: int, rows: list, keep: set) -> None:
        weights = dict(model.named_parameters())
        if step in keep:
            save_tensors(layout.checkpoint_path(self.run_dir, step), weights, {"step": str(step)})
        metrics = pd.DataFrame(rows)
        save_resume_state(self.run_dir, step, weights, {**optim.state_tensors(), **state.tensors()},
                          {"step": step, "optimizer_steps": optim.steps_taken}, metrics, self.runs)
        layout.write_table(self.run_dir / layout.METRICS, metrics, metrics_schema(self.runs))

    def _write_summary(self, metrics: pd.DataFrame, state: TrainerState, seconds: float, start: int) -> None:
        last = metrics[metrics.step == metrics.step.max()].set_index("instance")
        diverged = state.diverged_step.tolist()
        runs = []
        for e, run in enumerate(self.runs):
            final = {k: plain_value(v) for k, v in last.loc[e].items() if k != "run_id"}
            final["diverged_step"] = diverged[e] if diverged[e] >= 0 else None
            runs.append({"run_id": run.run_id, "config": run.flat(), "final": final})
        layout.write_json(self.run_dir / layout.SUMMARY, {
            "complete": True, "steps": self.cfg.steps, "instances": len(self.runs),
            "device": str(self.device), "device_name": device_name(self.device), "torch": torch.__version__,
            **self.compute.describe(self.device, self.work),
            "attention_kernel": self.attention_kernel, "seconds_this_session": round(seconds, 2), "resumed_from_step": start,
            "runs": runs})
