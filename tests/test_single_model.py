"""The single-model view: a TransformerLens user's notebook runs on a trained run without the instance axis,
and every number it shows is the ensemble's."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from headway.errors import ConfigError
from headway.model.config import ModelConfig
from headway.model.positions import POSITION_AXIS, position_axis, resolve
from headway.model.single import SingleModel
from headway.model.transformer import EnsembleTransformer

pytestmark = pytest.mark.usefixtures("one_thread")
API = Path(__file__).resolve().parents[1] / "docs" / "api.md"
N_CTX, D_VOCAB, D_OUT = 6, 20, 10


def ensemble(seeds=(0, 1, 2), **changes) -> EnsembleTransformer:
    cfg = ModelConfig(**{"layers": 2, "heads": 2, "d_model": 16, **changes})
    return EnsembleTransformer.from_seeds(cfg, D_VOCAB, N_CTX, D_OUT, list(seeds))


def tokens(batch: int = 5, seed: int = 0) -> torch.Tensor:
    """[batch, pos, 2] packed-style tokens (slot 1 ids offset by 10)."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randint(0, 10, (batch, N_CTX, 2), generator=g)
    return base + torch.tensor([0, 10])


def python_blocks(section: str) -> list[tuple[str, str | None]]:
    """(code, the output block right after it or None) of every python block in one section of api.md (up to the
    next heading of level 1 to 3: its `####` subsections belong to it)."""
    text = API.read_text()
    start = text.index(section)
    body = text[start:re.compile(r"\n#{1,3} ").search(text, start + len(section)).start()]
    found = re.findall(r"```python\n(.*?)```\n(?:```\n(.*?)```)?", body, re.S)
    return [(code, output or None) for code, output in found]


def test_the_documented_notebook_runs_as_written(tmp_path, monkeypatch):
    """docs/api.md's worked example trains a run and looks inside it (every block runs; the shapes it prints are
    the docs'); the TransformerLens-habits section then runs on that run, and prints what the docs show."""
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    for code, expected in python_blocks("## Worked example (notebook)"):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(code, scope)  # noqa: S102 - the documentation's own code
        if expected is not None and "torch.Size" in expected:  # shapes, not the accuracies of a 40-step run
            assert printed.getvalue() == expected
    blocks = python_blocks("### One model, TransformerLens habits")
    assert len(blocks) == 4
    for code, expected in blocks:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(code, scope)  # noqa: S102
        if expected is not None:
            assert printed.getvalue() == expected
    assert scope["attrs"].shape == (6, 64) and scope["names"][-1] == "L1H1"


def test_an_instance_computes_the_ensembles_numbers():
    model = ensemble()
    batch = tokens()
    one = model.instance(2)
    assert one.cfg.n_layers == 2 and one.cfg.d_vocab == D_VOCAB and one.cfg.d_vocab_out == D_OUT
    ours = model(batch.expand(3, -1, -1, -1), readout="all")[2]
    torch.testing.assert_close(one(batch), ours, atol=1e-6, rtol=0)
    assert one(batch, readout="last").shape == (5, D_OUT)
    _, full = model.run_with_cache(batch.expand(3, -1, -1, -1), readout="all")
    _, cache = one.run_with_cache(batch)
    assert set(cache) == set(full)
    for name in full:  # the ensemble keeps one position embedding for the batch; the single view broadcasts it
        torch.testing.assert_close(cache[name], full[name][2].expand_as(cache[name]), atol=1e-6, rtol=0)
    assert torch.equal(one.W_Q, torch.stack([model.blocks[i].attn.W_Q[2] for i in range(2)]))
    assert torch.equal(one.blocks[1].mlp.W_out, model.blocks[1].mlp.W_out[2])
    assert torch.equal(one.state_dict()["unembed.W_U"], one.W_U) and one.W_U.shape == (16, D_OUT)
    with torch.no_grad():
        one.blocks[0].attn.W_Q[0] += 1.0  # a copy: the ensemble keeps its weights
    assert not torch.equal(one.W_Q[0], model.blocks[0].attn.W_Q[2])


