"""The mode rule on heads built by hand: copiers, splitters, suppressors sharp and broad, strong and faint,
each classified as built at the study's thresholds and at every swept value of every swept threshold."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headway.analysis.sorting.modes import classify_modes, threshold_sweep
from headway.studies.sorting.rules import SortingRules

V = 51
RULES = SortingRules()
THRESHOLDS = RULES.mode_thresholds()
AMPLITUDE = 8.0  # logits a copier adds to the number it attends to
NOISE = 0.1  # logits of unstructured weight in every row


def _bump(rows, width: float = 0.5, scale: float = 1.0) -> torch.Tensor:
    """An OV matrix whose rows `rows` raise (scale > 0) or lower the attended number and, with `width`, its
    neighbours: scale · AMPLITUDE · exp(−(u − v)² / 2 width²); other rows 0."""
    u = torch.arange(V, dtype=torch.float64)
    ov = torch.zeros(V, V, dtype=torch.float64)
    for v in rows:
        ov[v] = scale * AMPLITUDE * torch.exp(-((u - v) ** 2) / (2 * width**2))
    return ov


def _sorting_qk(seed: int) -> torch.Tensor:
    """A QK circuit [V + 1, V] preferring the key just above the query (SEP: the smallest key), with noise."""
    q, k = torch.meshgrid(torch.arange(V + 1.0), torch.arange(V + 1.0), indexing="ij")
    qk = -0.5 * (k[:, :V] - q[:, :V] - 1).abs()
    qk[V] = -0.2 * torch.arange(V, dtype=torch.float32)
    return qk + torch.randn(V + 1, V, generator=torch.Generator().manual_seed(seed)) * 0.05


LOW, HIGH, ALL = range(26), range(26, V), range(V)
CONSTRUCTIONS = {  # name → (head 0's OV, head 1's OV, the mode it was built as)
    "splitter pair": (_bump(LOW), _bump(HIGH), "splitting"),
    "splitters mildly suppressing each other": (_bump(LOW) + _bump(HIGH, scale=-0.1), _bump(HIGH) + _bump(LOW, scale=-0.1),
                                                "splitting"),
    "copier and suppressor at -0.3": (_bump(ALL), _bump(ALL, scale=-0.3), "copy_suppression"),
    "copier and suppressor at -0.4": (_bump(ALL), _bump(ALL, scale=-0.4), "copy_suppression"),
    "copier and suppressor at -0.5": (_bump(ALL), _bump(ALL, scale=-0.5), "copy_suppression"),
    "broad suppressor, width 1.5": (_bump(ALL), _bump(ALL, width=1.5, scale=-0.4), "copy_suppression"),
    "broad suppressor, width 2": (_bump(ALL), _bump(ALL, width=2.0, scale=-0.4), "copy_suppression"),
    "broad suppressor, width 3": (_bump(ALL), _bump(ALL, width=3.0, scale=-0.4), "copy_suppression"),
    "suppressor of 10 numbers": (_bump(ALL), _bump(range(20, 30), scale=-0.4), "copy_suppression"),
    "suppressor at 1%": (_bump(ALL), _bump(ALL, scale=-0.01), "other"),
    "overlapping pair": (_bump(range(41)), _bump(range(10, V)), "overlapping"),  # Jaccard 0.61
}


def _circuits() -> tuple[torch.Tensor, torch.Tensor]:
    """OV [E, 2, V, V] and QK [E, 2, V + 1, V] of every construction, both heads attending alike."""
    gen = torch.Generator().manual_seed(0)
    ov = torch.stack([torch.stack([h0, h1]) for h0, h1, _ in CONSTRUCTIONS.values()]).float()
    ov = ov + torch.randn(ov.shape, generator=gen) * NOISE
    qk = torch.stack([torch.stack([_sorting_qk(2 * e), _sorting_qk(2 * e + 1)]) for e in range(len(CONSTRUCTIONS))])
    return ov, qk


EXPECTED = [mode for *_, mode in CONSTRUCTIONS.values()]


def test_every_construction_is_classified_as_built():
    ov, qk = _circuits()
    modes = classify_modes(ov, qk, THRESHOLDS).assign(name=list(CONSTRUCTIONS))
    assert modes["mode"].tolist() == EXPECTED, modes[["name", "mode", "suppressed_share", "suppression"]]


@pytest.mark.parametrize("threshold", sorted(RULES.mode_sweeps()))
def test_every_construction_keeps_its_mode_at_every_swept_value(threshold):
    ov, qk = _circuits()
    swept = threshold_sweep(ov, qk, {threshold: RULES.mode_sweeps()[threshold]}, THRESHOLDS)
    for value, group in swept.groupby("value"):
        wrong = [(name, mode) for name, mode, want in zip(CONSTRUCTIONS, group["mode"], EXPECTED) if mode != want]
        assert not wrong, f"{threshold} = {value}: {wrong}"


def test_suppression_strength_is_the_share_of_the_copier_removed():
    ov, qk = _circuits()
    modes = classify_modes(ov, qk, THRESHOLDS).assign(name=list(CONSTRUCTIONS)).set_index("name")
    for scale in (0.3, 0.4, 0.5):
        row = modes.loc[f"copier and suppressor at -{scale}"]
        assert row.suppression == pytest.approx(scale, abs=0.02)
        assert (row.copier, row.suppressor, row.suppressed_share) == (0, 1, 1.0)
    # a broad dip also lowers the row's mean, so it removes a little less of the attended number's lift
    broad = [modes.loc[f"broad suppressor, width {w}"].suppression for w in ("1.5", "2", "3")]
    assert 0.4 > broad[0] > broad[1] > broad[2] > 0.25
    faint = modes.loc["suppressor at 1%"]
    assert faint.suppression == pytest.approx(0.01, abs=0.01) and faint.suppressor == -1 and faint.n_suppressors == 0
    ten = modes.loc["suppressor of 10 numbers"]
    assert ten.suppressed_share == pytest.approx(10 / V, abs=0.001)
    mild = modes.loc["splitters mildly suppressing each other"]
    assert mild.suppressed_share == 0.0 and mild.n_suppressors == 0  # a tenth of the other's copying: below 0.2
    assert np.isnan(classify_modes(torch.zeros(1, 2, V, V), qk[:1], THRESHOLDS).suppression.item())  # no copier


def test_a_head_of_noise_beside_a_copier_is_rarely_its_suppressor():
    # the rules' reason for suppress_z = 2: a head whose rows are noise, as spread as the copier's rows, passes
    # z ≤ −2 on about 2.3% of the numbers, and a pair needs 5 of 51: expected about 0.6% of such models
    gen = torch.Generator().manual_seed(1)
    copier = _bump(ALL).float()
    spread = float(copier.std(dim=-1).mean())
    models = 300
    ov = torch.stack([copier.expand(models, V, V), torch.randn(models, V, V, generator=gen) * spread], dim=1)
    qk = _sorting_qk(0).expand(models, 2, V + 1, V)  # both heads attend alike: only suppression can fail the pair
    modes = classify_modes(ov, qk, THRESHOLDS)
    assert (modes["mode"] == "copy_suppression").sum() <= 0.05 * models  # the study's noise budget, as for copy
    assert modes.suppressed_share.mean() < 0.05
