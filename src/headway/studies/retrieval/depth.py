"""The depth law: final accuracy over layers × hops, next to the depth bound that applies.

Theorem 1's bound ⌈log₃(2D)⌉ assumes information can flow both ways along a chain. Under a causal
mask, or with flat statements, fewer link orders let it through (`headway.analysis.retrieval.reach`),
so the bound a cell is judged against is the fewest layers whose accuracy ceiling reaches the solved
threshold for its attention, order and layout; `theorem_bound` keeps Theorem 1's value beside it.
`masked_fraction` is the expected share of link targets a cell's runs left out of the loss as
undeliverable (`mask_unreachable`; 0 for runs without it)."""

from __future__ import annotations

import dataclasses

import pandas as pd

from headway.runs.store import final_metrics
from headway.analysis.retrieval.reach import min_layers_reaching
from headway.analysis.retrieval.reach import masked_fraction
from headway.tasks.retrieval.config import RetrievalConfig
from headway.tasks.retrieval.theory import min_layers

_FLOW = ("attention", "order", "layout")  # what decides which link orders the information flow gets through


def depth_table(metrics: pd.DataFrame, threshold: float = 0.9, by: tuple[str, ...] = ()) -> pd.DataFrame:
    """Mean and spread of final accuracy per (*by, hops, layers) over seeds, with the baselines,
    whether the cell counts as solved (mean accuracy >= `threshold`), Theorem 1's bound and the bound
    that applies (the fewest layers whose ceiling reaches `threshold`; Theorem 1's unless `by` names
    attention, order and layout)."""
    final = final_metrics(metrics)
    final = final.assign(masked_fraction=run_masked_fractions(final))
    table = (final.groupby([*by, "hops", "layers"])
             .agg(accuracy=("val_accuracy", "mean"), accuracy_min=("val_accuracy", "min"),
                  accuracy_max=("val_accuracy", "max"), seeds=("seed", "nunique"),
                  vocab=("vocab", "first"), chains=("chains", "first"),
                  masked_fraction=("masked_fraction", "mean"))
             .reset_index())
    table["chance_vocab"] = 1.0 / table.vocab
    table["chance_roots"] = 1.0 / table.chains
    table["theorem_bound"] = table.hops.map(min_layers)
    if set(_FLOW) <= set(by):
        table["bound"] = [min_layers_reaching(int(r.hops), r.attention, r.order, r.layout, int(r.chains), threshold)
                          for r in table.itertuples()]
    else:
        table["bound"] = table.theorem_bound
    table["solved"] = table.accuracy >= threshold
    return table.drop(columns=["vocab", "chains"])


def run_masked_fractions(final: pd.DataFrame) -> list[float]:
    """Per run (row of flat settings): the expected share of its link targets that mask_unreachable
    masks, 0 where the column is absent or false."""
    if "mask_unreachable" not in final.columns:
        return [0.0] * len(final)
    names = [f.name for f in dataclasses.fields(RetrievalConfig)]
    return [masked_fraction(RetrievalConfig(**{name: run[name] for name in names})) if run.mask_unreachable else 0.0
            for _, run in final.iterrows()]


def measured_min_layers(table: pd.DataFrame, by: tuple[str, ...] = ()) -> pd.DataFrame:
    """Per (*by, hops): the fewest layers that solved it (NaN when none did), the most layers trained,
    the bound (the table's `bound` column where it has one, else Theorem 1's) and whether the bound and
    one layer fewer were both trained (what a test of the bound needs: the bound depth must solve and
    one layer fewer fail)."""
    keys = [*by, "hops"]
    trained = table.groupby(keys).layers.agg(lambda layers: frozenset(layers.tolist())).rename("trained")
    out = trained.reset_index()
    out["max_layers_trained"] = [max(layers) for layers in out.trained]
    solved = table[table.solved].groupby(keys).layers.min().rename("measured_min_layers").reset_index()
    out = out.merge(solved, on=keys, how="left")
    out["theorem_bound"] = out.hops.map(min_layers)
    out["bound"] = (table.groupby(keys).bound.first().reindex(pd.MultiIndex.from_frame(out[keys])).to_numpy()
                    if "bound" in table.columns else out.theorem_bound)
    out["bound_testable"] = [bound in layers and (bound == 1 or bound - 1 in layers)
                             for bound, layers in zip(out.bound, out.trained, strict=True)]
    return out[[*keys, "measured_min_layers", "bound", "theorem_bound", "max_layers_trained", "bound_testable"]]
