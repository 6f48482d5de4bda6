"""Structure-aware fuzzing of every kind of file headway reads back (issue 36).

Each file is forged from what headway expects there with one thing changed — a column renamed, retyped, dropped or
added; a tensor renamed, reshaped, retyped, dropped or added; a counter of the wrong type or out of range; a config
of another shape; JSON nested deep or holding a huge number — and its checksum recomputed, so that only the check
against headway's own expectations can catch it; then each file is damaged byte by byte. Every read must refuse
the file with one ConfigError line naming it, or return exactly what the intact file holds: never other numbers,
never another exception. Derandomised and bounded (hypothesis), on one tiny trained ensemble shared by the module.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from conftest import TINY
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headway.cli.main import main
from headway.errors import ConfigError
from headway.limits import MAX_JSON_DEPTH, MAX_JSON_NUMBER, MAX_SAFETENSORS_HEADER, MAX_STEPS
from headway.recipe import LOSSES
from headway.runs import layout
from headway.runs.checkpoints import (TensorSpec, checkpoint_steps, load_checkpoint, load_resume_state, read_tensors,
                                      save_tensors, tensor_spec, weights_spec)
from headway.runs.metrics import metrics_schema, read_metrics
from headway.runs.schema import FAMILY, KINDS, TableSchema, table_digest
from headway.runs.store import load_metrics, load_model, load_runs, load_summary
from headway.studies.modular.schema import SCHEMAS as MODULAR
from headway.studies.retrieval.schema import SCHEMAS as RETRIEVAL
from headway.studies.sorting.schema import SCHEMAS as SORTING
from headway.train.trainer import EnsembleTrainer

FUZZ = settings(max_examples=30, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])
TRAIN = ["train", *[f"--{key.replace('_', '-')}={value}" for key, value in TINY.items()], "--seed", "0,1",
         "--no-progress", "--device", "cpu"]
ANALYSIS = {f"{study}:{name}": schema for study, schemas in (("retrieval", RETRIEVAL), ("sorting", SORTING),
                                                              ("modular", MODULAR)) for name, schema in schemas.items()}


@dataclass
class Trained:
    """One finished tiny ensemble and what headway expects of its files."""

    out: Path
    run_dir: Path
    runs: list
    weights: dict[str, TensorSpec]  # a checkpoint's tensors
    trainer: dict[str, TensorSpec]  # a resume state's trainer tensors
    step: int  # of the latest resume state
    last: int  # the last checkpoint

    @property
    def resume(self) -> Path:
        return layout.resume_dir(self.run_dir, self.step)

    def load_resume(self) -> Any:
        return load_resume_state(self.run_dir, self.runs, self.weights, self.trainer)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Trained:
    out = tmp_path_factory.mktemp("fuzz")
    assert main([*TRAIN, "--out", str(out)]) == 0
    (run_dir,) = layout.ensemble_dirs(out)
    runs = load_runs(run_dir)
    _, model, optim, state = EnsembleTrainer(runs, run_dir, progress=False).setup()
    step = layout.read_json(run_dir / layout.RESUME / layout.LATEST)["step"]
    return Trained(out, run_dir, runs, weights_spec(model, len(runs)),
                   tensor_spec({**optim.state_tensors(), **state.tensors()}), step, checkpoint_steps(run_dir)[-1])


@contextlib.contextmanager
def replaced(path: Path, data: bytes | None = None) -> Iterator[Path]:
    """`path` holding `data` (or what the block writes there) inside the block, its own bytes again after it."""
    original = path.read_bytes()
    if data is not None:
        path.write_bytes(data)
    try:
        yield path
    finally:
        path.write_bytes(original)


def refused(read: Callable[[], Any], path: Path, why: str = "") -> str:
    """The one-line ConfigError `read` raises, naming `path` (and matching `why`)."""
    with pytest.raises(ConfigError) as caught:
        read()
    message = str(caught.value)
    assert str(path) in message and "\n" not in message and why in message, message
    return message


def same(a: Any, b: Any) -> bool:
    """Equal values: frames (with their columns and dtypes), tensors, and containers of them."""
    if isinstance(a, pd.DataFrame):
        return isinstance(b, pd.DataFrame) and a.equals(b) and list(a.columns) == list(b.columns) and a.dtypes.equals(
            b.dtypes)
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return isinstance(b, list | tuple) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b or (a != a and b != b)  # NaN


def refused_or_same(read: Callable[[], Any], expected: Any, path: Path) -> bool:
    """True when `read` refuses `path` with one line naming it; else what it returns must equal `expected`."""
    try:
        got = read()
    except ConfigError as err:
        assert str(path) in str(err) and "\n" not in str(err), str(err)
        return True
    assert same(got, expected), f"{path} was read as other contents"
    return False


# --- Parquet -------------------------------------------------------------------------------------------------


def as_written(frame: pd.DataFrame, schema: TableSchema) -> str:
    """The digest of `frame` as headway writes it (`table_digest` of the conformed table): equal for equal
    contents, NaN included."""
    return table_digest(schema.conform(pa.Table.from_pandas(frame, preserve_index=False)))


def forge_table(path: Path, table: pa.Table) -> None:
    """Write `table` as headway writes a table (page checksums, its content digest) but with no check of its
    columns: only the reader's check against what headway expects can refuse it."""
    pq.write_table(table.replace_schema_metadata({layout.DIGEST_KEY: table_digest(table)}), path,
                   write_page_checksum=True)


