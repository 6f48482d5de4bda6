"""Prompted retrieval questions: structured instances rendered by each formulation, with options.

For each hop count, one set of plain instances is drawn and rendered by F1, F2, F3 and F5, and one
set of conditional instances by F4, so the plain formulations are compared on the same problems
(paired). Questions depend only on the settings and the seed.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from headway.errors import ConfigError
from headway.files import atomic
from headway.limits import MAX_PROMPT_CHAINS, MAX_PROMPT_CHARACTERS, MAX_PROMPT_HOPS, MAX_QUESTIONS, MAX_SEED
from headway.settings import check_int
from headway.tasks.retrieval.prompts.formulations import FORMULATIONS, Formulation, Instance
from headway.tasks.retrieval.config import RetrievalConfig
from headway.tasks.retrieval.generator import RetrievalBatch, generate

# The line the prompt ends with; options are scored as continuations after it (lm-eval style).
ANSWER_CUE = "Answer:"
# The last line of the chat message in generate-and-parse mode.
REPLY_RULE = "Reply with the answer only."


@dataclass(frozen=True)
class Question:
    """One prompted question: what the model reads, its options and the structured instance behind it."""

    id: str
    formulation: str
    hops: int
    body: str
    choices: tuple[str, ...]
    answer_index: int
    chance: float
    instance: dict[str, Any]
    names: dict[str, str]
    values: dict[str, str]

    @property
    def prompt(self) -> str:
        """The text scored in log-likelihood mode; each option follows it after a space."""
        return f"{self.body}\n{ANSWER_CUE}"

    @property
    def chat_prompt(self) -> str:
        """The user message in generate-and-parse mode."""
        return f"{self.body}\n{REPLY_RULE}"

    @property
    def answer(self) -> str:
        """The correct option's text."""
        return self.choices[self.answer_index]

    def to_record(self) -> dict[str, Any]:
        """A JSON-serialisable dict (the JSONL line), prompts included for other tools."""
        record = asdict(self)
        record.update(choices=list(self.choices), prompt=self.prompt, chat_prompt=self.chat_prompt,
                      answer=self.answer)
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Question:
        """The question a JSONL line holds (derived fields are recomputed, not trusted)."""
        fields = {k: record[k] for k in ("id", "formulation", "hops", "body", "answer_index", "chance",
                                         "instance", "names", "values")}
        return cls(choices=tuple(record["choices"]), **fields)


@dataclass(frozen=True)
class QuestionSet:
    """Which questions to draw: formulations × hops 1..max_hops × `questions` each."""

    formulations: tuple[str, ...] = tuple(FORMULATIONS)
    max_hops: int = 8
    questions: int = 500
    chains: int = 4
    options: int = 4
    seed: int = 0

    def __post_init__(self) -> None:
        """Check every value early so a bad one is named before any work starts."""
        check_int("max_hops", self.max_hops, 1, MAX_PROMPT_HOPS)
        check_int("questions", self.questions, 1, MAX_QUESTIONS)
        check_int("options", self.options, 2, MAX_PROMPT_CHAINS)
        check_int("chains", self.chains, self.options, MAX_PROMPT_CHAINS)
        check_int("seed", self.seed, 0, MAX_SEED)
        unknown = [f for f in self.formulations if f not in FORMULATIONS]
        if unknown or not self.formulations:
            raise ConfigError(f"formulations {unknown or '(none)'} unknown; choose from {', '.join(FORMULATIONS)}")
        total = len(self.formulations) * self.max_hops * self.questions
        if total > MAX_QUESTIONS:
            raise ConfigError(f"{len(self.formulations)} formulations × {self.max_hops} hops × {self.questions} "
                              f"questions = {total} questions; at most {MAX_QUESTIONS} are asked in one run")

    @property
    def hops(self) -> range:
        """The hop counts asked about."""
        return range(1, self.max_hops + 1)


def check_renderable(spec: QuestionSet) -> None:
    """Refuse, before any question is drawn, settings whose questions cannot be rendered or are too much text.

    One question per formulation is rendered at the most hops: the names a formulation needs grow with hops ×
    chains, and every question of a cell needs as many as its first, so a pool that runs short is named at once.
    Then the prompt text the run would draw (`projected_characters`) is held against `MAX_PROMPT_CHARACTERS`."""
    for key in spec.formulations:
        try:
            make_questions(dataclasses.replace(spec, formulations=(key,), questions=1), hops=(spec.max_hops,))
        except ConfigError as err:
            raise ConfigError(f"{FORMULATIONS[key].label} at {spec.max_hops} hops × {spec.chains} chains: {err}") \
                from None
    characters = projected_characters(spec)
    if characters > MAX_PROMPT_CHARACTERS:
        raise ConfigError(f"{len(spec.formulations)} formulation(s) × hops 1..{spec.max_hops} × {spec.chains} chains "
                          f"× {spec.questions} questions render about {characters / 1e6:,.0f} M characters of "
                          f"prompts; at most {MAX_PROMPT_CHARACTERS / 1e6:,.0f} M are drawn in one run "
                          "(docs/cli.md#limits); lower --questions, --max-hops or --chains")