def test_cache_keys_follow_transformer_lens():
    one = ensemble().instance(0)
    _, cache = one.run_with_cache(tokens())
    assert cache["pattern", 1] is cache["blocks.1.attn.hook_pattern"]
    assert cache["resid_pre", -1] is cache["blocks.1.hook_resid_pre"]
    assert cache["normalized", 0, "ln2"] is cache["blocks.0.ln2.hook_normalized"]
    assert cache["embed"] is cache["hook_embed"] and cache["z", 0, "attn"].shape == (5, N_CTX, 2, 8)
    with pytest.raises(KeyError, match="ambiguous.*give the layer type"):
        cache["normalized", 0]
    with pytest.raises(KeyError, match="layer = 2 is out of range"):
        cache["pattern", 2]
    _, some = one.run_with_cache(tokens(), names_filter=lambda name: name.endswith("hook_pattern"))
    assert sorted(some) == ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"]
    with pytest.raises(KeyError, match="not in this cache"):
        some["resid_pre", 0]
    single = one.run_with_cache(tokens(1), remove_batch_dim=True)[1]
    assert single["pattern", 0].shape == (2, N_CTX, N_CTX)
    with pytest.raises(ValueError, match="batch of one"):
        cache.remove_batch_dim()


def test_residual_helpers_add_up_to_the_outputs():
    one = ensemble().instance(1)
    logits, cache = one.run_with_cache(tokens())
    final = cache["resid_post", 1]
    parts, labels = cache.decompose_resid(return_labels=True)
    assert labels == ["embed", "pos_embed", "0_attn_out", "0_mlp_out", "1_attn_out", "1_mlp_out"]
    torch.testing.assert_close(parts.sum(0), final, atol=1e-5, rtol=0)
    streams, names = cache.accumulated_resid(return_labels=True, incl_mid=True)
    assert names == ["0_pre", "0_mid", "1_pre", "1_mid", "final_post"]
    lens = cache.accumulated_resid(apply_ln=True) @ one.W_U + one.b_U  # the logit lens: its last row is the output
    torch.testing.assert_close(lens[-1], logits, atol=1e-5, rtol=0)
    heads, head_names = cache.stack_head_results(incl_remainder=True, return_labels=True)
    assert head_names == ["L0H0", "L0H1", "L1H0", "L1H1", "remainder"]
    torch.testing.assert_close(heads.sum(0), final, atol=1e-5, rtol=0)
    attn_0 = cache.stack_head_results(layer=1).sum(0) + one.b_O[0]
    torch.testing.assert_close(attn_0, cache["attn_out", 0], atol=1e-5, rtol=0)
    outputs = torch.tensor([3, 7, 1, 0, 9])
    attrs = cache.logit_attrs(parts, outputs)  # [components, batch, pos]
    constant = one.ensemble.ln_final.b[0] @ one.W_U[:, outputs] + one.b_U[outputs]
    expected = logits[torch.arange(5), :, outputs]
    torch.testing.assert_close(attrs.sum(0) + constant[:, None], expected, atol=1e-5, rtol=0)
    last = cache.decompose_resid(pos_slice=-1)  # the stack and the LayerNorm scale sliced alike
    difference = cache.logit_attrs(last, 3, incorrect_tokens=4, pos_slice=-1)
    torch.testing.assert_close(difference.sum(0), (logits[:, -1, 3] - logits[:, -1, 4]), atol=1e-5, rtol=0)


def test_hooks_by_name_filter_and_kept_hooks():
    one = ensemble().instance(0)
    batch = tokens()
    clean = one(batch)

    def zero_head(z, hook):
        assert hook.name.endswith("attn.hook_z") and hook.layer() in (0, 1)
        z[:, :, 1] = 0.0

    by_filter = one.run_with_hooks(batch, fwd_hooks=[(lambda name: name.endswith("hook_z"), zero_head)])
    by_names = one.run_with_hooks(batch, fwd_hooks=[("blocks.0.attn.hook_z", zero_head),
                                                    ("blocks.1.attn.hook_z", zero_head)])
    assert torch.equal(by_filter, by_names) and not torch.allclose(by_filter, clean)
    torch.testing.assert_close(one(batch), clean, atol=0, rtol=0)  # run_with_hooks leaves no hook behind
    double = one.run_with_hooks(batch, fwd_hooks=[("hook_embed", lambda x, hook: 2 * x)])
    with one.hooks(fwd_hooks=[("hook_embed", lambda x, hook: 2 * x)]):
        torch.testing.assert_close(one(batch), double, atol=0, rtol=0)
    torch.testing.assert_close(one(batch), clean, atol=0, rtol=0)
    one.add_hook("hook_embed", lambda x, hook: 2 * x)
    _, cache = one.run_with_cache(batch, names_filter="hook_embed")  # recorded after the kept hook
    _, plain = ensemble().instance(0).run_with_cache(batch, names_filter="hook_embed")
    torch.testing.assert_close(cache["embed"], 2 * plain["embed"], atol=0, rtol=0)
    one.reset_hooks()
    torch.testing.assert_close(one(batch), clean, atol=0, rtol=0)
    with pytest.raises(KeyError, match="hook_nope"):
        one.run_with_hooks(batch, fwd_hooks=[("blocks.0.hook_nope", zero_head)])