def values(kind: str, rows: int) -> st.SearchStrategy[pa.Array]:
    """A column of `rows` values of a kind (`headway.runs.schema.KINDS`)."""
    floats = st.floats(allow_nan=True, allow_infinity=True, width=64)
    element = {"int": st.integers(-2**40, 2**40), "float": floats, "bool": st.booleans(),
               "str": st.text(max_size=6), "list<float>": st.lists(floats, max_size=3),
               "list<list<float>>": st.lists(st.lists(floats, max_size=2), max_size=2)}[kind]
    types = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "str": pa.large_string(),
             "list<float>": pa.list_(pa.float64()), "list<list<float>>": pa.list_(pa.list_(pa.float64()))}
    return st.lists(element, min_size=rows, max_size=rows).map(lambda items: pa.array(items, types[kind]))


@st.composite
def valid_table(draw, schema: TableSchema) -> pa.Table:
    """A table of `schema`: 1-4 rows, every declared column (an optional one or not, 1-3 of a family)."""
    rows = draw(st.integers(1, 4))
    columns = {}
    for name, kind in schema.columns:
        if name in schema.optional and not draw(st.booleans()):
            continue
        names = [name.replace(FAMILY, str(i)) for i in range(1, draw(st.integers(1, 3)) + 1)] if FAMILY in name \
            else [name]
        for each in names:
            columns[each] = draw(values(kind, rows))
    return pa.table(columns)


@st.composite
def one_change(draw, table: pa.Table, schema: TableSchema) -> tuple[str, pa.Table]:
    """(what changed, `table` with one column renamed to a name `schema` does not declare, retyped to another
    kind, dropped (one the schema requires) or added)."""
    names = table.column_names
    required = [n for n in names if schema.declared(n)[0] == n and n not in schema.optional]
    how = draw(st.sampled_from(["rename", "retype", "drop", "add"] if required else ["rename", "retype", "add"]))
    undeclared = st.text(min_size=1, max_size=10).filter(lambda n: schema.declared(n) is None and n not in names)
    if how == "drop":
        name = draw(st.sampled_from(required))
        return f"{name} dropped", table.drop_columns([name])
    if how == "add":
        name = draw(undeclared)
        return f"{name} added", table.append_column(name, draw(values(draw(st.sampled_from(KINDS)), table.num_rows)))
    index = draw(st.integers(0, len(names) - 1))
    if how == "rename":
        new = draw(undeclared)
        return f"{names[index]} renamed {new}", table.rename_columns([*names[:index], new, *names[index + 1:]])
    kind = schema.declared(names[index])[1]
    other = draw(st.sampled_from([k for k in KINDS if k != kind]))
    return f"{names[index]} as {other}", table.set_column(index, names[index], draw(values(other, table.num_rows)))


@FUZZ
@given(st.data())
def test_a_metrics_table_with_one_column_changed_is_refused(trained, data):
    path = trained.run_dir / layout.METRICS
    table = pq.read_table(path)
    what, forged = data.draw(one_change(table, metrics_schema(trained.runs)))
    with replaced(path):
        forge_table(path, forged)
        refused(lambda: read_metrics(path, trained.runs), path, "not the table headway writes there")
        refused(lambda: load_metrics(trained.out), path)


