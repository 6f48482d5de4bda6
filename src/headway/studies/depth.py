"""The depth law: final accuracy over layers × hops, next to the bound ⌈log₃(2D)⌉."""

from __future__ import annotations

import pandas as pd


def min_layers(hops: int) -> int:
    """Smallest t with 3^t >= 2·hops (Theorem 1's bound, in exact integer arithmetic)."""
    if hops < 1:
        raise ValueError(f"hops = {hops} must be >= 1")
    layers, reach = 0, 1
    while reach < 2 * hops:
        layers, reach = layers + 1, reach * 3
    return layers


def final_accuracy(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per run: its config columns and the validation accuracy at its last logged step."""
    last = metrics.groupby("run_id").step.transform("max")
    return metrics[metrics.step == last].reset_index(drop=True)


def depth_table(metrics: pd.DataFrame, threshold: float = 0.9, by: tuple[str, ...] = ()) -> pd.DataFrame:
    """Mean and spread of final accuracy per (*by, hops, layers) over seeds, with the baselines and
    whether the cell counts as solved (mean accuracy >= `threshold`)."""
    final = final_accuracy(metrics)
    table = (final.groupby([*by, "hops", "layers"])
             .agg(accuracy=("val_accuracy", "mean"), accuracy_min=("val_accuracy", "min"),
                  accuracy_max=("val_accuracy", "max"), seeds=("seed", "nunique"),
                  vocab=("vocab", "first"), chains=("chains", "first"))
             .reset_index())
    table["chance_vocab"] = 1.0 / table.vocab
    table["chance_roots"] = 1.0 / table.chains
    table["bound"] = table.hops.map(min_layers)
    table["solved"] = table.accuracy >= threshold
    return table.drop(columns=["vocab", "chains"])


def measured_min_layers(table: pd.DataFrame, by: tuple[str, ...] = ()) -> pd.DataFrame:
    """Per (*by, hops): the fewest layers that solved it (NaN when none did), the most layers
    trained, and the bound."""
    keys = [*by, "hops"]
    out = table.groupby(keys).layers.max().rename("max_layers_trained").reset_index()
    solved = table[table.solved].groupby(keys).layers.min().rename("measured_min_layers").reset_index()
    out = out.merge(solved, on=keys, how="left")
    out["bound"] = out.hops.map(min_layers)
    return out[[*keys, "measured_min_layers", "bound", "max_layers_trained"]]
