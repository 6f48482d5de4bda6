"""The single-model view: a TransformerLens user's notebook runs on a trained run without the instance axis,
and every number it shows is the ensemble's."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
import torch

from headway.errors import ConfigError
from headway.model.config import ModelConfig
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
    """(code, the output block right after it or None) of every python block in one section of api.md."""
    text = API.read_text()
    start = text.index(section)
    body = text[start:text.index("\n#", start + len(section))]
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
    assert len(blocks) == 2
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
    for name in full:
        torch.testing.assert_close(cache[name], full[name][2], atol=1e-6, rtol=0)
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
    with pytest.raises(ConfigError, match=r"integer tokens \[batch, pos\] or \[batch, pos, slots\], with no instance"):
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