def _rows_changed(frame: pd.DataFrame, how: str, runs: list, draw) -> pd.DataFrame:
    """`frame` (metrics) with one row's counters changed, one row dropped or one repeated."""
    row = draw(st.integers(0, len(frame) - 1))
    frame = frame.copy()
    if how == "drop":
        return frame.drop(index=row).reset_index(drop=True)
    if how == "repeat":
        return pd.concat([frame, frame.iloc[[row]]], ignore_index=True)
    if how == "run_id":
        frame.loc[row, "run_id"] = draw(st.text(max_size=12).filter(lambda t: t not in [r.run_id for r in runs]))
    elif how == "instance":
        frame.loc[row, "instance"] = draw(st.integers(-5, 10).filter(lambda i: i != frame.instance[row]))
    else:  # step: another one, logged or not
        frame.loc[row, "step"] = draw(st.integers(-100, 1000).filter(lambda s: s != frame.step[row]))
    return frame


@FUZZ
@given(st.data())
def test_a_metrics_table_with_a_row_changed_is_refused(trained, data):
    """Columns as headway writes them, a row's step, instance or run id changed, a row dropped or repeated: the
    rows the runs log are checked, not only the columns."""
    how = data.draw(st.sampled_from(["drop", "repeat", "run_id", "instance", "step"]))
    for path, upto in ((trained.run_dir / layout.METRICS, None), (trained.resume / "metrics.parquet", trained.step)):
        frame = _rows_changed(pq.read_table(path).to_pandas(), how, trained.runs, data.draw)
        with replaced(path):
            forge_table(path, pa.Table.from_pandas(frame, preserve_index=False))
            refused(lambda: read_metrics(path, trained.runs, upto), path)


@pytest.mark.parametrize("column, value", [("val_accuracy", 7.5), ("val_accuracy", -0.1), ("train_loss", -1.0),
                                           ("val_loss", -math.inf), ("grad_norm", -2.0)])
def test_a_metrics_table_with_a_value_no_trainer_logs_is_refused(trained, column, value):
    """Columns and rows as headway writes them, one value out of its range (an accuracy above 1, a negative loss),
    checksummed again: refused, naming the column, instead of read as a run that learned; NaN (a diverged run's)
    stays readable."""
    for path, upto in ((trained.run_dir / layout.METRICS, None), (trained.resume / "metrics.parquet", trained.step)):
        frame = pq.read_table(path).to_pandas()
        with replaced(path):
            frame.loc[0, column] = value
            forge_table(path, pa.Table.from_pandas(frame, preserve_index=False))
            refused(lambda: read_metrics(path, trained.runs, upto), path, f"{column} = {value!r}, outside")
            frame.loc[0, column] = math.nan
            forge_table(path, pa.Table.from_pandas(frame, preserve_index=False))
            assert math.isnan(read_metrics(path, trained.runs, upto)[column][0])


@FUZZ
@given(name=st.sampled_from(sorted(ANALYSIS)), data=st.data())
def test_an_analysis_table_reads_back_as_written_and_with_one_column_changed_is_refused(name, data, tmp_path_factory):
    """Every analysis table of every study: a table generated from its declared schema reads back exactly; the
    same table with one column changed, its digest recomputed, is refused before it is decoded."""
    schema = ANALYSIS[name]
    folder = tmp_path_factory.getbasetemp() / "analysis"
    folder.mkdir(exist_ok=True)
    path = folder / "table.parquet"
    frame = data.draw(valid_table(schema)).to_pandas()
    layout.write_table(path, frame, schema)
    assert as_written(layout.read_table(path, schema), schema) == as_written(frame, schema)
    what, forged = data.draw(one_change(pq.read_table(path), schema))
    forge_table(path, forged)
    refused(lambda: layout.read_table(path, schema), path, "not the table headway writes there")


