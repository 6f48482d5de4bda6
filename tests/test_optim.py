"""EnsembleAdam against torch's own Adam/AdamW run on each instance alone; schedules."""

import pytest
import torch
from torch import nn

from headway.model.flat import FlatParameters
from headway.train.optim import EnsembleAdam
from headway.train.schedule import lr_multiplier


class Tiny(nn.Module):
    def __init__(self, e):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.W_in = nn.Parameter(torch.randn(e, 3, 4, generator=g))
        self.b_in = nn.Parameter(torch.randn(e, 4, generator=g))


def grads(e, step):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(e, 3, 4, generator=g), torch.randn(e, 4, generator=g)


@pytest.mark.parametrize("decoupled", [True, False])
def test_matches_torch_adam_per_instance(decoupled):
    lrs, wds = [1e-2, 3e-3, 5e-2], [0.1, 0.0, 0.5]
    model = Tiny(3)
    flat = FlatParameters(model, 3)
    reference = [(model.W_in[e].detach().clone().requires_grad_(), model.b_in[e].detach().clone().requires_grad_())
                 for e in range(3)]
    optim = EnsembleAdam(flat, torch.tensor(lrs), torch.tensor(wds),
                         flat.mask(lambda name: name.startswith("W_")), decoupled=decoupled)
    kind = torch.optim.AdamW if decoupled else torch.optim.Adam
    torch_optims = [kind([{"params": [w], "weight_decay": wd}, {"params": [b], "weight_decay": 0.0}], lr=lr)
                    for (w, b), lr, wd in zip(reference, lrs, wds)]
    for step in range(25):
        g_w, g_b = grads(3, step)
        model.W_in.grad.copy_(g_w)
        model.b_in.grad.copy_(g_b)
        optim.step(1.0, torch.ones(3, dtype=torch.bool))
        for e, ((w, b), opt) in enumerate(zip(reference, torch_optims)):
            w.grad, b.grad = g_w[e].clone(), g_b[e].clone()
            opt.step()
    for e, (w, b) in enumerate(reference):
        assert torch.allclose(model.W_in[e], w, atol=1e-6, rtol=1e-5)
        assert torch.allclose(model.b_in[e], b, atol=1e-6, rtol=1e-5)


def test_inactive_instance_is_left_exactly_alone():
    model = Tiny(2)
    flat = FlatParameters(model, 2)
    before = flat.data.clone()
    optim = EnsembleAdam(flat, torch.tensor([1e-2, 1e-2]), torch.tensor([0.1, 0.1]), flat.mask(lambda n: True))
    flat.grad.fill_(float("nan"))
    flat.grad[0] = 1.0
    optim.step(1.0, torch.tensor([True, False]))
    assert torch.equal(flat.data[1], before[1])
    assert not torch.equal(flat.data[0], before[0])
    assert torch.all(torch.isfinite(optim.exp_avg))


def test_schedules():
    assert lr_multiplier("constant", 500, 1000) == 1.0
    assert lr_multiplier("linear", 0, 1001, final_fraction=0.1) == 1.0
    assert lr_multiplier("linear", 1000, 1001, final_fraction=0.1) == pytest.approx(0.1)
    assert lr_multiplier("cosine", 500, 1001) == pytest.approx(0.5)
    assert lr_multiplier("cosine", 1000, 1001) == pytest.approx(0.0)
    assert lr_multiplier("constant", 4, 100, warmup_steps=10) == pytest.approx(0.5)


def test_train_config_refusals_and_number_normalisation():
    from headway.errors import ConfigError
    from headway.runs.config import RunConfig

    assert RunConfig.from_flat({"weight_decay": 0}).run_id == RunConfig.from_flat({"weight_decay": 0.0}).run_id
    for bad in ({"final_lr_fraction": 1.5}, {"beta1": 1.0}, {"log_checkpoints": True}, {"lr": 0},
                {"schedule": "step"}, {"steps": 0}, {"momentum": 0.9}):
        with pytest.raises(ConfigError, match=str(next(iter(bad)))):
            RunConfig.from_flat(bad)
