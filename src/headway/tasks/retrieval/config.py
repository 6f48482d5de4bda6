"""The retrieval task's configuration: its settings, checked on construction, and the shapes they give
(context, vocabulary, targets). The sequences themselves are `headway.tasks.retrieval.generator`'s
(docs/retrieval-task.md)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from headway.errors import ConfigError
from headway.limits import MAX_CONTEXT, MAX_SYMBOLS
from headway.settings import check_bool, check_choice, check_int
from headway.tasks.base import Task
from headway.tasks.registry import register_task

if TYPE_CHECKING:
    from headway.model.config import ModelConfig
    from headway.tasks.retrieval.generator import RetrievalBatch

LAYOUTS = ("packed", "flat")
ORDERS = ("shuffled", "chain")
CURRICULA = ("ic", "none", "mixture")
SUPERVISIONS = ("query", "dense", "whole-chain")
LINK_SUPERVISIONS = SUPERVISIONS[1:]  # the supervisions that read out at every link

_INT_FIELDS = ("vocab", "chains", "hops", "relations", "classes")
_MOST = {"vocab": MAX_SYMBOLS, "chains": MAX_CONTEXT, "hops": MAX_CONTEXT, "relations": MAX_SYMBOLS,
         "classes": MAX_SYMBOLS}
_CHOICE_FIELDS = {"layout": LAYOUTS, "order": ORDERS, "curriculum": CURRICULA, "supervision": SUPERVISIONS}


@register_task
@dataclass(frozen=True)
class RetrievalConfig(Task):
    """Shape of one retrieval task; validated on construction so a bad value fails early."""

    name: ClassVar[str] = "retrieval"
    summary: ClassVar[str] = "multi-hop retrieval over K chains of D links (docs/retrieval-task.md)"
    doc: ClassVar[str] = "docs/retrieval-task.md"
    default_loss: ClassVar[str] = "mse"
    size_settings: ClassVar[tuple[str, ...]] = ("vocab",)  # more symbols give more distinct examples
    scales: ClassVar[dict[str, dict[str, Any]]] = {
        # The paper: 8 heads, width 128, 10k steps, batch 512, 2^20 examples, Adam 1e-3, wd 0.1, MSE.
        "paper": {},
        # Minutes on a 2-core laptop: narrower, fewer steps, a smaller pool.
        "cpu": {"vocab": 16, "chains": 4, "heads": 4, "d_model": 64, "batch_size": 128, "steps": 1500,
                "train_size": 2**16, "val_size": 1024, "eval_every": 100, "checkpoint_every": 500,
                "log_checkpoints": 10},
    }

    vocab: int = 32
    chains: int = 4
    hops: int = 2
    layout: str = "packed"
    order: str = "shuffled"
    curriculum: str = "ic"
    conditional: bool = False
    relations: int = 2
    classes: int = 2
    supervision: str = "query"
    mask_unreachable: bool = False

    LATER: ClassVar[dict[str, Any]] = {"supervision": "query", "mask_unreachable": False}

    def __post_init__(self) -> None:
        """Store plain checked values and validate, so a bad value fails early with its name."""
        self.normalise(
            **{name: check_int(name, getattr(self, name), None, _MOST[name]) for name in _INT_FIELDS},
            **{name: check_choice(name, getattr(self, name), choices) for name, choices in _CHOICE_FIELDS.items()},
            conditional=check_bool("conditional", self.conditional),
            mask_unreachable=check_bool("mask_unreachable", self.mask_unreachable),
        )
        self.validate()

    def validate(self) -> RetrievalConfig:
        """Raise ConfigError naming the first invalid value and what is allowed; return self."""
        check_int("chains", self.chains, 1)
        check_int("hops", self.hops, 1)
        if not self.conditional:
            defaults = {f.name: f.default for f in dataclasses.fields(self)}
            for name in ("relations", "classes"):
                if getattr(self, name) != defaults[name]:
                    raise ConfigError(f"{name} = {getattr(self, name)} applies to the conditional variant only "
                                      "(conditional = false here); leave it out or add --conditional")
        if self.conditional and self.relations < 2:
            raise ConfigError(f"relations = {self.relations} is too small; the conditional task needs relations >= 2")
        if self.conditional and self.classes < 1:
            raise ConfigError(f"classes = {self.classes} is too small; the conditional task needs classes >= 1")
        if self.supervision in LINK_SUPERVISIONS and (self.conditional or self.curriculum != "ic"):
            raise ConfigError(
                f"supervision = {self.supervision!r} needs the plain variant with curriculum 'ic' (got conditional = "
                f"{self.conditional}, curriculum = {self.curriculum!r}): every link predicts its chain hop by "
                "hop, as the query does under 'ic'; use supervision 'query' otherwise"
            )
        if self.mask_unreachable and self.supervision not in LINK_SUPERVISIONS:
            raise ConfigError(f"mask_unreachable = True masks link targets, but supervision = "
                              f"{self.supervision!r}; use supervision 'dense' or 'whole-chain', or leave "
                              "mask_unreachable false")
        if self.vocab < self.n_symbols:
            formula = "chains*(2*hops+1)" if self.conditional else "chains*(hops+1)"
            raise ConfigError(
                f"{formula} = {self.n_symbols} symbols needed but vocab = {self.vocab}; use vocab >= {self.n_symbols}"
            )
        if self.n_ctx > MAX_CONTEXT:
            raise ConfigError(f"chains = {self.chains} and hops = {self.hops} make {self.n_ctx} positions per example "
                              f"({self.layout} layout), more than {MAX_CONTEXT}; use fewer chains or hops")
        return self

    def check_model(self, model: ModelConfig) -> None:
        """Refuse bidirectional attention with mask_unreachable: the mask is what a causal mask cannot deliver."""
        if self.mask_unreachable and model.attention != "causal":
            raise ConfigError(f"mask_unreachable = True masks the targets a causal mask cannot deliver, but "
                              f"attention = {model.attention!r}; use attention 'causal' or leave mask_unreachable false")

    @property
    def n_symbols(self) -> int:
        """Distinct symbols (entities) drawn per example."""
        per_chain = 2 * self.hops + 1 if self.conditional else self.hops + 1
        return self.chains * per_chain

    @property
    def n_links(self) -> int:
        """Link statements per example (true and decoy links in the conditional variant)."""
        return (2 if self.conditional else 1) * self.chains * self.hops

    @property
    def n_statements(self) -> int:
        """Statements per example, excluding the query."""
        if self.conditional:
            return self.n_links + self.n_symbols + self.classes
        return self.n_links

    @property
    def statement_width(self) -> int:
        """Slots of one statement: 2 (left, right) or 3 (with the relation/marker slot)."""
        return 3 if self.conditional else 2

    @property
    def n_slots(self) -> int:
        """Token slots per position: a whole statement when packed, one slot when flat."""
        return self.statement_width if self.layout == "packed" else 1

    @property
    def base_vocab(self) -> int:
        """Ids per slot: symbols plus the marker tokens of the variant."""
        if self.conditional:
            return self.vocab + self.relations + self.classes + 3
        return self.vocab + 1

    @property
    def d_vocab(self) -> int:
        """Distinct token ids the model embeds (packed gives each slot its own id range)."""
        return self.n_slots * self.base_vocab

    @property
    def n_ctx(self) -> int:
        """Sequence length in positions (statements plus the query)."""
        positions = self.n_statements + 1
        return positions if self.layout == "packed" else positions * self.statement_width

    @property
    def n_targets(self) -> int:
        """Target symbols per example: every hop for the implicit curriculum, else the answer."""
        return self.hops if self.curriculum == "ic" else 1

    @property
    def readout_positions(self) -> int:
        """Trailing positions read out: the query alone."""
        return 1

    @property
    def train_readout_positions(self) -> int:
        """Positions the training loss reads: every one under link supervision, else the query."""
        return self.n_ctx if self.supervision in LINK_SUPERVISIONS else 1

    @property
    def train_targets_masked(self) -> bool:
        """Link training targets hold -1 where a block has none (past a root, without a link, masked)."""
        return self.supervision in LINK_SUPERVISIONS

    def draw(self, n: int, rng: np.random.Generator, validation: bool = False) -> RetrievalBatch:
        """n examples; validation examples always query the full depth D and carry the query's targets."""
        from headway.tasks.retrieval.generator import generate

        return generate(self, n, rng, mixture_hops=False if validation else None,
                        dense=False if validation else None)

    def accuracy_columns(self, per_target: list[float], all_correct: float, split: str = "val") -> dict[str, float]:
        """Logged accuracies: the answer's (the last target), and every hop's under the curriculum."""
        columns = {f"{split}_accuracy": per_target[-1]}
        if len(per_target) > 1:
            columns.update({f"{split}_acc_hop{k + 1}": acc for k, acc in enumerate(per_target)})
        return columns

    def records(self, batch: RetrievalBatch) -> list[dict[str, Any]]:
        """Token and structured views of each example (docs/cli.md, record keys)."""
        from headway.tasks.retrieval.records import retrieval_records

        return retrieval_records(self, batch)