def test_a_table_too_large_is_refused_from_its_footer_before_anything_is_decoded(trained, tmp_path, monkeypatch):
    """A valid Parquet of 10^8 null rows (under a megabyte, its digest recomputed) in place of metrics.parquet, a
    metrics table of more rows than its runs log, and a table whose decoded size is over the bound: each refused
    in well under the time decoding takes."""
    path = trained.run_dir / layout.METRICS
    with replaced(path):
        forge_table(path, pa.table({"step": pa.nulls(10**8)}))
        started = time.perf_counter()
        refused(lambda: read_metrics(path, trained.runs), path, "not the table headway writes there")
        assert time.perf_counter() - started < 1.0
    schema = metrics_schema(trained.runs)
    frame = pq.read_table(path).to_pandas()
    with replaced(path):
        forge_table(path, pa.Table.from_pandas(pd.concat([frame] * 3, ignore_index=True), preserve_index=False))
        refused(lambda: read_metrics(path, trained.runs), path, f"more than the {len(frame)} its runs log")
    monkeypatch.setattr(layout, "MAX_TABLE_BYTES", 1000)
    layout.write_table(tmp_path / "big.parquet", pd.concat([frame] * 10, ignore_index=True), schema)
    refused(lambda: layout.read_table(tmp_path / "big.parquet", schema), tmp_path / "big.parquet",
            "headway reads at most 1000")


# --- safetensors ----------------------------------------------------------------------------------------------


@st.composite
def tensor_change(draw, tensors: dict[str, torch.Tensor]) -> tuple[str, dict[str, torch.Tensor]]:
    """(what changed, `tensors` with one renamed, reshaped, retyped, dropped or added)."""
    name = draw(st.sampled_from(sorted(tensors)))
    out = dict(tensors)
    how = draw(st.sampled_from(["rename", "reshape", "retype", "drop", "add"]))
    new_name = st.text(min_size=1, max_size=12).filter(lambda n: n not in tensors and n != "__metadata__")
    if how == "rename":
        out[draw(new_name)] = out.pop(name)
    elif how == "drop":
        del out[name]
    elif how == "add":
        out[draw(new_name)] = torch.zeros(draw(st.lists(st.integers(0, 3), max_size=3)))
    elif how == "retype":
        dtype = draw(st.sampled_from([d for d in (torch.float64, torch.float16, torch.bfloat16, torch.int64,
                                                  torch.int32, torch.bool, torch.uint8) if d != out[name].dtype]))
        out[name] = out[name].to(dtype)
    else:
        shape = list(out[name].shape)
        change = draw(st.sampled_from(["grow", "add axis", "drop axis"] if shape else ["add axis"]))
        if change == "grow":
            axis = draw(st.integers(0, len(shape) - 1))
            shape[axis] = max(0, shape[axis] + draw(st.sampled_from([-1, 1, 2])))
        elif change == "add axis":
            shape.insert(draw(st.integers(0, len(shape))), draw(st.integers(1, 2)))
        else:
            shape.pop(draw(st.integers(0, len(shape) - 1)))
        if shape == list(out[name].shape):
            shape.append(2)
        out[name] = torch.zeros(shape, dtype=out[name].dtype)
    return f"{name}: {how}", out


@FUZZ
@given(st.data())
def test_a_checkpoint_with_one_tensor_changed_is_refused(trained, data):
    path = layout.checkpoint_path(trained.run_dir, trained.last)
    tensors, metadata = read_tensors(path, trained.weights, ("step",))
    what, forged = data.draw(tensor_change(tensors))
    with replaced(path):
        save_tensors(path, forged, metadata)
        refused(lambda: load_model(trained.run_dir), path, "its runs' config makes it" if "reshape" in what
                or "retype" in what else "")


@FUZZ
@given(step=st.one_of(st.text(max_size=8), st.integers(-10, 10**9).map(str)), where=st.sampled_from(["value", "key"]))
def test_a_checkpoint_whose_step_is_another_is_refused(trained, step, where):
    """The step a checkpoint's metadata names must be the one its name says (a renamed checkpoint is refused)."""
    path = layout.checkpoint_path(trained.run_dir, trained.last)
    tensors, _ = read_tensors(path, trained.weights, ("step",))
    metadata = {"step": step} if where == "value" else {step or "x": str(trained.last)}
    before = load_model(trained.run_dir).state_dict()
    with replaced(path):
        save_tensors(path, tensors, metadata)
        if metadata == {"step": str(trained.last)}:  # what headway wrote: read as it was
            assert same(load_model(trained.run_dir).state_dict(), before)
        else:
            refused(lambda: load_model(trained.run_dir), path)


