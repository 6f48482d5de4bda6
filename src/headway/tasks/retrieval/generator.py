"""Multi-hop retrieval task: the vectorised example generator and its token layout (the settings are
`headway.tasks.retrieval.config`).

Plain variant (``conditional=False``). An example holds K chains of D hops over V abstract
symbols. Chain c uses D+1 symbols x_0 (its value) ... x_D, and every symbol of an example is
distinct. A link ``[x_k, x_{k-1}]`` (left, right) says "x_k = x_{k-1}"; the K*D links come in a
uniformly random order (``order="shuffled"``) or with each chain's links in forward hop order,
``[x_1, x_0]`` before ``[x_2, x_1]``, and the other chains' links interleaved at random
(``order="chain"``). The query is x_D of chain 0 and the answer is its x_0 (the ``mixture``
curriculum queries x_d, d uniform in 1..D). Base ids: symbols 0..V-1, QUERY = V;
base_vocab = V+1.

- packed: one position per link, two slots, ids offset by slot: ``[left, base_vocab + right]``,
  then the query ``[x_query, base_vocab + QUERY]``. n_ctx = K*D + 1, d_vocab = 2*base_vocab.
- flat: one slot per position, ``l_1 r_1 l_2 r_2 ... x_query QUERY``. n_ctx = 2*K*D + 2,
  d_vocab = base_vocab.

Conditional variant (``conditional=True``). Links carry a relation r in 0..R-1. Chain c has
chain entities x_0..x_D and decoy entities z_1..z_D; all K*(2D+1) entities are distinct. Every
entity has a random class in 0..C-1, and per example the rules map each class to a relation,
drawn so that the classes disagree as much as they can (every relation used when C >= R, no
relation shared when C < R; see ``draw_rules``). For k = 1..D, x_k has a true link
``(rules[class(x_k)], x_k, x_{k-1})`` and a decoy link ``(r', x_k, z_k)`` with r' uniform among the other R-1 relations, so the answer x_0 is reached
from the query by following, hop by hop, the relation the current entity's class selects.
Statements: 2*K*D links, one class statement per entity, C rule statements, all in random order
(``order="chain"``: each chain's true links in forward hop order among the rest), then the query.
Base ids: entities 0..V-1, relations V..V+R-1, classes V+R..V+R+C-1, IS = V+R+C,
RULE = V+R+C+1, QUERY = V+R+C+2; base_vocab = V+R+C+3. Every statement has three slots:

- link ``(V+r, x, y)``; class statement ``(IS, x, V+R+c)``; rule ``(RULE, V+R+c, V+r)``;
  query ``(QUERY, x_query, QUERY)``, always last.
- packed: one position per statement, slot s offset by s*base_vocab; n_ctx = S + 1 with
  S = 2*K*D + K*(2D+1) + C; d_vocab = 3*base_vocab.
- flat: the three slots on consecutive positions; n_ctx = 3*(S + 1); d_vocab = base_vocab.

In both variants the model reads out at the last position. Targets: ``ic`` gives the symbols
along the queried chain hop by hop (x_{D-1}, ..., x_0); ``none`` and ``mixture`` give x_0 alone.

Supervision (plain variant, ``ic``). ``query``: training targets as above. ``dense``: training
also reads out at every link, with the same D blocks: the link ``[x_k, x_{k-1}]`` of any chain
targets x_{k-1}, ..., x_0 of its own chain and -1 ("no target") in the blocks past its root; the
query keeps its targets. Training targets are then [N, n_ctx * D], one row of D blocks per
position (flat: the link's right slot carries them, its left slot and the query symbol -1).
``whole-chain``: every link is supervised in both directions, with the query's own blocks: any link
of a chain targets that chain's x_{D-1}, ..., x_0, the symbols toward its root and those toward its
leaf alike, so under a causal mask a link's leaf-ward targets need the links that come after it in
the chain (what chain order never shows it, and shuffled order shows it about half the time).
Validation examples keep the query's targets, so accuracy means the same under all three.
``mask_unreachable`` (dense and whole-chain, causal attention only) also sets to -1 every link target
that the causal information flow never brings to its position, whatever the depth
(``reachable_targets``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from headway.errors import ConfigError
from headway.settings import is_integer
from headway.tasks.base import ArrayBatch
from headway.tasks.retrieval.arrays import encode_rows, gather
from headway.tasks.retrieval.config import LINK_SUPERVISIONS, RetrievalConfig
from headway.tasks.retrieval.reachable_targets import unreachable_targets
from headway.tasks.retrieval.variants import draw_conditional, draw_plain

# Examples drawn per vectorised step: small enough that intermediates stay in cache and their
# buffers get reused (measured about 1.4x faster than one huge step for n = 2**18).
_CHUNK = 8192


@dataclass
class RetrievalBatch(ArrayBatch):
    """N examples: the model's tokens and targets plus the structured view an independent solver reads."""

    query_hops: np.ndarray
    statements: np.ndarray
    query: np.ndarray
    chain: np.ndarray
    answer: np.ndarray
    classes: np.ndarray | None = None
    rules: np.ndarray | None = None


