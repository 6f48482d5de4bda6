"""A matrix kept as the product of two factors, A @ B, as TransformerLens' `FactoredMatrix`.

`model.OV` (W_V @ W_O) and `model.QK` (W_Q @ W_K^T) are [n_layers, n_heads, d_model, d_model] products of rank
d_head: kept factored, indexing, composing with other matrices (`W_E @ model.OV[1, 0] @ W_U`) and the spectrum
cost d_head-sized work, and `.AB` gives the full product when it is wanted.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from headway.errors import ConfigError


class FactoredMatrix:
    """The product A @ B of A [..., ldim, mdim] and B [..., mdim, rdim], leading axes broadcast."""

    def __init__(self, A: Tensor, B: Tensor) -> None:
        if A.dim() < 2 or B.dim() < 2 or A.shape[-1] != B.shape[-2]:
            raise ConfigError(f"factors of shapes {tuple(A.shape)} and {tuple(B.shape)} do not multiply: A is "
                              "[..., ldim, mdim] and B [..., mdim, rdim]")
        self.A, self.B = A, B

    @property
    def ldim(self) -> int:
        """Rows of the product."""
        return self.A.shape[-2]

    @property
    def rdim(self) -> int:
        """Columns of the product."""
        return self.B.shape[-1]

    @property
    def mdim(self) -> int:
        """The inner width, an upper bound on the rank."""
        return self.A.shape[-1]

    @property
    def shape(self) -> torch.Size:
        """The product's shape, leading axes broadcast."""
        lead = torch.broadcast_shapes(self.A.shape[:-2], self.B.shape[:-2])
        return torch.Size((*lead, self.ldim, self.rdim))

    @property
    def AB(self) -> Tensor:  # noqa: N802 - TransformerLens' name
        """The full product [..., ldim, rdim]."""
        return self.A @ self.B

    @property
    def BA(self) -> Tensor:  # noqa: N802 - TransformerLens' name
        """B @ A [..., mdim, mdim] (square products only): it has the product's non-zero eigenvalues."""
        if self.ldim != self.rdim:
            raise ConfigError(f"BA needs a square product; this one is {self.ldim} × {self.rdim}")
        return self.B @ self.A

    @property
    def T(self) -> FactoredMatrix:  # noqa: N802 - TransformerLens' name
        """The transpose, still factored."""
        return FactoredMatrix(self.B.transpose(-2, -1), self.A.transpose(-2, -1))

    @property
    def eigenvalues(self) -> Tensor:
        """The product's non-zero eigenvalues (those of BA), [..., mdim], complex."""
        return torch.linalg.eigvals(self.BA)

    def svd(self) -> tuple[Tensor, Tensor, Tensor]:
        """(U [..., ldim, mdim], S [..., mdim], Vh [..., mdim, rdim]) with U diag(S) Vh = A @ B, from the
        factors' QR decompositions, so no ldim × rdim matrix is decomposed."""
        qa, ra = torch.linalg.qr(self.A)
        qb, rb = torch.linalg.qr(self.B.transpose(-2, -1))
        u, s, vh = torch.linalg.svd(ra @ rb.transpose(-2, -1))
        return qa @ u, s, vh @ qb.transpose(-2, -1)

    @property
    def S(self) -> Tensor:  # noqa: N802 - TransformerLens' name
        """The singular values, [..., mdim]."""
        return self.svd()[1]

    def norm(self) -> Tensor:
        """The Frobenius norm of the product, [...]."""
        return self.S.pow(2).sum(-1).sqrt()

    def __matmul__(self, other: Tensor | FactoredMatrix) -> FactoredMatrix:
        if isinstance(other, FactoredMatrix):
            return FactoredMatrix(self.A, self.B @ other.AB) if self.mdim <= other.mdim else \
                FactoredMatrix(self.AB @ other.A, other.B)
        if other.dim() == 1:
            return self.A @ (self.B @ other)
        return FactoredMatrix(self.A, self.B @ other)

    def __rmatmul__(self, other: Tensor) -> FactoredMatrix:
        if other.dim() == 1:
            return (other @ self.A) @ self.B
        return FactoredMatrix(other @ self.A, self.B)

    def __getitem__(self, index: Any) -> FactoredMatrix:
        """The factors indexed on their leading axes: `model.OV[1, 0]` is layer 1, head 0."""
        lead = len(self.shape) - 2
        index = index if isinstance(index, tuple) else (index,)
        if len(index) > lead:
            raise ConfigError(f"index {index!r} reaches past the {lead} leading axes of a factored {tuple(self.shape)} "
                              "matrix; index the full product with .AB")
        a = self.A.expand(*self.shape[:-2], *self.A.shape[-2:])
        b = self.B.expand(*self.shape[:-2], *self.B.shape[-2:])
        return FactoredMatrix(a[index], b[index])

    def __repr__(self) -> str:
        return f"FactoredMatrix(shape {tuple(self.shape)}, inner width {self.mdim})"
