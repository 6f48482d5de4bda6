"""The reachable fraction: from how many link orders can the query reach the answer in L layers?

Theorem 1's depth bound ⌈log₃(2D)⌉ (``theory.min_layers``) rests on Assumption 1: a position can
only attend to positions that share token or positional information with it. This module plays that
information flow out exactly, per attention mode, order and layout (docs/depth-bound.md):

- Every position holds a set of symbols. At each layer, every position gathers (set union) the sets
  of the positions it can see that share at least one symbol with its own set, all positions
  updating synchronously from the previous layer's sets. Causal attention sees itself and earlier
  positions; bidirectional sees every position.
- The query reaches the answer after L layers iff x_0 is in the read-out position's set.
- Only the queried chain matters (other chains share no symbol with it), so only its D links and
  the query, always last, are simulated. Link k (k = 1..D) is the statement [x_k, x_{k-1}].
- packed: one position per link holding {x_k, x_{k-1}}; the query holds {x_D}, read out there.
- flat: a link is two positions, left slot {x_k} then right slot {x_{k-1}}; the query is {x_D} then
  the QUERY marker {} (read out at the marker). The positional information of flat is this: the two
  slots of one statement may always gather from each other, shared symbol or not, subject to the
  mask (under causal attention the right slot sees the left, not the reverse).
- order "shuffled": the D links in a uniformly random order; "chain": forward hop order
  ([x_1, x_0] first). The other chains' links, interleaved in the task, change nothing.

The fraction is exact over all D! orders when D! <= 40320 (D <= 8), else simulated over `samples`
seeded random orders with a 95% Wilson interval. Chain order is one order; under bidirectional
attention every order gives the same sets (all positions see all, and a statement's slots stay
together), so one order is exact for every D. Sets are uint64 bitmasks (bit i = x_i), all orders of
a chunk advance at once. The same rule, played out to its fixed point at every link, decides which
dense targets a causal model can deliver at all (`headway.tasks.retrieval.reachable_targets`).
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
from headway.tasks.retrieval.task import LAYOUTS, ORDERS
from headway.tasks.retrieval.theory import min_layers

EXACT_LIMIT = 40320  # enumerate every order up to 8! of them; simulate beyond
MAX_HOPS = 62  # D+1 symbols must fit the 63 low bits of a uint64
_CELLS = 2**21  # orders x positions x positions per vectorised step (about 16 MiB of uint64)


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
    hops, layers, attention, order, layout = _check(hops, layers, attention, order, layout)
    samples = check_int("samples", samples, 1, MAX_SAMPLES)
    seed = check_int("seed", seed, 0, MAX_SEED)
    if order == "chain" or attention == "bidirectional":
        reached = _reaches(np.arange(hops)[None, :], layers, attention, layout)
        value = float(reached[0])
        return ReachBound(value, value, value, "exact", 1)
    if math.factorial(hops) <= EXACT_LIMIT:
        every = np.array(list(itertools.permutations(range(hops))), dtype=np.int64).reshape(-1, hops)
        hits = sum(int(_reaches(chunk, layers, attention, layout).sum()) for chunk in order_chunks(every, layout))
        value = hits / len(every)
        return ReachBound(value, value, value, "exact", len(every))
    rng = np.random.default_rng(seed)
    size = _chunk_size(hops, layout)
    hits, done = 0, 0
    while done < samples:
        n = min(size, samples - done)
        drawn = rng.permuted(np.tile(np.arange(hops), (n, 1)), axis=1)
        hits += int(_reaches(drawn, layers, attention, layout).sum())
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
        _check(d, t, a, o, lay)
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


def _check(hops, layers, attention, order, layout) -> tuple[int, int, str, str, str]:
    hops = check_int("hops", hops, 1)
    if hops > MAX_HOPS:
        raise ConfigError(f"hops = {hops} is invalid; use an integer in 1..{MAX_HOPS} (symbols are uint64 bits)")
    return (hops, check_int("layers", layers, 1, MAX_LAYERS), check_choice("attention", attention, ATTENTION_KINDS),
            check_choice("order", order, ORDERS), check_choice("layout", layout, LAYOUTS))


def _chunk_size(hops: int, layout: str) -> int:
    positions = _n_positions(hops, layout)
    return max(64, _CELLS // (positions * positions))


def order_chunks(orders: np.ndarray, layout: str) -> Iterable[np.ndarray]:
    """Rows of link orders [n, hops] in chunks small enough for one vectorised step of `gathered_sets`."""
    size = _chunk_size(orders.shape[1], layout)
    return (orders[i:i + size] for i in range(0, len(orders), size))


def _n_positions(hops: int, layout: str) -> int:
    return hops + 1 if layout == "packed" else 2 * hops + 2


def initial_sets(orders: np.ndarray, layout: str) -> np.ndarray:
    """[n, positions] uint64 symbol sets of the queried chain laid out in each row's link order
    (orders[n, i] = k - 1 for link k at statement i), the query last."""
    n, hops = orders.shape
    one = np.uint64(1)
    k = orders.astype(np.uint64) + one  # link k = [x_k, x_{k-1}]
    query = np.full((n, 1), one << np.uint64(hops), dtype=np.uint64)
    if layout == "packed":
        return np.concatenate([(one << k) | (one << (k - one)), query], axis=1)
    slots = np.stack([one << k, one << (k - one)], axis=2).reshape(n, 2 * hops)
    return np.concatenate([slots, query, np.zeros((n, 1), dtype=np.uint64)], axis=1)


def _masks(positions: int, attention: str, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """visible[i, j]: position i may attend to j; always[i, j]: i gathers j shared symbol or not
    (itself, and in flat the other slot of its statement), within `visible`."""
    index = np.arange(positions)
    visible = index[:, None] >= index[None, :] if attention == "causal" else np.ones((positions,) * 2, bool)
    statement = index // 2 if layout == "flat" else index
    return visible, visible & (statement[:, None] == statement[None, :])


def _reaches(orders: np.ndarray, layers: int, attention: str, layout: str) -> np.ndarray:
    """Whether the read-out position holds x_0 after `layers` layers, for each row of link orders."""
    sets = gathered_sets(initial_sets(orders, layout), attention, layout, layers)
    return (sets[:, -1] & np.uint64(1)) != np.uint64(0)


def gathered_sets(sets: np.ndarray, attention: str, layout: str, layers: int | None = None) -> np.ndarray:
    """Every position's symbol set [n, positions] after `layers` layers of the gather rule (module
    docstring) from `sets` (`initial_sets`); None plays it out to its fixed point, what any depth reaches."""
    visible, always = _masks(sets.shape[1], attention, layout)
    zero = np.uint64(0)
    for _ in itertools.repeat(None) if layers is None else range(layers):
        shares = (sets[:, :, None] & sets[:, None, :]) != zero
        gather = (shares & visible) | always
        grown = np.bitwise_or.reduce(np.where(gather, sets[:, None, :], zero), axis=2)
        if np.array_equal(grown, sets):  # no set changed: every further layer leaves them as they are
            break
        sets = grown
    return sets
