"""Export prompted questions for lm-evaluation-harness: one JSONL file and one task YAML per
(formulation, hops), and one group YAML per formulation.

Tasks are `multiple_choice`: each option is scored by log-likelihood after the prompt and a space
(`acc`, `acc_norm`), exactly as `headway llm-eval` scores them. Every group (one per formulation, and
`headway_retrieval` over all) reports both metrics aggregated over its questions, each question counting
once (`weight_by_size`; the cells are equal in size, so this is also the mean of the cells). Data paths in the YAML files are
absolute, because lm-eval resolves relative paths against its working directory; re-export after
moving the folder. Run with `lm-eval run --model hf --model_args pretrained=MODEL --include_path DIR --tasks
headway_retrieval` (what `headway data prompts` prints).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from headway.files import atomic
from headway.tasks.retrieval.prompts.formulations import FORMULATIONS
from headway.tasks.retrieval.prompts.questions import Question, by_cell, write_questions

GROUP = "headway_retrieval"
METRICS = ("acc", "acc_norm")


def task_name(formulation: str, hops: int | None = None) -> str:
    """lm-eval task (or group) name, e.g. headway_retrieval_f1_assign_h3."""
    name = f"{GROUP}_{formulation.lower()}_{FORMULATIONS[formulation].name}"
    return name if hops is None else f"{name}_h{hops}"


def _yaml(mapping: dict[str, object], indent: int = 0) -> str:
    """A small YAML writer for nested dicts, lists and scalars (strings JSON-quoted, which YAML reads)."""
    pad = " " * indent
    lines: list[str] = []
    for key, value in mapping.items():
        if isinstance(value, dict):
            lines.append(f"{pad}{key}:\n{_yaml(value, indent + 2)}")
        elif isinstance(value, list):
            lines.append(f"{pad}{key}:")
            for item in value:
                if isinstance(item, dict):
                    first, *rest = _yaml(item, indent + 4).splitlines()
                    lines.append(f"{pad}  - {first.strip()}")
                    lines.extend(rest)
                else:
                    lines.append(f"{pad}  - {json.dumps(item)}")
        else:
            lines.append(f"{pad}{key}: {json.dumps(value)}")
    return "\n".join(lines)


def task_yaml(formulation: str, hops: int, data_file: Path) -> str:
    """The task YAML of one (formulation, hops) cell, reading `data_file`."""
    spec = {
        "task": task_name(formulation, hops),
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data_file.resolve())}},
        "test_split": "test",
        "output_type": "multiple_choice",
        "doc_to_text": "prompt",
        "doc_to_choice": "choices",
        "doc_to_target": "answer_index",
        "target_delimiter": " ",
        "metric_list": [{"metric": m, "aggregation": "mean", "higher_is_better": True} for m in METRICS],
        "metadata": {"version": 1.0},
    }
    return _yaml(spec) + "\n"


def group_yaml(group: str, tasks: Sequence[str]) -> str:
    """A group YAML over `tasks` (tasks or groups) that reports acc and acc_norm over all their questions."""
    aggregate = [{"metric": m, "aggregation": "mean", "weight_by_size": True} for m in METRICS]
    return _yaml({"group": group, "task": list(tasks), "aggregate_metric_list": aggregate,
                  "metadata": {"version": 1.0}}) + "\n"


def write_harness(out: str | Path, questions: Sequence[Question]) -> list[Path]:
    """Write data and task files under `out` (per cell, per formulation, one top group); return the YAML paths."""
    out = Path(out)
    written: list[Path] = []
    tasks_by_form: dict[str, list[str]] = {}
    for (formulation, hops), cell in by_cell(questions).items():
        data_file = out / f"{formulation}-h{hops}.jsonl"
        write_questions(data_file, cell)
        yaml_file = out / f"{task_name(formulation, hops)}.yaml"
        _write(yaml_file, task_yaml(formulation, hops, data_file))
        written.append(yaml_file)
        tasks_by_form.setdefault(formulation, []).append(task_name(formulation, hops))
    for formulation, tasks in tasks_by_form.items():
        group_file = out / f"{task_name(formulation)}.yaml"
        _write(group_file, group_yaml(task_name(formulation), tasks))
        written.append(group_file)
    top = out / f"{GROUP}.yaml"
    _write(top, group_yaml(GROUP, [task_name(f) for f in tasks_by_form]))
    written.append(top)
    return written


def _write(path: Path, text: str) -> None:
    """Write `text` to `path` as UTF-8, atomically (`headway.files.atomic`)."""
    with atomic(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
