"""Inputs for analysing an ensemble: the same fixed examples fed to every instance."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def instance_tokens(tokens: np.ndarray, n_instances: int, device: torch.device | str = "cpu") -> Tensor:
    """The same examples for every instance: [E, N, positions(, slots)] on `device`."""
    t = torch.as_tensor(np.asarray(tokens), dtype=torch.long, device=device)
    return t.unsqueeze(0).expand(n_instances, *t.shape).contiguous()