def projected_characters(spec: QuestionSet) -> int:
    """Characters of prompt text (every question's body) `spec` draws, projected from one question per
    formulation and hop count: a cell's questions differ only in the names drawn. Costs one question in
    `spec.questions` of drawing them all."""
    one_each = make_questions(dataclasses.replace(spec, questions=1))
    return spec.questions * sum(len(question.body) for question in one_each)


def make_questions(spec: QuestionSet, hops: Sequence[int] | None = None,
                   progress: Callable[[int], None] | None = None) -> list[Question]:
    """All questions of `spec` (or only the hop counts `hops`), ordered by formulation, then hops, then index;
    `progress(1)` is called as each formulation × hops cell is done."""
    instances: dict[tuple[bool, int], list[Instance]] = {}
    out: list[Question] = []
    for key in spec.formulations:
        form = FORMULATIONS[key]
        number = list(FORMULATIONS).index(key) + 1
        for d in spec.hops if hops is None else hops:
            family = (form.conditional, d)
            if family not in instances:
                instances[family] = draw_instances(spec, d, form.conditional)
            for i, inst in enumerate(instances[family]):
                rng = np.random.default_rng([spec.seed, number, d, i])
                out.append(make_question(form, inst, rng, f"{key}-h{d}-{i:04d}", spec.options))
            if progress is not None:
                progress(1)
    return out


def draw_instances(spec: QuestionSet, hops: int, conditional: bool) -> list[Instance]:
    """`spec.questions` structured instances with `hops` hops from the shared retrieval generator."""
    cfg = RetrievalConfig(vocab=spec.chains * ((2 if conditional else 1) * hops + 1), chains=spec.chains,
                          hops=hops, curriculum="none", conditional=conditional)
    rng = np.random.default_rng([spec.seed, int(conditional), hops])
    return instances_of(generate(cfg, spec.questions, rng))


def instances_of(batch: RetrievalBatch) -> list[Instance]:
    """The structured view of every example of a retrieval batch."""
    rows = zip(batch.statements.tolist(), batch.query.tolist(), batch.answer.tolist(), batch.query_hops.tolist(),
               strict=True)
    classes = batch.classes.tolist() if batch.classes is not None else None
    rules = batch.rules.tolist() if batch.rules is not None else None
    return [
        Instance(hops=hops, statements=tuple(map(tuple, statements)), query=query, answer=answer,
                 classes=None if classes is None else dict(map(tuple, classes[i])),
                 rules=None if rules is None else tuple(rules[i]))
        for i, (statements, query, answer, hops) in enumerate(rows)
    ]


def make_question(form: Formulation, inst: Instance, rng: np.random.Generator, qid: str, options: int) -> Question:
    """Render `inst` with `form` and attach its options, shuffled by `rng`."""
    rendered = form.render(inst, rng)
    answer = rendered.values[inst.answer]
    if form.lists_options:
        chain_values = inst.chain_values()
        wrong = [rendered.values[v] for top, v in chain_values.items() if top != inst.query]
        wrong = [wrong[i] for i in rng.choice(len(wrong), size=options - 1, replace=False)]
    else:
        wrong = [name for x, name in rendered.names.items() if x not in (inst.query, inst.answer)]
    choices = [answer, *wrong]
    order = rng.permutation(len(choices))
    choices = [choices[i] for i in order]
    lines = [form.intro, *rendered.sentences, f"Question: {rendered.question}"]
    if form.lists_options:
        lines.append("Options: " + ", ".join(choices))
    return Question(
        id=qid, formulation=form.key, hops=inst.hops, body="\n".join(line for line in lines if line),
        choices=tuple(choices), answer_index=int(np.flatnonzero(order == 0)[0]), chance=1 / len(choices),
        instance=instance_record(inst), names={str(k): v for k, v in rendered.names.items()},
        values={str(k): v for k, v in rendered.values.items()},
    )


def instance_record(inst: Instance) -> dict[str, Any]:
    """The structured instance as JSON: statements, query, hops, chain, answer (+ classes and rules)."""
    record: dict[str, Any] = {"statements": [list(s) for s in inst.statements], "query": inst.query,
                              "hops": inst.hops, "chain": inst.solve(), "answer": inst.answer}
    if inst.classes is not None:
        record["classes"] = {str(k): v for k, v in inst.classes.items()}
        record["rules"] = list(inst.rules or ())
    return record


def write_questions(path: str | Path, questions: Iterable[Question]) -> int:
    """Write one JSON record per line (atomically); return the count."""
    count = 0
    with atomic(Path(path)) as tmp, open(tmp, "w", encoding="utf-8") as file:
        for question in questions:
            file.write(json.dumps(question.to_record(), ensure_ascii=False) + "\n")
            count += 1
    return count


def read_questions(path: str | Path) -> list[Question]:
    """Questions from a JSONL file written by write_questions."""
    with open(path, encoding="utf-8") as file:
        return [Question.from_record(json.loads(line)) for line in file if line.strip()]


def by_cell(questions: Sequence[Question]) -> dict[tuple[str, int], list[Question]]:
    """Questions grouped by (formulation, hops), in order."""
    cells: dict[tuple[str, int], list[Question]] = {}
    for q in questions:
        cells.setdefault((q.formulation, q.hops), []).append(q)
    return cells
