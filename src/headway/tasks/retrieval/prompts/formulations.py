"""Natural-language renderers of retrieval instances: the five prompting formulations F1-F5.

Every formulation renders a structured instance drawn by ``headway.tasks.retrieval.generate``
(one generator, many renderers): the abstract symbols get surface names drawn per question, each
link becomes one sentence, and the question asks for the value at the end of the queried chain.
The templates are documented with examples in docs/llm-eval.md.

- F1 ``assign``: variable assignments, ``A = 7`` / ``B = A`` (the paper's Figure 1).
- F2 ``code``: Python functions returning a number or calling another function; order-free, so the
  shuffled statements are still a valid program.
- F3 ``boxes``: objects in containers, ``The red box is in the attic.``; the answer is a room.
- F4 ``wizards``: conditional retrieval, ``Harry's mentor is Alice. Wizards live with their
  mentors. Harry is a wizard. Alice lives in Avalon. Where does Harry live?``
- F5 ``relatives``: mothers, ``Who is Anna's great-grandmother?``; the answer is a person.

F1-F4 are multiple choice: the wrong options are the values of distractor chains (so no option
is trivially wrong) and the options are listed in the prompt. F5 is answered with a person: its
choices are every person in the story except the one asked about, so chance is 1/(people - 1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from headway.errors import ConfigError
from headway.tasks.retrieval.prompts import words
from headway.tasks.retrieval.solver import solve


@dataclass(frozen=True)
class Instance:
    """One structured retrieval instance, as the solver reads it (plain or conditional)."""

    hops: int
    statements: tuple[tuple[int, ...], ...]
    query: int
    answer: int
    classes: dict[int, int] | None = None
    rules: tuple[int, ...] | None = None

    @property
    def conditional(self) -> bool:
        """Whether links carry a relation selected by the current entity's class."""
        return self.classes is not None

    def links(self) -> list[tuple[int, int]]:
        """(left, right) of every link, in statement order; a left entity's next one is its right."""
        return [(s[-2], s[-1]) for s in self.statements]

    def entities(self) -> list[int]:
        """Every symbol of the instance, in order of first appearance in the statements."""
        seen = dict.fromkeys(x for left, right in self.links() for x in (left, right))
        return list(seen)

    def terminals(self) -> list[int]:
        """Entities with no link to follow (chain values, and decoys in the conditional variant)."""
        lefts = {left for left, _ in self.links()}
        return [x for x in self.entities() if x not in lefts]

    def chain_values(self) -> dict[int, int]:
        """Value reached from the top of every chain (entities never on the right of a link)."""
        rights = {right for _, right in self.links()}
        tops = [x for x in self.entities() if x not in rights]
        return {top: self.solve(top)[-1] for top in tops}

    def solve(self, start: int | None = None) -> list[int]:
        """The chain followed from `start` (the query by default) by the reference solver."""
        start = self.query if start is None else start
        return solve(self.statements, start, self.hops, self.classes, self.rules)


@dataclass(frozen=True)
class Rendered:
    """One instance in words: sentences, the question, and the surface name of every symbol."""

    sentences: list[str]
    question: str
    names: dict[int, str]
    values: dict[int, str]


@dataclass(frozen=True)
class Formulation:
    """A documented prompt template with a short name; `render` turns an instance into words."""

    key: str
    name: str
    title: str
    conditional: bool
    lists_options: bool
    intro: str
    render: Callable[[Instance, np.random.Generator], Rendered]

    @property
    def label(self) -> str:
        """'F1 assign': how reports and figures name the formulation."""
        return f"{self.key} {self.name}"


def _draw(pool: Sequence[str], count: int, rng: np.random.Generator, what: str) -> list[str]:
    """`count` distinct names from `pool` in random order; a clear error when the pool is too small."""
    if count > len(pool):
        raise ConfigError(f"{count} {what} needed but only {len(pool)} are available; use fewer hops or chains")
    return [pool[i] for i in rng.choice(len(pool), size=count, replace=False)]


def _name_symbols(symbols: list[int], names: list[str]) -> dict[int, str]:
    """Symbol -> surface name, pairing the two lists in order."""
    return dict(zip(symbols, names, strict=True))


def _values_and_names(inst: Instance, rng: np.random.Generator, value_pool: Sequence[str],
                      name_pool: Sequence[str], what: tuple[str, str]) -> tuple[dict[int, str], dict[int, str]]:
    """All symbols' names, and the terminal symbols' (chain values') names: drawn from `value_pool`
    for terminals and from `name_pool` for the others."""
    terminals = inst.terminals()
    others = [x for x in inst.entities() if x not in set(terminals)]
    values = _name_symbols(terminals, _draw(value_pool, len(terminals), rng, what[0]))
    return {**values, **_name_symbols(others, _draw(name_pool, len(others), rng, what[1]))}, values


_NUMBERS = tuple(str(i) for i in range(1, 100))


def render_assign(inst: Instance, rng: np.random.Generator) -> Rendered:
    """F1: `B = A` per link, numbers as chain values, capital-letter variables."""
    variables = len(inst.entities()) - len(inst.terminals())
    pool = words.LETTERS if variables <= len(words.LETTERS) else words.LETTER_PAIRS
    names, values = _values_and_names(inst, rng, _NUMBERS, pool, ("numbers", "variable names"))
    sentences = [f"{names[left]} = {names[right]}" for left, right in inst.links()]
    return Rendered(sentences, f"What is the value of {names[inst.query]}?", names, values)


