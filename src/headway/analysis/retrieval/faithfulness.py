"""How well a named circuit explains its model, each measure beside a null (docs/study-retrieval.md).

- *Necessity*: accuracy with the circuit mean-ablated, and resample-ablated (each head given its
  output on another example: a value the head really produces, which the mean may not be).
- *Sufficiency*: the faithfulness (r − a) / (c − a), with c the clean accuracy, r the accuracy with
  every head outside the circuit ablated and a the accuracy with every head ablated: the share of
  what the heads contribute that the circuit alone keeps. The circuit suffices at faithfulness ≥
  `sufficient` (the study's rule).
- *A minimal sufficient subset*: from the circuit, heads are dropped one at a time, least important
  first (smallest alone drop), whenever what remains still suffices.
- *The null*: `random_sets` random head sets of the circuit's size per model, each ablated and kept
  alone like the circuit. p-values, (1 + #sets at least as extreme) / (1 + #sets), say how often a
  random set is as necessary (ablated accuracy ≤ the circuit's) or as sufficient (kept-alone
  accuracy ≥ the circuit's). A circuit of almost every head cannot beat its null: every set of
  its size is nearly the same set. The minimal subset is compared the same way for sufficiency.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from headway.analysis.retrieval.interventions import HeadIntervention
from headway.analysis.retrieval.roles import head_grid

NULL_SEED = 7  # the random head sets, fixed so a study's tables are reproducible


def faithfulness(kept: np.ndarray, clean: np.ndarray, none: np.ndarray) -> np.ndarray:
    """(kept − none) / (clean − none), NaN where ablating every head costs less than a point (nothing to explain)."""
    span = clean - none
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(span > 0.01, (kept - none) / span, np.nan)


def circuit_check(heads: pd.DataFrame, intervention: HeadIntervention, sufficient: float, random_sets: int,
                  seed: int = NULL_SEED) -> pd.DataFrame:
    """Per instance: necessity (circuit ablated, mean and resample), sufficiency (rest ablated,
    faithfulness), the minimal subset keeping faithfulness ≥ `sufficient`, and the null of `random_sets`
    random head sets of the circuit's size with its p-values."""
    n, layers, n_heads = intervention.model.n_instances, intervention.layers, intervention.heads
    clean = intervention.accuracy(intervention.clean_prediction)
    circuits = [head_grid(heads[(heads.instance == e) & heads.in_circuit], layers, n_heads) for e in range(n)]
    everything = np.ones((layers, n_heads), dtype=bool)
    circuit_ablated, rest_ablated, all_ablated = np.array(intervention.ablated_accuracy(
        [[c, ~c, everything] for c in circuits])).T
    circuit_resample, rest_resample = np.array(intervention.ablated_accuracy([[c, ~c] for c in circuits],
                                                                               "resample")).T
    kept = faithfulness(rest_ablated, clean, all_ablated)
    minimal = minimal_circuits(heads, intervention, circuits, kept, sufficient, clean, all_ablated)
    minimal_rest = np.array([acc[0] for acc in intervention.ablated_accuracy([[~m] for m in minimal])])
    null = random_set_null(intervention, circuits, circuit_ablated, rest_ablated, random_sets, seed)
    minimal_null = random_set_null(intervention, minimal, np.full(n, np.nan), minimal_rest, random_sets, seed + 1)
    return pd.DataFrame({
        "instance": np.arange(n), "clean_accuracy": clean,
        "circuit_ablated_accuracy": circuit_ablated, "circuit_resample_accuracy": circuit_resample,
        "rest_ablated_accuracy": rest_ablated, "rest_resample_accuracy": rest_resample,
        "all_ablated_accuracy": all_ablated, "faithfulness": kept,
        "circuit_heads": [int(c.sum()) for c in circuits],
        "minimal_heads": [int(m.sum()) for m in minimal],
        "minimal_circuit": [" ".join(f"L{layer + 1}H{head}" for layer, head in zip(*np.nonzero(m), strict=True))
                            for m in minimal],
        "minimal_faithfulness": faithfulness(minimal_rest, clean, all_ablated),
        **null,
        "random_minimal_rest_accuracy": minimal_null["random_rest_accuracy"],
        "p_minimal_sufficient": minimal_null["p_sufficient"],
    })


def minimal_circuits(heads: pd.DataFrame, intervention: HeadIntervention, circuits: list[np.ndarray],
                     kept: np.ndarray, sufficient: float, clean: np.ndarray, all_ablated: np.ndarray
                     ) -> list[np.ndarray]:
    """Per instance, the circuit after greedy backward elimination: each member, least important first,
    is dropped when the heads left still keep faithfulness ≥ `sufficient`. A circuit whose own faithfulness
    (`kept`) is below it is returned whole (there is no sufficient subset of it to find). Instance e tests
    its k-th candidate in forward k, so all instances search together."""
    current = [c.copy() for c in circuits]
    order = [heads[(heads.instance == e) & heads.in_circuit].sort_values(["mean_drop", "layer", "head"])
             [["layer", "head"]].to_numpy() if kept[e] >= sufficient else np.empty((0, 2), dtype=int)
             for e in range(len(circuits))]
    for k in range(max(len(o) for o in order)):
        trial = [[~_without(current[e], order[e][k])] if k < len(order[e]) else [] for e in range(len(order))]
        accuracy = intervention.ablated_accuracy(trial)
        for e, measured in enumerate(accuracy):
            if len(measured) and faithfulness(measured, clean[e:e + 1], all_ablated[e:e + 1])[0] >= sufficient:
                current[e] = _without(current[e], order[e][k])
    return current


def _without(grid: np.ndarray, head: np.ndarray) -> np.ndarray:
    out = grid.copy()
    out[head[0], head[1]] = False
    return out


def random_set_null(intervention: HeadIntervention, circuits: list[np.ndarray], circuit_ablated: np.ndarray,
                    rest_ablated: np.ndarray, sets: int, seed: int) -> dict[str, np.ndarray]:
    """Random head sets of each circuit's size: their mean ablated and kept-alone accuracy, and the
    p-values that a random set is as necessary / as sufficient as the circuit (NaN for an empty circuit)."""
    rng = np.random.default_rng(seed)
    shape = circuits[0].shape
    draws = []
    for circuit in circuits:
        size = int(circuit.sum())
        masks = []
        for _ in range(sets if size else 0):
            mask = np.zeros(circuit.size, dtype=bool)
            mask[rng.choice(circuit.size, size, replace=False)] = True
            masks.append(mask.reshape(shape))
        draws.append(masks)
    ablated = intervention.ablated_accuracy(draws)
    kept = intervention.ablated_accuracy([[~m for m in masks] for masks in draws])
    nan = np.full(len(circuits), np.nan)
    out = {"random_sets": np.array([len(d) for d in draws]), "random_ablated_accuracy": nan.copy(),
           "random_rest_accuracy": nan.copy(), "p_necessary": nan.copy(), "p_sufficient": nan.copy()}
    for e, (a, r) in enumerate(zip(ablated, kept, strict=True)):
        if len(a):
            out["random_ablated_accuracy"][e], out["random_rest_accuracy"][e] = a.mean(), r.mean()
            out["p_necessary"][e] = (1 + np.sum(a <= circuit_ablated[e])) / (1 + len(a))
            out["p_sufficient"][e] = (1 + np.sum(r >= rest_ablated[e])) / (1 + len(r))
    return out