@FUZZ
@given(name=st.sampled_from(["weights.safetensors", "trainer.safetensors"]), data=st.data())
def test_a_resume_state_with_one_tensor_changed_is_refused(trained, name, data):
    path = trained.resume / name
    expected = trained.weights if name == "weights.safetensors" else trained.trainer
    keys = ("counters",) if name == "trainer.safetensors" else ()
    tensors, metadata = read_tensors(path, expected, keys)
    what, forged = data.draw(tensor_change(tensors))
    with replaced(path):
        save_tensors(path, forged, metadata)
        refused(trained.load_resume, path)


def _bad_counter(step: int) -> st.SearchStrategy[Any]:
    """Anything but the integer `step`: text, floats (60.0 included), booleans, null, lists, other integers."""
    return st.one_of(st.text(max_size=5), st.floats(), st.just(float(step)), st.booleans(), st.none(),
                     st.lists(st.integers(), max_size=2), st.integers(-2**70, 2**70).filter(lambda v: v != step))


@FUZZ
@given(st.data())
def test_resume_counters_of_the_wrong_type_or_range_are_refused(trained, data):
    """The counters in a resume state's trainer file: each must be the integer step it was saved at ("step":
    "abc" was accepted before)."""
    path = trained.resume / "trainer.safetensors"
    tensors, metadata = read_tensors(path, trained.trainer, ("counters",))
    counters = json.loads(metadata["counters"])
    how = data.draw(st.sampled_from(["step", "optimizer_steps", "missing", "extra", "not an object"]))
    if how in counters:
        counters[how] = data.draw(_bad_counter(trained.step))
    elif how == "missing":
        del counters[data.draw(st.sampled_from(sorted(counters)))]
    elif how == "extra":
        counters[data.draw(st.text(max_size=6).filter(lambda k: k not in counters))] = trained.step
    else:
        counters = data.draw(st.one_of(st.lists(st.integers(), max_size=2), st.integers(), st.text(max_size=4)))
    with replaced(path):
        save_tensors(path, tensors, {"counters": json.dumps(counters)})
        refused(trained.load_resume, path, "counters")


@FUZZ
@given(st.data())
def test_a_resume_pointer_naming_another_step_or_folder_is_refused(trained, data):
    path = trained.run_dir / layout.RESUME / layout.LATEST
    step, folder = trained.step, trained.resume.name
    how = data.draw(st.sampled_from(["step", "dir", "both", "extra"]))
    latest: dict[str, Any] = {"step": step, "dir": folder}
    if how in ("step", "both"):
        latest["step"] = data.draw(_bad_counter(step))
    if how in ("dir", "both"):
        latest["dir"] = data.draw(st.one_of(st.text(max_size=20), st.sampled_from(["..", "../..", f"{folder}/..",
                                                                                      f"step_{step}", "/etc"])))
    if how == "extra":
        latest["more"] = 1
    if how == "both" and isinstance(latest["step"], int) and not isinstance(latest["step"], bool) \
            and 0 <= latest["step"] <= trained.runs[0].train.steps:
        latest["dir"] = layout.resume_dir(trained.run_dir, latest["step"]).name  # consistent, but not there
    before = trained.load_resume()
    with replaced(path):
        layout.write_json(path, latest)
        if json.dumps(latest) == json.dumps({"step": step, "dir": folder}):  # as headway wrote it (60.0 is not 60)
            assert same(trained.load_resume(), before)
        else:
            refused(trained.load_resume, path.parent)  # the pointer, or the folder it names, which is not there


def test_a_safetensors_header_is_bounded_before_it_is_read(trained):
    path = layout.checkpoint_path(trained.run_dir, trained.last)
    original = path.read_bytes()
    for length in (MAX_SAFETENSORS_HEADER + 1, 2**63, len(original)):
        with replaced(path, length.to_bytes(8, "little") + original[8:]):
            refused(lambda: load_model(trained.run_dir), path, "header length")


# --- config.json and other JSON -------------------------------------------------------------------------------


def _wrong_value() -> st.SearchStrategy[Any]:
    """A JSON value of any kind: text, numbers (huge ones too), booleans, null, lists, objects."""
    return st.one_of(st.text(max_size=6), st.integers(-2**70, 2**70), st.floats(allow_nan=False), st.booleans(),
                     st.none(), st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3),
                                                                                      st.integers(), max_size=2))


