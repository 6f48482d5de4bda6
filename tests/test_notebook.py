"""What a notebook hands headway: values out of pandas rows (numpy scalars), and runs named by run_id."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import tiny_run

import headway
from headway.errors import ConfigError
from headway.runs.config import RunConfig
from headway.runs.store import final_metrics, find_run, load_metrics, load_model, load_single
from headway.settings import check_bool, check_int
from headway.tasks.retrieval.positions import statement_rows
from headway.train.sweep import train_runs


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Two ensembles (1 and 2 layers, LayerNorm on and off) of two seeds each."""
    out = tmp_path_factory.mktemp("sweep")
    runs = [tiny_run(layers=layers, seed=seed, layernorm=layers == 1) for layers in (1, 2) for seed in (0, 1)]
    train_runs(runs, out, device="cpu", progress=False)
    return out


def test_a_dataframe_row_rebuilds_its_run(sweep):
    final = final_metrics(load_metrics(sweep))
    keys = list(RunConfig().flat())
    assert final[keys].notna().all().all(), "a config column holds None"
    assert (final.d_head == final.d_model // final.heads).all() and (final.d_mlp == 4 * final.d_model).all()
    assert len(final.groupby(keys).size()) == len(final)  # no row dropped for a missing key
    for i in range(len(final)):
        values = {key: final[key].iloc[i] for key in keys}  # a column's values come back as numpy scalars
        assert isinstance(values["layernorm"], np.bool_) and isinstance(values["layers"], np.integer)
        assert RunConfig.from_flat(values).run_id == final.run_id.iloc[i]


def test_a_default_width_written_out_is_the_same_run():
    implicit, explicit = tiny_run(), tiny_run(d_head=tiny_run().model.d_model // tiny_run().model.heads)
    assert explicit.run_id == implicit.run_id and explicit.stored()["d_head"] is None
    assert tiny_run(d_mlp=0).stored()["d_mlp"] == 0 and tiny_run(d_mlp=0).run_id != implicit.run_id
    odd = tiny_run(d_model=30, heads=4, d_head=7)  # heads do not divide d_model: no default to match
    assert odd.model.d_head == 7 and odd.stored()["d_head"] == 7
    with pytest.raises(ConfigError, match="d_model = 30 is not divisible by heads = 4"):
        tiny_run(d_model=30, heads=4)


def test_a_model_loads_by_run_id_from_the_sweep_or_by_a_numpy_instance(sweep):
    final = final_metrics(load_metrics(sweep))
    tokens = torch.randint(0, 12, (1, 8, 3))
    for i in range(len(final)):
        instance, run_id, ensemble = final.instance.iloc[i], final.run_id.iloc[i], final.ensemble.iloc[i]
        assert isinstance(instance, np.integer)
        by_row = load_model(sweep / ensemble, instances=instance)
        by_id = load_model(sweep, run_id=run_id)
        assert by_id.n_instances == 1 and by_row.cfg == by_id.cfg
        assert torch.equal(by_row(tokens), by_id(tokens))
        assert find_run(sweep, run_id) == (sweep / ensemble, instance)
    two = load_model(sweep / final.ensemble.iloc[0], instances=np.array([1, 0]))
    assert two.n_instances == 2


def test_a_loaded_packed_model_refuses_tokens_without_their_slots(sweep):
    """A run of the packed layout (two token slots per position) loaded as one model takes its task's tokens, refuses
    TransformerLens' [batch, pos] and an unbatched [pos, slots] prompt, and `to_tokens` rebuilds the task's tokens
    from the symbols of each slot."""
    run_id = final_metrics(load_metrics(sweep)).run_id.iloc[0]
    model = load_single(sweep, run_id=run_id)
    val = model.run.validation_data()
    assert model.n_slots == 2 and val.tokens.shape[-1] == 2
    assert torch.equal(model.to_tokens(statement_rows(model.run.task, val.tokens.numpy())), val.tokens)
    ensemble, instance = find_run(sweep, run_id)
    torch.testing.assert_close(model(val.tokens[:8], readout="last"),
                               load_model(ensemble, instances=instance)(val.tokens[None, :8])[0], atol=1e-6, rtol=0)
    bare = load_model(ensemble).instance(instance)  # an instance taken from a loaded ensemble knows its slots too
    assert bare.n_slots == 2
    for bad in (val.tokens[:8, :, 0], val.tokens[0]):
        for one in (model, bare):
            with pytest.raises(ConfigError, match=r"do not fit this model: it sums 2 token slots per position and "
                                                  r"takes \[batch, pos, 2\]"):
                one.run_with_cache(bad)


def test_bad_run_ids_and_instances_are_named(sweep):
    with pytest.raises(ConfigError, match="run_id 'feedfacecafe' is not in .*; `headway show"):
        load_model(sweep, run_id="feedfacecafe")
    run_id = final_metrics(load_metrics(sweep)).run_id.iloc[0]
    with pytest.raises(ConfigError, match="give instances or run_id, not both"):
        load_model(sweep, instances=0, run_id=run_id)
    ensemble = find_run(sweep, run_id)[0]
    with pytest.raises(ConfigError, match=r"instance\(s\) \[True\] out of range"):
        load_model(ensemble, instances=[np.True_])
    with pytest.raises(ConfigError, match="instance.s. .5. out of range; this run directory has 2 instances"):
        load_model(ensemble, instances=np.int64(5))


def test_numpy_scalars_pass_the_setting_checks_and_booleans_stay_apart_from_integers():
    assert check_bool("layernorm", np.False_) is False and check_bool("layernorm", np.True_) is True
    assert check_int("layers", np.int32(3)) == 3 and type(check_int("layers", np.int64(3))) is int
    with pytest.raises(ConfigError, match="layers = np.True_ is not an integer|layers = True is not an integer"):
        check_int("layers", np.True_)
    with pytest.raises(ConfigError, match="layernorm = np.int64.1. is not a boolean|layernorm = 1 is not a boolean"):
        check_bool("layernorm", np.int64(1))


def test_the_documented_top_level_names_import():
    for name in ("train_runs", "load_metrics", "load_model", "scale_settings", "RunConfig", "expand_grid",
                 "Study", "register_task", "ConfigError"):
        assert getattr(headway, name) is not None
