"""The instance-axis transformer: names, shapes, independence of instances, hooks and cache."""

import re
from pathlib import Path

import pytest
import torch

from headway.analysis.ablation import KINDS, ablation_hooks, head_outputs, mean_outputs
from headway.model.config import ModelConfig
from headway.model.hooks import positionwise
from headway.model.transformer import EnsembleTransformer

CFG = ModelConfig(layers=2, heads=4, d_model=32)
D_VOCAB, N_CTX, D_OUT = 20, 7, 10


def make(seeds, cfg=CFG):
    return EnsembleTransformer.from_seeds(cfg, D_VOCAB, N_CTX, D_OUT, seeds)


def tokens(e, b=5, slots=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, D_VOCAB, (e, b, N_CTX, slots), generator=g)


def test_parameter_names_and_shapes_follow_transformerlens_with_instance_axis():
    model = make([0, 1, 2])
    params = dict(model.named_parameters())
    assert params["embed.W_E"].shape == (3, D_VOCAB, 32)
    assert params["pos_embed.W_pos"].shape == (3, N_CTX, 32)
    assert params["blocks.1.attn.W_Q"].shape == (3, 4, 32, 8)
    assert params["blocks.1.attn.W_O"].shape == (3, 4, 8, 32)
    assert params["blocks.0.mlp.W_in"].shape == (3, 32, 128)
    assert params["blocks.0.ln1.w"].shape == (3, 32)
    assert params["unembed.W_U"].shape == (3, 32, D_OUT)
    assert model.flat.data.shape == (3, sum(p[0].numel() for p in params.values()))


def test_parameters_and_gradients_live_in_the_flat_buffer():
    model = make([0, 1])
    model.flat.data[1].fill_(0.5)
    assert torch.all(model.blocks[0].attn.W_K[1] == 0.5)
    model(tokens(2)).sum().backward()
    w_q = model.blocks[1].attn.W_Q
    assert w_q.grad.abs().sum() > 0
    assert model.flat.grad.abs().sum() == pytest.approx(
        sum(p.grad.abs().sum().item() for p in model.parameters()), rel=1e-5)


def test_instance_output_equals_a_lone_model_with_the_same_seed():
    ensemble = make([11, 22, 33])
    alone = make([22])
    tok = tokens(3)
    assert torch.allclose(ensemble(tok)[1], alone(tok[1:2])[0], atol=1e-6)


def test_gradients_do_not_leak_between_instances():
    model = make([0, 1, 2])
    out = model(tokens(3))
    out[1].sum().backward()
    per_instance = model.flat.grad.abs().sum(dim=1)
    assert per_instance[1] > 0 and per_instance[0] == 0 and per_instance[2] == 0


def test_initialisation_is_reproducible_and_seed_dependent():
    assert torch.equal(make([5]).flat.data, make([5]).flat.data)
    assert not torch.equal(make([5]).flat.data, make([6]).flat.data)


def test_cache_matches_forward_and_patterns_are_distributions():
    model = make([0, 1])
    tok = tokens(2)
    out, cache = model.run_with_cache(tok)
    # the cache computes attention step by step, plain forwards use the fused kernel
    assert torch.allclose(out, model(tok), atol=1e-5)
    _, only_resid = model.run_with_cache(tok, names=["blocks.1.hook_resid_post"])
    assert torch.allclose(only_resid["blocks.1.hook_resid_post"], cache["blocks.1.hook_resid_post"], atol=1e-5)
    assert set(cache) == set(model.hook_names())
    pattern = cache["blocks.0.attn.hook_pattern"]
    assert pattern.shape == (2, 5, 4, N_CTX, N_CTX)
    assert torch.allclose(pattern.sum(-1), torch.ones(2, 5, 4, N_CTX))
    assert torch.all(pattern.triu(diagonal=1) == 0)  # causal
    assert cache["blocks.1.attn.hook_z"].shape == (2, 5, N_CTX, 4, 8)
    assert cache["blocks.1.hook_resid_post"].shape == (2, 5, N_CTX, 32)


def test_bidirectional_attention_looks_ahead():
    model = make([0], ModelConfig(layers=1, heads=2, d_model=16, attention="bidirectional"))
    _, cache = model.run_with_cache(tokens(1), names=["blocks.0.attn.hook_pattern"])
    assert cache["blocks.0.attn.hook_pattern"].triu(diagonal=1).sum() > 0


def test_hook_can_ablate_a_head_and_changes_only_that_instance():
    model = make([0, 1])
    tok = tokens(2)

    def zero_head(z, name):
        z = z.clone()
        z[0, :, :, 2] = 0.0  # instance 0, head 2
        return z

    base = model(tok)
    ablated = model(tok, hooks={"blocks.1.attn.hook_z": zero_head})
    assert not torch.allclose(base[0], ablated[0])
    assert torch.equal(base[1], ablated[1])


def test_variants_attention_only_no_layernorm_single_slot_tokens():
    cfg = ModelConfig(layers=3, heads=2, d_model=16, d_mlp=0, layernorm=False)
    model = make([0, 1], cfg)
    assert not any("mlp" in n or "ln" in n for n, _ in model.named_parameters())
    out = model(tokens(2)[..., 0], readout="all")
    assert out.shape == (2, 5, N_CTX, D_OUT)
    assert "blocks.2.mlp.hook_post" not in model.hook_names()


def test_unknown_hook_name_is_refused():
    with pytest.raises(KeyError, match="hook_nope"):
        make([0]).run_with_cache(tokens(1), names=["blocks.0.hook_nope"])