@FUZZ
@given(st.data())
def test_a_config_edited_and_rechecksummed_is_refused_or_reads_the_same_numbers(trained, data):
    """One setting of one run set to any value (another shape, another kind) and the checksum recomputed: the
    runs, their weights, summary and metrics are refused, naming a file, or read exactly as before."""
    path = trained.run_dir / layout.CONFIG
    stored = layout.read_json(path)
    before = (load_model(trained.run_dir).state_dict(), load_summary(trained.run_dir), load_metrics(trained.run_dir))
    instance = data.draw(st.integers(0, len(stored["runs"]) - 1))
    key = data.draw(st.sampled_from(sorted(stored["runs"][instance])))
    shapes = {"layers": [2], "heads": [1, 4], "d_model": [8, 32], "vocab": [10, 14], "hops": [2], "chains": [3]}
    value = data.draw(st.one_of(_wrong_value(), st.sampled_from(shapes.get(key, [None]))))
    stored["runs"][instance][key] = value
    with replaced(path):
        layout.write_json(path, stored)
        readers = [lambda: load_model(trained.run_dir).state_dict(), lambda: load_summary(trained.run_dir),
                   lambda: load_metrics(trained.run_dir)]
        for read, expected in zip(readers, before):
            refused_or_same(read, expected, trained.run_dir)


def _bounded(path: Path, how: str, size: int) -> str:
    """The JSON text of `path` with its first value replaced by one beyond headway's bounds."""
    text = path.read_text()
    key = next(iter(json.loads(text)))
    bad = {"deep": "[" * size + "]" * size, "long int": "7" * size, "long float": "1." + "5" * size,
           "overflow": "1e400"}[how]
    return text.replace(json.dumps(key) + ": ", json.dumps(key) + ": " + bad + ", \"_was\": ", 1)


@settings(max_examples=12, derandomize=True, deadline=None, database=None)
@given(name=st.sampled_from([layout.CONFIG, layout.SUMMARY, f"{layout.RESUME}/{layout.LATEST}"]),
       how=st.sampled_from(["deep", "long int", "long float", "overflow"]),
       size=st.sampled_from([MAX_JSON_DEPTH + 1, 100_000, MAX_JSON_NUMBER + 1, 100_001]))
def test_json_nested_deep_or_with_huge_numbers_is_refused_before_it_is_parsed(trained, name, how, size):
    path = trained.run_dir / name
    if how == "deep" and size <= MAX_JSON_DEPTH:
        size = MAX_JSON_DEPTH + 1
    with replaced(path, _bounded(path, how, size).encode()):
        why = {"deep": "nests", "long int": "a number of", "long float": "a number of", "overflow": "1e400"}[how]
        if how in ("long int", "long float") and size <= MAX_JSON_NUMBER:
            why = "checksum"  # within the bound: parsed, then refused by the checksum
        refused(lambda: layout.read_json(path), path, why)


# --- checkpoint names -----------------------------------------------------------------------------------------


@FUZZ
@given(middle=st.one_of(st.text(min_size=0, max_size=8), st.integers(0, 10**9).map(lambda s: f"{s:06d}"),
                        st.integers(0, 10**5).map(lambda s: f"0{s:07d}"),
                        st.sampled_from(["abc", "-0000030", " 0000030", "0000030 ", "+000030"])))