def test_wrong_shapes_say_what_to_do():
    model = ensemble(seeds=(0,))
    with pytest.raises(ValueError, match=r"have 5 on axis 0, the instance axis.*model.instance\(e\)"):
        model(tokens())
    one = model.instance(0)
    with pytest.raises(ConfigError, match=r"takes \[batch, pos\] or \[batch, pos, slots\], with no instance axis"):
        one(tokens()[None])
    with pytest.raises(IndexError, match="instances 0..0"):
        model.instance(1)
    _, cache = model.run_with_cache(tokens()[None], names=lambda name: "pattern" in name)  # ensemble filters too
    assert sorted(cache) == ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"]


def test_attention_only_without_layernorm():
    one = ensemble(d_mlp=0, layernorm=False).instance(0)
    logits, cache = one.run_with_cache(tokens())
    assert one.cfg.attn_only and one.cfg.normalization_type is None
    with pytest.raises(AttributeError, match="attention-only"):
        one.W_in
    parts = cache.decompose_resid()
    torch.testing.assert_close(cache.apply_ln_to_stack(parts), parts)
    attrs = cache.logit_attrs(parts, 2)
    torch.testing.assert_close(attrs.sum(0) + one.b_U[2], logits[..., 2], atol=1e-5, rtol=0)


# --- pos_slice: every form, on the axis the hook name says ---------------------------------------------------------

HEADS = 4  # a prompt of HEADS positions is the one on which slicing the head axis of z raised no error


def forms(length: int) -> list:
    """(pos_slice in every form TransformerLens takes, the same selection as plain torch indexing) for a prompt of
    `length` >= 4 positions."""
    mask = [position % 2 == 0 for position in range(length)]
    return [(None, slice(None)), (0, 0), (-1, -1), (np.int64(2), 2), (torch.tensor(1), 1),
            (slice(-1, None), slice(-1, None)), (slice(1, None, 2), slice(1, None, 2)), ((1, 3), slice(1, 3)),
            ((2,), slice(2)), ([2, 0], [2, 0]), (torch.tensor([1, -1]), [1, -1]), (np.array([0, 3]), [0, 3]),
            (torch.tensor(mask), [p for p in range(length) if mask[p]]),
            (slice(None, None, -1), list(range(length))[::-1])]


def by_hand(tensor: torch.Tensor, axis: int, index) -> torch.Tensor:
    """`tensor` indexed with `index` on `axis`, written out as plain torch indexing."""
    return tensor[(slice(None),) * (axis % tensor.dim()) + (index,)]


def spread_model() -> SingleModel:
    """A model with HEADS heads whose weights are large enough that positions differ by far more than rounding."""
    return ensemble(seeds=(0,), heads=HEADS, d_model=24, init_scale=10.0).instance(0)


def test_every_hook_point_has_its_position_axis_by_name():
    one = spread_model()
    assert {name.rsplit(".", 1)[-1] for name in one.hook_names()} <= set(POSITION_AXIS)
    _, cache = one.run_with_cache(tokens(3)[:, :5])
    single = one.run_with_cache(tokens(1)[:, :5], remove_batch_dim=True)[1]
    for name in cache:
        assert cache[name].shape[position_axis(name)] == 5, name
        assert single[name].shape[position_axis(name, has_batch_dim=False)] == 5, name
    torch.testing.assert_close(cache.sliced(("pattern", 1), -1), cache["pattern", 1][:, :, -1], atol=0, rtol=0)
    torch.testing.assert_close(cache.sliced(("z", 0), [4, 1]), cache["z", 0][:, [4, 1]], atol=0, rtol=0)
    torch.testing.assert_close(cache.stack_activation("pattern", pos_slice=slice(-2, None)),
                               torch.stack([cache["pattern", i][:, :, -2:] for i in range(2)]), atol=0, rtol=0)
    assert cache.stack_activation("normalized", 1, "ln2", pos_slice=0).shape == (1, 3, 24)
    with pytest.raises(KeyError, match="'blocks.0.attn.hook_rot_q' has no known position axis"):
        position_axis("blocks.0.attn.hook_rot_q")