def generate(
    cfg: RetrievalConfig, n: int, rng: np.random.Generator | int, *, mixture_hops: bool | None = None,
    dense: bool | None = None,
) -> RetrievalBatch:
    """Draw n independent examples of cfg with explicit randomness (a Generator or an int seed);
    `dense` (default: the config's supervision) gives every position's targets, not the query's."""
    if not is_integer(n) or n <= 0:
        raise ConfigError(f"n = {n!r} examples requested; use a whole number n >= 1")
    if mixture_hops is None:
        mixture_hops = cfg.curriculum == "mixture"
    if mixture_hops and cfg.curriculum == "ic":
        raise ConfigError(
            "mixture_hops = True with curriculum = 'ic' leaves later hop targets undefined; "
            "use curriculum 'none' or 'mixture'"
        )
    if dense is None:
        dense = cfg.supervision in LINK_SUPERVISIONS
    if dense and (cfg.conditional or cfg.curriculum != "ic"):
        raise ConfigError("dense = True needs the plain variant with curriculum 'ic'")
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    return _draw_chunked(cfg, int(n), rng, mixture_hops, dense)


def _draw_chunked(cfg: RetrievalConfig, n: int, rng: np.random.Generator, mixture: bool,
                  dense: bool) -> RetrievalBatch:
    """n examples drawn _CHUNK at a time into arrays allocated once (cache-friendly, one output copy)."""
    chunk = _draw_batch(cfg, min(_CHUNK, n), rng, mixture, dense)
    if n <= _CHUNK:
        return chunk
    out = {
        f.name: None if (a := getattr(chunk, f.name)) is None else np.empty((n, *a.shape[1:]), a.dtype)
        for f in dataclasses.fields(RetrievalBatch)
    }
    for start in range(0, n, _CHUNK):
        if start:
            chunk = _draw_batch(cfg, min(_CHUNK, n - start), rng, mixture, dense)
        for name, array in out.items():
            if array is not None:
                array[start : start + len(chunk)] = getattr(chunk, name)
    return RetrievalBatch(**out)


def _draw_batch(cfg: RetrievalConfig, n: int, rng: np.random.Generator, mixture: bool,
                dense: bool) -> RetrievalBatch:
    """One vectorised step: draw the variant's arrays, encode tokens and attach the targets."""
    drawn = draw_conditional(cfg, n, rng, mixture) if cfg.conditional else draw_plain(cfg, n, rng, mixture, dense)
    chain = drawn.chain
    answer = gather(chain, drawn.depth[:, None])[:, 0]
    targets = chain[:, 1:] if cfg.curriculum == "ic" else answer[:, None]
    if dense:
        links = drawn.link_targets
        if cfg.mask_unreachable:
            missing = unreachable_targets(drawn.statements, cfg.hops, cfg.layout, cfg.supervision)
            links = np.where(missing, -1, links)
        targets = dense_targets(links, targets, cfg.layout == "packed").reshape(n, -1)
    return RetrievalBatch(
        tokens=encode_rows(drawn.rows, cfg.layout == "packed", cfg.base_vocab),
        targets=targets.astype(np.int64),
        query_hops=drawn.depth.astype(np.int64),
        statements=drawn.statements.astype(np.int64),
        query=chain[:, 0].astype(np.int64),
        chain=chain.astype(np.int64),
        answer=answer.astype(np.int64),
        classes=None if drawn.classes is None else drawn.classes.astype(np.int64),
        rules=None if drawn.rules is None else drawn.rules.astype(np.int64),
    )


def dense_targets(link_targets: np.ndarray, query_targets: np.ndarray, packed: bool) -> np.ndarray:
    """Targets of every position [n, n_ctx, D] from each link's targets [n, links, D] and the
    query's [n, D]; flat layouts give left slots -1."""
    n, links, hops = link_targets.shape
    if packed:
        return np.concatenate([link_targets, query_targets[:, None, :]], axis=1)
    out = np.full((n, 2 * links + 2, hops), -1, dtype=link_targets.dtype)
    out[:, 1 : 2 * links : 2] = link_targets
    out[:, -1] = query_targets
    return out
