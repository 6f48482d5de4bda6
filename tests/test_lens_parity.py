"""TransformerLens members of the single-model view beyond the basics: callable modules, `return_type`, backward
hooks, `hook_result`, factored OV/QK circuits, hook points as objects with `ctx`, the full residual decomposition,
and hook replacements of the wrong shape named by their hook. Each is checked against the forward it describes."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_run

from headway.errors import ConfigError
from headway.model.config import ModelConfig
from headway.model.factored import FactoredMatrix
from headway.model.single import SingleModel
from headway.model.transformer import EnsembleTransformer
from headway.tasks.objective import run_loss

pytestmark = pytest.mark.usefixtures("one_thread")
N_CTX, D_VOCAB, D_OUT = 6, 20, 10


def single(seed: int = 3, **changes) -> SingleModel:
    """One model of random weights (biases and LayerNorm gains drawn too, so none of them is a no-op)."""
    cfg = ModelConfig(**{"layers": 2, "heads": 2, "d_model": 16, **changes})
    ensemble = EnsembleTransformer.from_seeds(cfg, D_VOCAB, N_CTX, D_OUT, [seed])
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in ensemble.named_parameters():
            if not name.rsplit(".", 1)[-1].startswith("W_"):
                param.add_(0.3 * torch.randn(param.shape, generator=g))
    return SingleModel(ensemble, n_slots=1)


def ids(batch: int = 4, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, D_VOCAB, (batch, N_CTX), generator=torch.Generator().manual_seed(seed))


def test_modules_called_as_transformer_lens_calls_them_compute_the_forward():
    model, tokens = single(), ids()
    logits, cache = model.run_with_cache(tokens)
    resid = model.embed(tokens) + model.pos_embed(tokens)
    torch.testing.assert_close(resid, cache["embed"] + cache["pos_embed"])
    assert cache["pos_embed"].shape == (4, N_CTX, 16)  # broadcast over the batch, as TransformerLens caches it
    for layer, block in enumerate(model.blocks):
        torch.testing.assert_close(block.ln1(cache["resid_pre", layer]), block.ln1.w * cache["normalized", layer, "ln1"]
                                   + block.ln1.b)
        torch.testing.assert_close(block.attn(block.ln1(resid)), cache["attn_out", layer], atol=1e-6, rtol=1e-5)
        resid = block(resid)
        torch.testing.assert_close(resid, cache["resid_post", layer], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(model.unembed(model.ln_final(resid)), logits, atol=1e-6, rtol=1e-5)
    with pytest.raises(ConfigError, match=r"Block takes \[batch, pos, d_model\] with d_model = 16; got \(4, 16\)"):
        model.blocks[0](resid[:, 0])
    with pytest.raises(ConfigError, match="reads one stream"):
        model.blocks[0].attn(resid, resid + 1, resid)


def test_called_modules_run_the_models_hooks():
    model = single()
    seen = []
    model.add_hook("blocks.1.ln1.hook_normalized", lambda x, hook: seen.append(hook.name))
    model.blocks[1].ln1(torch.randn(4, N_CTX, 16))
    assert seen == ["blocks.1.ln1.hook_normalized"]


def test_return_types_and_the_runs_loss(tmp_path):
    from headway.runs.store import load_single
    from headway.train.sweep import train_runs

    run = tiny_run(layout="flat", steps=20)
    train_runs([run], tmp_path, device="cpu", progress=False)
    model = load_single(tmp_path, run_id=run.run_id)
    data = run.validation_data()
    tokens, targets = data.tokens[:16], data.targets[:16]
    expected = run_loss(run.task, run.train.loss)(model.ensemble, tokens[None], targets[None])[0]
    torch.testing.assert_close(model(tokens, return_type="loss", targets=targets), expected)
    logits, loss = model(tokens, return_type="both", targets=targets, readout="last")
    torch.testing.assert_close(logits, model(tokens, readout="last"), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(loss, expected)
    assert model(tokens, return_type=None) is None
    zeroed = model.run_with_hooks(tokens, return_type="loss", targets=targets,
                                  fwd_hooks=[("blocks.0.attn.hook_z", lambda z, hook: z * 0)])
    assert not torch.isclose(zeroed, expected)
    with pytest.raises(ConfigError, match="needs targets"):
        model(tokens, return_type="loss")
    with pytest.raises(ConfigError, match=r"return_type = 'logit' is unknown"):
        model(tokens, return_type="logit")
    with pytest.raises(ConfigError, match=r"targets of shape \(16, 3\) do not fit"):
        model(tokens, return_type="loss", targets=torch.zeros(16, 3, dtype=torch.long))


def test_backward_hooks_see_the_gradient_and_can_replace_it():
    model, tokens = single(), ids()
    name = "blocks.0.attn.hook_z"
    z = model.run_with_cache(tokens, names_filter=name)[1][name].requires_grad_(True)
    out = model.run_with_hooks(tokens, fwd_hooks=[(name, lambda act, hook: z)])
    (expected,) = torch.autograd.grad(out[:, -1].sum(), z)
    grads = {}
    model.add_hook(name, lambda grad, hook: grads.setdefault(hook.name, grad.clone()), "bwd")
    model(tokens)[:, -1].sum().backward()
    torch.testing.assert_close(grads[name], expected)
    model.reset_hooks()
    model.zero_grad()
    model.run_with_hooks(tokens, bwd_hooks=[(name, lambda grad, hook: grad * 0)])[:, -1].sum().backward()
    assert model.ensemble.blocks[0].attn.W_Q.grad.abs().max() == 0  # its only path was through z
    assert model.ensemble.blocks[1].attn.W_Q.grad.abs().max() > 0  # layer 1 still learns through its own path


def test_kept_hooks_permanent_hooks_and_contexts():
    model, tokens = single(), ids()
    point = model.blocks[0].attn.hook_z
    assert point is model.hook_dict["blocks.0.attn.hook_z"] is model.mod_dict["blocks.0.attn.hook_z"]
    assert model.hook_embed.name == "hook_embed" and point.layer() == 0

    def count(act, hook):
        hook.ctx["calls"] = hook.ctx.get("calls", 0) + 1

    point.add_hook(count)
    model(tokens)
    model(tokens)
    assert point.ctx == {"calls": 2}
    model.add_hook("hook_embed", lambda x, hook: x * 0, is_permanent=True)
    model.reset_hooks()
    assert point.ctx == {} and torch.equal(model.run_with_cache(tokens)[1]["embed"], torch.zeros(4, N_CTX, 16))
    model.reset_hooks(including_permanent=True)
    assert model.run_with_cache(tokens)[1]["embed"].abs().max() > 0
    model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_z", count)], reset_hooks_end=False)
    model(tokens)
    assert point.ctx == {"calls": 2}
    model.reset_hooks()
    model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_z", count)], reset_hooks_end=False,
                         clear_contexts=True)
    assert point.ctx == {} and len(model._hooks["blocks.0.attn.hook_z"]) == 1  # kept, its context emptied
    model(tokens)
    assert point.ctx == {"calls": 1}
    model.reset_hooks()


def test_a_hook_returning_the_wrong_shape_is_named_with_both_shapes():
    model, tokens = single(), ids()

    def drop_heads(z, hook):
        return z[:, :, 0]

    with pytest.raises(ConfigError, match=r"'drop_heads' on blocks.1.attn.hook_z returned shape \[4, 6, 8\]; the "
                                          r"activation there is \[4, 6, 2, 8\]"):
        model.run_with_hooks(tokens, fwd_hooks=[("blocks.1.attn.hook_z", drop_heads)])


def test_head_results_sum_to_the_attention_output_and_can_be_patched():
    model, tokens = single(), ids()
    assert "blocks.0.attn.hook_result" not in model.hook_names()
    plain, plain_cache = model.run_with_cache(tokens)
    model.set_use_attn_result(True)
    out, cache = model.run_with_cache(tokens)
    torch.testing.assert_close(out, plain, atol=1e-6, rtol=1e-5)
    for layer in range(2):
        result = cache["result", layer]
        assert result.shape == (4, N_CTX, 2, 16)
        torch.testing.assert_close(result.sum(2) + model.b_O[layer], cache["attn_out", layer], atol=1e-6, rtol=1e-5)
    plain_cache.compute_head_results()
    torch.testing.assert_close(plain_cache["result", 1], cache["result", 1], atol=1e-6, rtol=1e-5)

    def silence_head_0(result, hook):
        result[:, :, 0] = 0

    patched = model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_result", silence_head_0)])

    def silence_z_0(z, hook):
        z[:, :, 0] = 0

    model.set_use_attn_result(False)
    torch.testing.assert_close(patched, model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_z", silence_z_0)]),
                               atol=1e-6, rtol=1e-5)


def test_ov_and_qk_circuits_are_the_products_they_name():
    model = single()
    ov, qk = model.OV, model.QK
    assert isinstance(ov, FactoredMatrix) and ov.shape == (2, 2, 16, 16) and ov.mdim == 8
    torch.testing.assert_close(ov[1, 0].AB, model.W_V[1, 0] @ model.W_O[1, 0])
    torch.testing.assert_close(qk[0, 1].AB, model.W_Q[0, 1] @ model.W_K[0, 1].T)
    full = model.W_E @ ov[1, 1] @ model.W_U
    torch.testing.assert_close(full.AB, model.W_E @ model.W_V[1, 1] @ model.W_O[1, 1] @ model.W_U, atol=1e-6, rtol=1e-5)
    u, s, vh = full.svd()
    torch.testing.assert_close(u @ torch.diag_embed(s) @ vh, full.AB, atol=1e-6, rtol=1e-4)
    torch.testing.assert_close(s[:8], torch.linalg.svdvals(full.AB)[:8], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(ov.T[0, 0].AB, ov[0, 0].AB.T)
    assert torch.allclose(ov[0, 0].norm(), torch.linalg.norm(ov[0, 0].AB))
    eig = torch.linalg.eigvals(ov[0, 0].AB)
    top = eig[eig.abs().argsort(descending=True)][:3]
    assert torch.allclose(ov[0, 0].eigenvalues.abs().sort(descending=True).values[:3], top.abs(), atol=1e-5)
    torch.testing.assert_close(model.W_E_pos, torch.cat([model.W_E, model.W_pos]))
    with pytest.raises(ConfigError, match="reaches past the 2 leading axes"):
        ov[0, 0, 1]


def test_the_full_residual_decomposition_adds_up_and_biases_are_accounted():
    model, tokens = single(), ids()
    _, cache = model.run_with_cache(tokens)
    for layer, mlp_input in [(0, False), (1, False), (1, True), (2, False)]:
        for expand in (True, False):
            parts, labels = cache.get_full_resid_decomposition(layer, mlp_input, expand_neurons=expand,
                                                               return_labels=True)
            stream = cache["resid_mid" if mlp_input else "resid_pre", layer] if layer < 2 else cache["resid_post", 1]
            torch.testing.assert_close(parts.sum(0), stream, atol=1e-5, rtol=1e-5)
            assert len(labels) == len(parts) and labels[-3:] == ["embed", "pos_embed", "bias"]
    neurons, names = cache.stack_neuron_results(1, return_labels=True, neuron_slice=[0, 5])
    assert names == ["L0N0", "L0N5"]
    torch.testing.assert_close(neurons, (cache["post", 0][..., [0, 5], None] * model.W_out[0, [0, 5]]).movedim(2, 0))
    torch.testing.assert_close(model.accumulated_bias(1, mlp_input=True), model.b_O[0] + model.b_out[0] + model.b_O[1])
    assert model.all_head_labels() == ["L0H0", "L0H1", "L1H0", "L1H1"]
    assert model.cfg.device == "cpu" and model.cfg.n_layers == 2
    torch.testing.assert_close(model.tokens_to_residual_directions(3), model.residual_directions(3))


def test_apply_ln_keywords_follow_transformer_lens():
    model, tokens = single(), ids()
    _, cache = model.run_with_cache(tokens)
    stack = cache.decompose_resid(1)
    full = cache.apply_ln_to_stack(stack, 1)
    torch.testing.assert_close(cache.apply_ln_to_stack(stack, 1, batch_slice=[1, 3]), full[:, [1, 3]])
    final = cache.accumulated_resid(apply_ln=True)
    torch.testing.assert_close(final[-1], model.ln_final(cache["resid_post", 1]))
    torch.testing.assert_close(cache.apply_ln_to_stack(cache.accumulated_resid(), recompute_ln=True), final)


def test_layernorm_scale_is_a_hook_point_as_in_transformer_lens():
    model, tokens = single(), ids()
    plain = model(tokens)
    _, cache = model.run_with_cache(tokens)
    stream = cache["resid_pre", 1]
    scale = cache["scale", 1, "ln1"]
    assert scale.shape == (4, N_CTX, 1)
    torch.testing.assert_close(scale, (stream.var(-1, unbiased=False, keepdim=True) + 1e-5).sqrt())
    torch.testing.assert_close(cache["normalized", 1, "ln1"], (stream - stream.mean(-1, keepdim=True)) / scale)
    kept = model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.ln1.hook_scale", lambda s, hook: None)])
    torch.testing.assert_close(kept, plain, atol=1e-6, rtol=1e-5)
    doubled = model.run_with_hooks(tokens, fwd_hooks=[("ln_final.hook_scale", lambda s, hook: s * 2)])
    torch.testing.assert_close(doubled, model.unembed(cache["normalized"] / 2 * model.ln_final.w + model.ln_final.b),
                               atol=1e-6, rtol=1e-5)