def test_a_stray_file_named_like_a_checkpoint_is_refused_naming_it(trained, middle):
    path = trained.run_dir / layout.CHECKPOINTS / f"step_{middle}.safetensors"
    if "/" in middle or "\x00" in middle or path.exists() or middle in (".", ".."):
        return
    canonical = middle.isascii() and middle.isdigit() and len(middle) >= 7 and f"{int(middle):07d}" == middle
    path.write_bytes(b"not a checkpoint")
    try:
        if canonical:
            refused(lambda: load_model(trained.run_dir, step=int(middle)), path)  # a checkpoint, damaged
        else:
            refused(lambda: checkpoint_steps(trained.run_dir), path, "is not a checkpoint headway writes")
            refused(lambda: load_model(trained.run_dir), path)
    finally:
        path.unlink()
    (trained.run_dir / layout.CHECKPOINTS / "step_0000030.safetensors.tmp").write_bytes(b"a killed write")
    (trained.run_dir / layout.CHECKPOINTS / "notes.txt").write_text("not named like a checkpoint: left alone")
    try:
        assert checkpoint_steps(trained.run_dir)[-1] == trained.last
    finally:
        (trained.run_dir / layout.CHECKPOINTS / "step_0000030.safetensors.tmp").unlink()
        (trained.run_dir / layout.CHECKPOINTS / "notes.txt").unlink()


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory) -> Path:
    """The trained ensemble's first run written as a TransformerLens export (`headway export tl`)."""
    pytest.importorskip("transformer_lens", reason="TransformerLens 4.x is a test extra (pip install 'headway[tl]')")
    out = tmp_path_factory.mktemp("export") / "tl"
    assert main(["export", "tl", str(trained.run_dir), "--out", str(out)]) == 0
    return out


