"""The reachable fraction: from how many link orders can the query reach the answer in L layers?

Theorem 1's depth bound ⌈log₃(2D)⌉ (``theory.min_layers``) rests on Assumption 1: a position can
only attend to positions that share token or positional information with it. The information flow
that allows (`headway.tasks.retrieval.flow`) is played out exactly, per attention mode, order and
layout (docs/depth-bound.md). Order "shuffled": the D links in a uniformly random order; "chain":
forward hop order ([x_1, x_0] first). The other chains' links, interleaved in the task, change nothing.

The fraction is exact over all D! orders when D! <= 40320 (D <= 8), else simulated over `samples`
seeded random orders with a 95% Wilson interval. Chain order is one order; under bidirectional
attention every order gives the same sets (all positions see all, and a statement's slots stay
together), so one order is exact for every D.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

import numpy as np
import pandas as pd

from headway.analysis.statistics import wilson_interval
from headway.errors import ConfigError
from headway.limits import MAX_CONTEXT, MAX_LAYERS, MAX_SAMPLES, MAX_SEED
from headway.model.config import ATTENTION_KINDS
from headway.settings import check_choice, check_int, check_number
from headway.tasks.retrieval.flow import MAX_HOPS, chunk_size, order_chunks, reaches
from headway.tasks.retrieval.config import LAYOUTS, ORDERS, RetrievalConfig
from headway.tasks.retrieval.generator import generate
from headway.tasks.retrieval.reachable_targets import unreachable_targets
from headway.tasks.retrieval.theory import min_layers

EXACT_LIMIT = 40320  # enumerate every order up to 8! of them; simulate beyond
MASK_SAMPLES = 4096  # examples the expected masked share is drawn over (its standard error is under 0.3%)


@dataclass(frozen=True)
class ReachBound:
    """Share of link orders from which the query reaches x_0: `fraction` with its 95% interval
    [`lower`, `upper`] (equal to `fraction` when exact); `method` "exact" (every order counted, or
    one order that stands for all) or "simulated" (random orders, Wilson interval); `orders` the
    number of orders played out."""

    fraction: float
    lower: float
    upper: float
    method: str
    orders: int


@cache  # a pure function of its arguments, asked again per layer count, threshold and table
def reachable_fraction(hops: int, layers: int, attention: str = "causal", order: str = "shuffled",
                       layout: str = "packed", *, samples: int = 20000, seed: int = 0) -> ReachBound:
    """Share of the `order` link orders of one `hops`-hop chain from which the query's read-out
    position holds x_0 after `layers` layers of `attention` (module docstring for the rule)."""
    hops, layers, attention, order, layout = check_cell(hops, layers, attention, order, layout)
    samples = check_int("samples", samples, 1, MAX_SAMPLES)
    seed = check_int("seed", seed, 0, MAX_SEED)
    if order == "chain" or attention == "bidirectional":
        reached = reaches(np.arange(hops)[None, :], layers, attention, layout)
        value = float(reached[0])
        return ReachBound(value, value, value, "exact", 1)
    if math.factorial(hops) <= EXACT_LIMIT:
        every = np.array(list(itertools.permutations(range(hops))), dtype=np.int64).reshape(-1, hops)
        hits = sum(int(reaches(chunk, layers, attention, layout).sum()) for chunk in order_chunks(every, layout))
        value = hits / len(every)
        return ReachBound(value, value, value, "exact", len(every))
    rng = np.random.default_rng(seed)
    size = chunk_size(hops, layout)
    hits, done = 0, 0
    while done < samples:
        n = min(size, samples - done)
        drawn = rng.permuted(np.tile(np.arange(hops), (n, 1)), axis=1)
        hits += int(reaches(drawn, layers, attention, layout).sum())
        done += n
    lower, upper = wilson_interval(hits, samples)
    return ReachBound(hits / samples, lower, upper, "simulated", samples)


def accuracy_ceiling(fraction: float, chains: int) -> float:
    """Best final-hop accuracy when a query that cannot reach x_0 guesses among the K chain roots:
    f + (1 - f)/K.

    An approximation: a model that cannot reach x_0 may still rule some roots out (say, roots it
    saw bound to other chains' symbols) and beat 1/K on those orders, so the true ceiling can sit a
    little higher. It is still the right comparison for "unsolvable": 1/K is the baseline a model
    gets without retrieving anything (every root is a symbol that is never a link's left side), so
    accuracy at or below this ceiling is what depth-limited information flow predicts, and accuracy
    clearly above it is the evidence that the model retrieves past the bound."""
    fraction = check_number("fraction", fraction, 0.0, 1.0)
    chains = check_int("chains", chains, 1)
    return fraction + (1.0 - fraction) / chains


def min_layers_reaching(hops: int, attention: str = "causal", order: str = "shuffled", layout: str = "packed",
                        chains: int = 4, accuracy: float = 0.9) -> int:
    """The fewest layers whose accuracy ceiling reaches `accuracy`: the depth bound that applies to
    one attention mode, order and layout (Theorem 1's ⌈log₃(2D)⌉ under bidirectional packed
    attention; more under a causal mask). Simulated cells use their point estimate."""
    check_number("accuracy", accuracy, 0.0, 1.0)
    layers = 1
    while accuracy_ceiling(reachable_fraction(hops, layers, attention, order, layout).fraction, chains) < accuracy:
        layers += 1  # one hop per layer always reaches, so this ends by layers = hops (+1 when flat)
    return layers


def reach_table(hops: Iterable[int], layers: Iterable[int], attentions: Iterable[str] = ATTENTION_KINDS,
                orders: Iterable[str] = ORDERS, layouts: Iterable[str] = ("packed",), chains: int = 4, *,
                samples: int = 20000, seed: int = 0) -> pd.DataFrame:
    """One row per cell of attention × order × layout × layers × hops: the reachable fraction with
    its interval and method, the accuracy ceiling for `chains` chains, and `theorem_bound` (whether
    Theorem 1 allows it: min_layers(hops) <= layers). Every cell uses `seed`, so a cell's value does
    not depend on the other cells asked for. Every value is checked before any cell is computed."""
    hops, layers = list(hops), list(layers)
    attentions, orders, layouts = list(attentions), list(orders), list(layouts)
    for name, values in (("hops", hops), ("layers", layers), ("attention", attentions), ("order", orders),
                         ("layout", layouts)):
        if not values:
            raise ConfigError(f"{name} is empty; give at least one value")
    for d, t, a, o, lay in itertools.product(hops, layers, attentions, orders, layouts):
        check_cell(d, t, a, o, lay)
    check_int("chains", chains, 1, MAX_CONTEXT)
    check_int("samples", samples, 1, MAX_SAMPLES)
    check_int("seed", seed, 0, MAX_SEED)
    rows = []
    for a, o, lay, t, d in itertools.product(attentions, orders, layouts, layers, hops):
        bound = reachable_fraction(d, t, a, o, lay, samples=samples, seed=seed)
        rows.append({"attention": a, "order": o, "layout": lay, "layers": int(t), "hops": int(d),
                     "fraction": bound.fraction, "lower": bound.lower, "upper": bound.upper,
                     "method": bound.method, "orders": bound.orders,
                     "ceiling": accuracy_ceiling(bound.fraction, chains),
                     "theorem_bound": min_layers(int(d)) <= t})
    return pd.DataFrame(rows)


def check_cell(hops, layers, attention, order, layout) -> tuple[int, int, str, str, str]:
    """One cell's values checked (a ConfigError naming the bad one and what is allowed), as ints and choices."""
    hops = check_int("hops", hops, 1)
    if hops > MAX_HOPS:
        raise ConfigError(f"hops = {hops} is invalid; use an integer in 1..{MAX_HOPS} (symbols are uint64 bits)")
    return (hops, check_int("layers", layers, 1, MAX_LAYERS), check_choice("attention", attention, ATTENTION_KINDS),
            check_choice("order", order, ORDERS), check_choice("layout", layout, LAYOUTS))


@cache  # a pure function of the task, asked once per cell of a study's tables
def masked_fraction(task: RetrievalConfig, samples: int = MASK_SAMPLES, seed: int = 0) -> float:
    """Expected share of link targets that `mask_unreachable` turns to -1 for `task` (0 when it is
    off), over `samples` examples drawn with `seed`."""
    if not task.mask_unreachable:
        return 0.0
    statements = generate(task, samples, seed, dense=False).statements
    per_chain = task.hops * task.hops if task.supervision == "whole-chain" else task.hops * (task.hops + 1) // 2
    missing = unreachable_targets(statements, task.hops, task.layout, task.supervision)
    return float(missing.sum()) / (samples * task.chains * per_chain)  # dense: link k has k targets; whole-chain: D