def render_code(inst: Instance, rng: np.random.Generator) -> Rendered:
    """F2: one Python function per link, returning a number (chain value) or calling the next function."""
    names, values = _values_and_names(inst, rng, _NUMBERS, words.IDENTIFIERS, ("numbers", "function names"))
    terminals = set(inst.terminals())
    sentences = [
        f"def {names[left]}(): return {names[right]}" + ("" if right in terminals else "()")
        for left, right in inst.links()
    ]
    return Rendered(sentences, f"What does print({names[inst.query]}()) print?", names, values)


def render_boxes(inst: Instance, rng: np.random.Generator) -> Rendered:
    """F3: `The red box is in the blue bag.`; chain values are rooms."""
    names, values = _values_and_names(inst, rng, words.ROOMS, words.OBJECTS, ("rooms", "objects"))
    sentences = [f"The {names[left]} is in the {names[right]}." for left, right in inst.links()]
    return Rendered(sentences, f"Which room is the {names[inst.query]} in?", names, values)


RELATIONS = ("mentor", "friend", "neighbour", "cousin")
CLASSES = ("wizard", "giant", "elf", "troll")


def render_wizards(inst: Instance, rng: np.random.Generator) -> Rendered:
    """F4: conditional retrieval; everyone lives with the relative their kind selects, until someone
    whose home is stated. Sentences (links, kinds, rules, homes) come in random order."""
    if inst.classes is None or inst.rules is None:
        raise ConfigError("the wizards formulation needs a conditional instance")
    if len(inst.rules) > len(CLASSES) or max(s[0] for s in inst.statements) >= len(RELATIONS):
        raise ConfigError(f"the wizards formulation supports up to {len(CLASSES)} classes and "
                          f"{len(RELATIONS)} relations")
    people = inst.entities()
    names = _name_symbols(people, _draw(words.PEOPLE, len(people), rng, "people"))
    terminals = inst.terminals()
    homes = _name_symbols(terminals, _draw(words.PLACES, len(terminals), rng, "places"))
    sentences = [f"{names[left]}'s {RELATIONS[rel]} is {names[right]}." for rel, left, right in inst.statements]
    sentences += [f"{names[x]} is a {CLASSES[inst.classes[x]]}." for x in people]
    sentences += [f"{CLASSES[c].capitalize()}s live with their {RELATIONS[r]}s." for c, r in enumerate(inst.rules)]
    sentences += [f"{names[x]} lives in {homes[x]}." for x in terminals]
    sentences = [sentences[i] for i in rng.permutation(len(sentences))]
    return Rendered(sentences, f"Where does {names[inst.query]} live?", names, homes)


def kinship(hops: int) -> str:
    """The word for the ancestor `hops` mothers up: mother, grandmother, great-grandmother, ..."""
    if hops == 1:
        return "mother"
    return "great-" * (hops - 2) + "grandmother"


def render_relatives(inst: Instance, rng: np.random.Generator) -> Rendered:
    """F5: `Beth's mother is Carol.` per link; asks for the query's ancestor `hops` generations up."""
    people = inst.entities()
    names = _name_symbols(people, _draw(words.WOMEN, len(people), rng, "women's names"))
    sentences = [f"{names[left]}'s mother is {names[right]}." for left, right in inst.links()]
    question = f"Who is {names[inst.query]}'s {kinship(inst.hops)}?"
    return Rendered(sentences, question, names, {x: names[x] for x in inst.terminals()})


FORMULATIONS: dict[str, Formulation] = {
    f.key: f
    for f in (
        Formulation("F1", "assign", "Variable assignments", False, True,
                    "Each line assigns a number or another variable to a variable.", render_assign),
        Formulation("F2", "code", "Python functions", False, True,
                    "Here is a Python program.", render_code),
        Formulation("F3", "boxes", "Objects in containers", False, True,
                    "Some objects are inside others; the outermost ones are in rooms.", render_boxes),
        Formulation("F4", "wizards", "Conditional retrieval", True, True,
                    "Read the facts about these people.", render_wizards),
        Formulation("F5", "relatives", "Relatives", False, False,
                    "Here is part of a family tree.", render_relatives),
    )
}


def parse_formulations(text: str | Sequence[str]) -> list[Formulation]:
    """Formulations from keys or names ('F1,F5', 'assign', 'all'), in the order given."""
    items = text.split(",") if isinstance(text, str) else list(text)
    by_name = {f.name: f for f in FORMULATIONS.values()}
    chosen: list[Formulation] = []
    for item in (i.strip() for i in items):
        if item.lower() == "all":
            chosen.extend(FORMULATIONS.values())
        elif item.upper() in FORMULATIONS:
            chosen.append(FORMULATIONS[item.upper()])
        elif item.lower() in by_name:
            chosen.append(by_name[item.lower()])
        else:
            allowed = ", ".join(f.label for f in FORMULATIONS.values())
            raise ConfigError(f"formulation {item!r} is unknown; choose from {allowed} (or 'all')")
    return list(dict.fromkeys(chosen))