@settings(max_examples=12, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_an_export_with_one_entry_changed_is_refused(exported, data):
    """headway.json, the TransformerLens config or the weights of an export with one entry changed (another kind,
    another size; a tensor renamed, reshaped, retyped, dropped or added), the checksums headway.json holds of the
    other two recomputed: `load_export` refuses the file with one line. Values of the right kind that change no
    shape (the attention direction, the step or run id it names) cannot be told from an export of such a run and
    are left out (docs/cli.md#integrity)."""
    from safetensors.torch import load, save

    from headway.export.transformer_lens import CONFIG_FILE, HEADWAY_FILE, WEIGHTS_FILE, load_export

    meta = layout.read_json(exported / HEADWAY_FILE)
    config = json.loads((exported / CONFIG_FILE).read_text())
    weights = load((exported / WEIGHTS_FILE).read_bytes())
    which = data.draw(st.sampled_from([HEADWAY_FILE, CONFIG_FILE, WEIGHTS_FILE]))
    if which == HEADWAY_FILE:  # an entry of another kind, or out of its range
        other = st.one_of(st.text(max_size=4), st.floats(), st.booleans(), st.none(),
                          st.lists(st.integers(), max_size=2))
        wrong = {"run_id": st.one_of(st.integers(), st.floats(), st.booleans(), st.none()),
                 "step": st.one_of(other, st.integers(max_value=-1), st.integers(min_value=MAX_STEPS + 1)),
                 "loss": st.one_of(other, st.integers()).filter(lambda v: v not in LOSSES),
                 "readout_positions": st.one_of(other, st.integers(max_value=0)),
                 "d_out": st.one_of(other, st.integers(max_value=0), st.integers(config["d_vocab_out"] + 1, 2**40)),
                 "token_map": st.one_of(other, st.integers(), st.integers(0, 10**6).map(
                     lambda v: {**meta["token_map"], "slot_vocab": v}).filter(lambda m: m != meta["token_map"]))}
        key = data.draw(st.sampled_from(sorted(wrong)))
        meta[key] = data.draw(wrong[key])
    elif which == CONFIG_FILE:
        key = data.draw(st.sampled_from(sorted(set(config) - {"attention_dir"})))
        sizes = st.integers(1, 64) if isinstance(config[key], int) and not isinstance(config[key], bool) else \
            st.nothing()
        config[key] = data.draw(st.one_of(_wrong_value(), sizes).filter(lambda v: json.dumps(v) != json.dumps(
            config[key])))
    else:
        weights = data.draw(tensor_change(weights))[1]
    paths = [exported / name for name in (HEADWAY_FILE, CONFIG_FILE, WEIGHTS_FILE)]
    with contextlib.ExitStack() as stack:
        for path in paths:
            stack.enter_context(replaced(path))
        meta["checksums"] = {CONFIG_FILE: layout.write_text(exported / CONFIG_FILE, json.dumps(config)),
                             WEIGHTS_FILE: layout.write_bytes(exported / WEIGHTS_FILE, save(weights))}
        layout.write_json(exported / HEADWAY_FILE, meta)
        refused(lambda: load_export(exported), exported)  # the file changed, or the one it no longer fits


# --- byte damage ----------------------------------------------------------------------------------------------


def _readers(trained: Trained) -> dict[str, Callable[[], Any]]:
    """Each file of the run, by path below it, with what reads it back as headway does."""
    runs, last = trained.runs, trained.last
    resume = trained.resume.relative_to(trained.run_dir)
    one = load_model(trained.run_dir, instances=0)
    return {
        layout.CONFIG: lambda: [run.stored() for run in load_runs(trained.run_dir)],
        layout.SUMMARY: lambda: load_summary(trained.run_dir),
        layout.METRICS: lambda: read_metrics(trained.run_dir / layout.METRICS, runs),
        str(layout.checkpoint_path(Path(), last)): lambda: load_checkpoint(trained.run_dir, last, runs, one),
        f"{layout.RESUME}/{layout.LATEST}": trained.load_resume,
        **{str(resume / name): trained.load_resume for name in ("weights.safetensors", "trainer.safetensors",
                                                                 "metrics.parquet")},
    }


def test_every_file_damaged_byte_by_byte_is_refused_or_read_exactly(trained):
    """One byte of each file XORed with a mask, at positions spread over the whole file (derandomised): refused
    with one line naming it, or read exactly as the intact file."""
    readers = _readers(trained)
    expected = {name: read() for name, read in readers.items()}
    tally = {"refused": 0, "same": 0}

    @settings(max_examples=60, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(st.sampled_from(sorted(readers)), st.floats(0, 1, exclude_max=True), st.integers(1, 255))
    def check(name: str, where: float, mask: int) -> None:
        path = trained.run_dir / name
        data = bytearray(path.read_bytes())
        data[int(where * len(data))] ^= mask
        with replaced(path, bytes(data)):
            tally["refused" if refused_or_same(readers[name], expected[name], path) else "same"] += 1

    check()
    assert tally["refused"] > tally["same"] > 0, tally


# --- the commands ---------------------------------------------------------------------------------------------


def _reshaped_config(trained: Trained) -> bytes:
    stored = layout.read_json(trained.run_dir / layout.CONFIG)
    for run in stored["runs"]:
        run["d_model"] = 32
    return json.dumps({**stored, layout.DIGEST_KEY: layout._json_digest(stored)}).encode()


# Each command with each forged file it reads (show reads no checkpoint, export tl no resume state, train neither
# the names of the checkpoints).
COMMAND_CASES = [(command, forgery) for command in ("show", "train", "export tl")
                 for forgery in ("deep config", "huge number", "reshaped config")]
COMMAND_CASES += [("train", "counters"), ("export tl", "stray checkpoint")]


@pytest.mark.parametrize("command, forgery", COMMAND_CASES)
def test_commands_refuse_a_forged_file_with_one_line(trained, forgery, command, capsys, tmp_path):
    """Exit status 2 and one line naming a file of the run: never a traceback (24 of them before, for a config
    of another shape re-checksummed), never a result."""
    config = trained.run_dir / layout.CONFIG
    files = {"deep config": (config, _bounded(config, "deep", 100_000).encode()),
             "huge number": (config, _bounded(config, "long int", 100_001).encode()),
             "reshaped config": (config, _reshaped_config(trained)),
             "stray checkpoint": (trained.run_dir / layout.CHECKPOINTS / "step_abc.safetensors", b"stray"),
             "counters": (trained.resume / "trainer.safetensors", None)}
    path, data = files[forgery]
    argv = {"show": ["show", str(trained.out)], "train": [*TRAIN, "--out", str(trained.out)],
            "export tl": ["export", "tl", str(trained.run_dir), "--out", str(tmp_path / "tl")]}[command]
    summary = trained.run_dir / layout.SUMMARY
    with contextlib.ExitStack() as stack:
        if not path.exists():
            path.write_bytes(b"")
            stack.callback(path.unlink)
        stack.enter_context(replaced(path, data))
        if forgery == "counters":
            tensors, _ = read_tensors(path, trained.trainer, ("counters",))
            save_tensors(path, tensors, {"counters": json.dumps({"step": "abc", "optimizer_steps": trained.step})})
            stack.enter_context(replaced(summary))
            summary.unlink()  # so that train resumes
        status = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("headway: error:")]  # after "N run(s) → OUT", for train
    named = str(trained.run_dir) if forgery == "reshaped config" else str(path)  # its summary, or its weights
    assert status == 2 and len(errors) == 1 and named in errors[0] and not any("Traceback" in e for e in err), err