@pytest.mark.parametrize("length", [HEADS, HEADS + 1])
@pytest.mark.parametrize("batched", [True, False])
def test_every_pos_slice_form_matches_the_full_stack_sliced_by_hand(length, batched):
    """Each helper at each pos_slice equals the helper without one, indexed by hand (the axis before d_model),
    on a prompt as long as there are heads and one that is not, with and without the batch axis."""
    one = spread_model()
    logits, cache = one.run_with_cache(tokens(3 if batched else 1)[:, :length], remove_batch_dim=not batched)
    full = {
        "accumulated": cache.accumulated_resid(incl_mid=True),
        "logit lens": cache.accumulated_resid(apply_ln=True),
        "scaled at 1": cache.accumulated_resid(layer=1, apply_ln=True, mlp_input=True),
        "decomposed": cache.decompose_resid(),
        "decomposed, scaled": cache.decompose_resid(layer=1, apply_ln=True),
        "heads": cache.stack_head_results(incl_remainder=True),
        "heads, scaled": cache.stack_head_results(apply_ln=True),
    }
    before_1 = cache.decompose_resid(layer=1)
    outputs = torch.tensor([3, 7, 1]) if batched else torch.tensor(5)
    attrs = cache.logit_attrs(full["decomposed"], outputs)
    if batched:
        assert not torch.allclose(full["heads"][:, :, 0], full["heads"][:, :, 1], atol=1e-2)  # positions differ
    for pos_slice, index in forms(length):
        got = {
            "accumulated": cache.accumulated_resid(incl_mid=True, pos_slice=pos_slice),
            "logit lens": cache.accumulated_resid(apply_ln=True, pos_slice=pos_slice),
            "scaled at 1": cache.accumulated_resid(layer=1, apply_ln=True, mlp_input=True, pos_slice=pos_slice),
            "decomposed": cache.decompose_resid(pos_slice=pos_slice),
            "decomposed, scaled": cache.decompose_resid(layer=1, apply_ln=True, pos_slice=pos_slice),
            "heads": cache.stack_head_results(incl_remainder=True, pos_slice=pos_slice),
            "heads, scaled": cache.stack_head_results(apply_ln=True, pos_slice=pos_slice),
        }
        for name, value in got.items():
            expected = by_hand(full[name], -2, index)
            assert value.shape == expected.shape, (name, pos_slice)
            torch.testing.assert_close(value, expected, atol=1e-5, rtol=1e-5, msg=f"{name} at {pos_slice!r}")
        scaled = cache.apply_ln_to_stack(by_hand(before_1, -2, index), layer=1, pos_slice=pos_slice)
        torch.testing.assert_close(scaled, got["decomposed, scaled"], atol=1e-5, rtol=1e-5)
        sliced_attrs = cache.logit_attrs(got["decomposed"], outputs, pos_slice=pos_slice)
        torch.testing.assert_close(sliced_attrs, by_hand(attrs[..., None], -2, index)[..., 0], atol=1e-5, rtol=1e-5)
    # direct logit attribution at the last position: the heads and the rest add up to the output there
    last, _ = cache.stack_head_results(incl_remainder=True, pos_slice=-1, return_labels=True)
    difference = cache.logit_attrs(last, 3, incorrect_tokens=4, pos_slice=-1).sum(0)
    expected = logits[:, -1, 3] - logits[:, -1, 4]
    torch.testing.assert_close(difference, expected if batched else expected[0], atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("pos_slice, message", [
    (1.5, "pos_slice = 1.5 is not a position selection"), ("last", "pos_slice = 'last' is not a position"),
    (True, "pos_slice = True is not a position selection"), ({0}, r"pos_slice = \{0\} is not a position"),
    (5, r"pos_slice = 5 is out of range for 5 positions \(-5..4\)"), (-6, "pos_slice = -6 is out of range"),
    ([0, 9], r"pos_slice = \[0, 9\] is out of range"), ([[0, 1]], r"has shape \(1, 2\); positions are 1-D"),
    ([0.5], r"pos_slice = \[0.5\] holds non-integer positions"), (torch.tensor([1.0]), "non-integer positions"),
    (slice(0, 2, 0), "has step 0"), (slice(0.5, None), "has a bound that is not an integer"),
    ((1, 2, 3, 4), "a tuple is .stop., .start, stop. or .start, stop, step."),
    (torch.tensor([True, False]), "is a mask of 2; it needs one entry for each of the 5 positions"),
    ([1, "a"], "is not a list of integer positions"),
])
def test_a_pos_slice_of_no_known_form_is_refused_on_one_line(pos_slice, message):
    _, cache = spread_model().run_with_cache(tokens(2)[:, :5])
    for helper in (cache.stack_head_results, cache.accumulated_resid, cache.decompose_resid):
        with pytest.raises(ConfigError, match=message) as refused:
            helper(pos_slice=pos_slice)
        assert "\n" not in str(refused.value)


@pytest.mark.parametrize("pos_slice", [np.array([2**64 - 1], dtype=np.uint64), np.array([2**64 - 5], dtype=np.uint64),
                                       torch.tensor([2**32 - 1], dtype=torch.uint32)])
def test_an_unsigned_position_too_large_is_refused_not_wrapped_to_a_negative_one(pos_slice):
    """A uint64 position of 2**64 - 1 is refused as out of range: cast to int64 first, it would wrap to -1 and
    silently pick the last position."""
    with pytest.raises(ConfigError, match="out of range for 5 positions"):
        resolve(pos_slice, 5)
    assert resolve(np.array([4, 0], dtype=np.uint64), 5).tolist() == [4, 0]


@settings(derandomize=True, max_examples=200, deadline=None, database=None)
@given(length=st.integers(1, 9), pick=st.one_of(
    st.integers(-12, 12), st.lists(st.integers(-12, 12), max_size=6),
    st.builds(slice, st.none() | st.integers(-12, 12), st.none() | st.integers(-12, 12),
              st.none() | st.integers(-4, 4).filter(bool))))
def test_positions_are_those_python_indexing_picks(length, pick):
    """`resolve` picks what Python picks from range(length) with the same int, slice or list of indices, and
    refuses exactly what Python refuses as out of range."""
    positions = range(length)
    try:
        expected = [positions[i] for i in pick] if isinstance(pick, list) else positions[pick]
    except IndexError:
        with pytest.raises(ConfigError, match="out of range"):
            resolve(pick, length)
        return
    got = resolve(pick, length)
    assert (got == expected) if isinstance(pick, int) else got.tolist() == list(expected)


def test_transformer_lens_slice_objects_select_alike():
    utilities = pytest.importorskip("transformer_lens.utilities")
    _, cache = spread_model().run_with_cache(tokens(2)[:, :5])
    for pos_slice in (None, -1, (1, 3), [4, 0], torch.tensor([2]), slice(0, None, 2)):
        torch.testing.assert_close(cache.stack_head_results(pos_slice=utilities.Slice(pos_slice)),
                                   cache.stack_head_results(pos_slice=pos_slice), atol=0, rtol=0)


def test_stacks_and_tokens_that_do_not_fit_are_refused():
    one = spread_model()
    _, cache = one.run_with_cache(tokens(3)[:, :5])
    last = cache.decompose_resid(pos_slice=-1)
    with pytest.raises(ConfigError, match=r"a residual stack of shape \(6, 3, 24\) does not fit the stream at "
                                          r"pos_slice = None, \(3, 5, 24\).*give the pos_slice the stack was built"):
        cache.apply_ln_to_stack(last)
    full = cache.decompose_resid()
    per_position = cache.logit_attrs(full, torch.tensor([1, 2, 3, 4, 5]))  # [pos], pos differing from batch
    torch.testing.assert_close(per_position, cache.logit_attrs(full, torch.tensor([[1, 2, 3, 4, 5]])))
    each = torch.arange(15).reshape(3, 5) % D_OUT
    one_index = cache.logit_attrs(full, int(each[1, 2]))
    torch.testing.assert_close(cache.logit_attrs(full, each)[:, 1, 2], one_index[:, 1, 2])
    for bad, message in [(torch.tensor([1, 2]), r"tokens of shape \(2,\) do not fit a stack of \(6, 3, 5, 24\)"),
                         (torch.zeros(5, 3, dtype=torch.long), r"tokens of shape \(5, 3\) do not fit"),
                         (D_OUT, f"output index {D_OUT} is out of range; this model has outputs 0..{D_OUT - 1}"),
                         (-1, "output index -1 is out of range"), (torch.tensor([1.0]), "outputs of dtype")]:
        with pytest.raises(ConfigError, match=message):
            cache.logit_attrs(full, bad)
    with pytest.raises(ConfigError, match=r"incorrect_tokens of shape \(3,\) differ from tokens of shape \(\)"):
        cache.logit_attrs(last, 1, incorrect_tokens=torch.tensor([1, 2, 3]), pos_slice=-1)


# --- token slots ---------------------------------------------------------------------------------------------------

def test_a_model_of_several_slots_takes_only_tokens_with_them():
    """`[batch, pos]` ids and an unbatched `[pos, slots]` prompt are refused with the shape needed and the
    helper that builds it, by every call that runs the model; `to_tokens` builds them from ids per slot."""
    packed = SingleModel(ensemble(seeds=(0,)), n_slots=2)
    batch = tokens(4)
    assert packed.n_slots == 2 and packed.slot_vocab == 10
    symbols = batch - torch.tensor([0, 10])  # the ids per slot, before the slot offsets
    assert torch.equal(packed.to_tokens(symbols), batch) and torch.equal(packed.to_tokens(symbols[1]), batch[1:2])
    torch.testing.assert_close(packed(batch[1][None]), packed(batch)[1:2], atol=1e-6, rtol=0)
    need = r"it sums 2 token slots per position and takes \[batch, pos, 2\].*model.to_tokens\(ids\) builds them"
    calls = (packed, packed.run_with_cache, packed.run_with_hooks, lambda t: packed(t, readout="last"))
    for bad in (batch[..., 0], batch[0], batch[..., :1], batch[None]):  # [batch, pos]; [pos, slots]; 1 slot; 4-D
        for call in calls:
            with pytest.raises(ConfigError, match=rf"tokens of shape {re.escape(str(tuple(bad.shape)))} do not fit "
                                                  rf"this model: {need}"):
                call(bad)
    with pytest.raises(ConfigError, match=r"token id 1\d in slot 0 is outside that slot's range: slot s holds s·10"):
        packed(batch.flip(-1))  # the slots swapped: ids of slot 1 in slot 0
    with pytest.raises(ConfigError, match="tokens of dtype torch.float32: give integer ids"):
        packed(batch.float())
    with pytest.raises(ConfigError, match="headway models have no tokenizer"):
        packed("a b c")
    with pytest.raises(ConfigError, match=r"symbol id 1\d is out of range; each slot holds ids 0..9"):
        packed.to_tokens(batch)  # already offset: slot 1 holds 10..19
    with pytest.raises(ConfigError, match=r"ids of shape \(4, 6\): give symbol ids per slot, \[pos, 2\]"):
        packed.to_tokens(symbols[..., 0])


def test_a_model_of_one_slot_takes_transformer_lens_shapes_and_an_unknown_one_checks_ids():
    one = SingleModel(ensemble(seeds=(0,)), n_slots=1)
    flat = torch.randint(0, D_VOCAB, (3, N_CTX), generator=torch.Generator().manual_seed(1))
    out = one(flat)
    torch.testing.assert_close(one(flat[..., None]), out, atol=0, rtol=0)
    torch.testing.assert_close(one(flat[2]), out[2:3], atol=1e-6, rtol=0)  # one prompt [pos]: a batch of one
    assert torch.equal(one.to_tokens(flat[2].tolist()), flat[2:3])
    with pytest.raises(ConfigError, match=r"tokens of shape \(3, 6, 2\) do not fit this model: it embeds one token"):
        one(tokens(3))
    with pytest.raises(ConfigError, match=f"token id {D_VOCAB} is out of range; this model embeds ids 0..19"):
        one(flat + D_VOCAB - flat.max())
    unknown = ensemble(seeds=(0,)).instance(0)
    assert unknown.n_slots is None
    wrong = tokens(2)
    wrong[1, 2, 1] = -1
    with pytest.raises(ConfigError, match="token id -1 is out of range; this model embeds ids 0..19"):
        unknown(wrong)
    with pytest.raises(ConfigError, match="does not know its token slots"):
        unknown.to_tokens([[1, 2]])
    for bad in (3, 0, True):
        with pytest.raises(ConfigError, match=f"n_slots = {bad!r}: give a positive integer dividing d_vocab = 20"):
            SingleModel(ensemble(seeds=(0,)), n_slots=bad)


def test_an_empty_batch_runs_to_empty_outputs():
    """No example (a filter that kept none) gives logits with no rows, as TransformerLens does, rather than
    torch's "cannot reshape a tensor of 0 elements" from inside the MLP."""
    model = ensemble(seeds=(0,)).instance(0)
    logits = model(tokens()[:0])
    assert logits.shape[0] == 0 and logits.shape[-1] == D_OUT