def test_mlp_hook_has_position_axis_and_misspelled_hooks_are_refused():
    model = make([0, 1])
    _, cache = model.run_with_cache(tokens(2), names=["blocks.0.mlp.hook_post"])
    assert cache["blocks.0.mlp.hook_post"].shape == (2, 5, N_CTX, 128)
    with pytest.raises(KeyError, match="hook_patern"):
        model(tokens(2), hooks={"blocks.0.attn.hook_patern": lambda t, n: None})


@pytest.mark.parametrize("cfg", [CFG, ModelConfig(layers=1, heads=2, d_model=16, attention="bidirectional"),
                                 ModelConfig(layers=2, heads=2, d_model=16, d_mlp=0, layernorm=False)])
def test_last_position_shortcut_matches_the_full_computation(cfg):
    model = make([0, 1], cfg)
    tok = tokens(2)
    fast = model(tok)
    fast.pow(2).sum().backward()
    fast_grad = model.flat.grad.clone()
    model.flat.zero_grad()
    # a read-out of the last k positions (here k = 1) computes every position of every block
    full = model(tok, readout=1)[:, :, 0]
    full.pow(2).sum().backward()
    assert torch.allclose(fast, full, atol=1e-5)
    assert torch.allclose(fast_grad, model.flat.grad, atol=1e-5)
    assert torch.allclose(model(tok, readout="all")[:, :, -1], fast, atol=1e-5)


def test_the_final_block_computes_the_last_position_alone_unless_a_hook_there_needs_the_others():
    """Hooks before the final block, at its input, or marked positionwise keep the last-position shortcut
    (the marked hook then sees one position); any other hook in the final block, or one inside its attention,
    makes it compute every position."""
    model = make([0, 1])
    z, final = model.hook_name("attn.hook_z", 1), model.hook_name("hook_mlp_out", 1)
    seen: dict[str, int] = {}

    def record(tensor, name):
        seen[name] = tensor.shape[2]

    def runs(hooks):
        seen.clear()
        model(tokens(2), hooks=hooks)
        return dict(seen)

    tail = positionwise(record)
    assert runs({z: tail}) == {z: 1}
    assert runs({z: record}) == {z: N_CTX}
    for other in ("blocks.0.hook_resid_post", "blocks.1.hook_resid_pre", "blocks.1.ln1.hook_normalized"):
        assert runs({z: tail, other: record})[z] == 1, other
    for other in (final, "blocks.1.attn.hook_pattern"):
        assert runs({z: tail, other: record})[z] == N_CTX, other


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("where", ["everywhere", "some positions"])
def test_ablations_on_the_last_position_alone_give_the_full_computations_answers(kind, where):
    """Head ablation and patching hooks act position by position, so the shortcut's final block (the read-out
    position alone) gives the same outputs as computing every position."""
    model = make([0, 1, 2])
    tok = tokens(3, b=6)
    source = {"zero": None, "mean": mean_outputs(model, tok), "resample": head_outputs(model, tok.roll(1, dims=1)),
              "patch": head_outputs(model, tokens(3, b=6, seed=1))}[kind]
    mask = torch.zeros(3, 2, 4, dtype=torch.bool)
    mask[0, 1, 2] = mask[1, :, 0] = mask[2, 0, 3] = True  # the final layer's heads in two instances
    positions = None if where == "everywhere" else torch.arange(N_CTX) % 2 == 0
    hooks = ablation_hooks(model, mask, kind, source, positions)
    with torch.no_grad():
        assert torch.allclose(model(tok, hooks=hooks), model(tok, hooks=hooks, readout=1)[:, :, 0], atol=1e-5)
        assert not torch.allclose(model(tok, hooks=hooks), model(tok), atol=1e-3)


def test_top_level_names_resolve_lazily():
    import subprocess
    import sys

    import headway

    assert all(getattr(headway, name) is not None for name in headway.__all__)
    api = (Path(__file__).parents[1] / "docs" / "api.md").read_text()
    listed = api[api.index("importable from the package root"):api.index("Their homes:")]
    assert set(re.findall(r"`(\w+)`", listed)) - {"headway"} == set(headway.__all__)  # the docs list them all
    light = subprocess.run([sys.executable, "-c", "import sys, headway; print('torch' in sys.modules)"],
                           capture_output=True, text=True, check=True)
    assert light.stdout.strip() == "False"


@pytest.mark.parametrize("last_query_only", [False, True])
def test_the_head_split_matches_a_permuted_copy_and_its_gradient_is_exact(last_query_only):
    from headway.model.transformer import SplitHeads

    qkv = torch.randn(2, 3, 5, 3, 4, 6, dtype=torch.float64, requires_grad=True)
    q, k, v = qkv.detach().permute(3, 0, 1, 4, 2, 5).reshape(3, 6, 4, 5, 6).unbind(0)
    expected = (q[:, :, -1:] if last_query_only else q, k, v)
    for got, want in zip(SplitHeads.apply(qkv, last_query_only), expected):
        assert got.shape == want.shape and torch.equal(got, want)
    assert torch.autograd.gradcheck(lambda t: SplitHeads.apply(t, last_query_only), (qkv,))
    SplitHeads.apply(qkv, last_query_only)[1].sum().backward()  # q and v unused: their gradients are zero
    only_k = torch.zeros_like(qkv)
    only_k[:, :, :, 1] = 1
    assert torch.equal(qkv.grad, only_k)
