"""Analyse the instances of one trained ensemble that share a task: head roles and circuit, role
scores over checkpoints, depth probes and the composition check. All of them are measured on the same
fixed examples, the probes on more of them where their width and vocabulary need it (`probe_examples`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from headway.runs.checkpoints import checkpoint_steps, load_checkpoint
from headway.runs.config import RunConfig
from headway.runs.store import load_model
from headway.studies.retrieval.rules import RetrievalRules
from headway.analysis.retrieval.composition import composition_check
from headway.analysis.retrieval.heads import head_scores, statement_patterns, uniform_link_mass
from headway.analysis.retrieval.interventions import HeadIntervention, head_effects
from headway.tasks.retrieval.positions import map_statements
from headway.analysis.retrieval.probes import probe_examples, probe_tables
from headway.analysis.retrieval.faithfulness import circuit_check
from headway.analysis.retrieval.orders import ORDER_EXAMPLES, order_accuracy
from headway.analysis.retrieval.paths import path_patching
from headway.analysis.retrieval.roles import attention_roles, name_circuit
from headway.analysis.retrieval.sensitivity import circuit_sensitivity
from headway.tasks.retrieval.generator import generate

ANALYSIS_SEED = 20_240_601  # the examples analysed; fixed so every model is judged on the same questions
EXAMPLES = 1024  # examples every model is analysed on
CURVE_EXAMPLES = 256  # of those, the ones scored at every checkpoint: attention averages settle on far fewer


def analyse_members(run_dir: Path, runs: list[RunConfig], members: list[int], device: torch.device | str,
                    rules: RetrievalRules, examples: int = EXAMPLES,
                    curve_examples: int = CURVE_EXAMPLES) -> dict[str, pd.DataFrame]:
    """Every analysis table (heads, circuit, paths, circuit_sensitivity, head_curves, probes, composition, orders,
    probe_orders) for the instances `members` (one task) of the ensemble at `run_dir`, `instance` indexing
    `members`, by the analysis-stage `rules` (role score, circuit drop, sufficient faithfulness, read level, random
    sets, their sweeps)."""
    task, model_cfg = runs[members[0]].task, runs[members[0]].model
    causal = model_cfg.attention == "causal"
    batch = generate(task, examples, np.random.default_rng(ANALYSIS_SEED))
    smap = map_statements(task, batch)
    model = load_model(run_dir, members, device=device)
    scores = attention_roles(head_scores(statement_patterns(model, task, batch.tokens), task, smap, causal),
                             rules.role_score)
    intervention = HeadIntervention(model, task, batch, smap)
    effects = scores.merge(head_effects(intervention), on=["instance", "layer", "head"])
    heads = name_circuit(effects, intervention, rules.circuit_drop)
    circuit = circuit_check(heads, intervention, rules.sufficient_faithfulness, rules.random_sets)
    paths = path_patching(heads, intervention)
    sweeps = rules.sweeps()
    sensitivity = circuit_sensitivity(effects, intervention, sweeps["role_score"], sweeps["circuit_drop"])
    composition = composition_check(scores, intervention, uniform_link_mass(smap, causal), rules.read_level)
    probed = generate(task, max(examples, probe_examples(model_cfg.d_model, task.vocab)),
                      np.random.default_rng(ANALYSIS_SEED))
    probes, probe_orders = probe_tables(model, task, probed, map_statements(task, probed))
    ordered = generate(task, ORDER_EXAMPLES, np.random.default_rng(ANALYSIS_SEED))
    orders = order_accuracy(model, task, ordered, map_statements(task, ordered))
    curves = []
    few = batch.subset(slice(0, curve_examples))
    few_map = map_statements(task, few)
    for step in checkpoint_steps(run_dir):  # the final analyses are done: the model takes each checkpoint's weights
        model.load_instances(load_checkpoint(run_dir, step, runs, model), members)
        frame = head_scores(statement_patterns(model, task, few.tokens), task, few_map, causal)
        frame.insert(0, "step", step)
        curves.append(frame)
    return {"heads": heads, "circuit": circuit, "paths": paths, "circuit_sensitivity": sensitivity,
            "head_curves": pd.concat(curves, ignore_index=True), "probes": probes, "composition": composition,
            "orders": orders, "probe_orders": probe_orders}
