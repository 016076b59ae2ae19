"""NMF math of DeepFacto: the factorisation updates and the batched non-negative projection.

DeepFacto (paper §DeepFacto) puts a non-negative factorisation between block t and t+1.
Block t's output Z_t (N, C, H, W) is read as a C × (N·H·W) matrix (one column per pixel
of every sample) and factored

    Z_t ≈ M S,   M ≥ 0 (C × r, the basis),   S ≥ 0 (r × N·H·W, the scores),

with the ADMM term γ/2 ‖Z_t − M S + V‖² (scaled dual V). Only S, reshaped to (N, r, H, W),
goes on to block t+1. Training alternates

    M ← P₊(M − (M SSᵀ − (Z+V) Sᵀ) / ‖SSᵀ‖₂)            # M-step, projected gradient
    S ← P₊(S − (MᵀM S − Mᵀ(Z+V) + ∇_S P_{t+1}) / L)     # S-step (S also feels block t+1)

where P₊ = max(·, 0). With the step 1/L (L the Lipschitz constant of the gradient) each
projected step cannot increase its objective (descent lemma), so the alternation is
monotone on a fixed Z. At test time M is fixed and S for new samples is

    S = argmin_{S ≥ 0} ½ ‖Z − M S‖²                     # :func:`nnls`

which separates per column; :func:`nnls` solves all columns at once on the device by
accelerated projected gradient (FISTA with adaptive restart) until the KKT violation is
under a tolerance.

Layout: functions take column blocks shaped ``(..., C, n)``: a plain matrix (C, n) or a
batch (N, C, H·W) — the per-sample layout avoids copying activations into one big matrix
(the math is identical: the columns are just grouped by sample). :func:`project` takes
(N, C, H, W) activations and returns (N, r, H, W) scores.

Pure tensor math: image reading and heatmap drawing live in :mod:`admm_core.heatmaps`.
"""

from __future__ import annotations

import torch

# --- tensors <-> the C × (N·H·W) matrix of the paper ----------------------------------------


def to_matrix(z: torch.Tensor) -> torch.Tensor:
    """(N, C, H, W) activations -> the paper's C × (N·H·W) matrix (a copy)."""
    n, c, h, w = z.shape
    return z.permute(1, 0, 2, 3).reshape(c, n * h * w)


def from_matrix(s: torch.Tensor, n: int, h: int, w: int) -> torch.Tensor:
    """r × (N·H·W) scores -> (N, r, H, W)."""
    r = s.shape[0]
    return s.reshape(r, n, h, w).permute(1, 0, 2, 3).contiguous()


def spectral_norm_sym(g: torch.Tensor) -> float:
    """Largest eigenvalue of a symmetric PSD matrix (r × r), at least a tiny positive number."""
    return max(float(torch.linalg.eigvalsh(g.double()).max()), 1e-12)


# --- objective, M-step, S-step --------------------------------------------------------------


def reconstruct(m: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """M S for columns (..., r, n) -> (..., C, n)."""
    return torch.matmul(m, s)


def objective(z: torch.Tensor, m: torch.Tensor, s: torch.Tensor) -> float:
    """½ ‖Z − M S‖²_F (summed over every column of every sample)."""
    return 0.5 * float((z - torch.matmul(m, s)).pow(2).sum())


def gram_terms(z: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(S Sᵀ, Z Sᵀ): the M-step's sufficient statistics, summed over samples. (r, r), (C, r)."""
    ss = torch.matmul(s, s.transpose(-1, -2))
    zs = torch.matmul(z, s.transpose(-1, -2))
    if ss.dim() > 2:
        ss, zs = ss.sum(0), zs.sum(0)
    return ss, zs


def update_m(m: torch.Tensor, ss: torch.Tensor, zs: torch.Tensor, steps: int = 1) -> torch.Tensor:
    """M-step: ``steps`` projected gradient steps on ½‖Z − M S‖² over M ≥ 0.

    ∇_M = M SSᵀ − Z Sᵀ; step 1/‖SSᵀ‖₂ (the gradient's Lipschitz constant), so the objective
    never increases. ``ss``/``zs`` come from :func:`gram_terms` (they do not depend on M).
    """
    lip = spectral_norm_sym(ss)
    for _ in range(steps):
        m = (m - (m @ ss - zs) / lip).clamp_(min=0.0)
    return m


def update_s(
    m: torch.Tensor, z: torch.Tensor, s: torch.Tensor, steps: int = 1, coupling=None, coupling_lip: float = 0.0
) -> torch.Tensor:
    """S-step: ``steps`` projected gradient steps on ½‖Z − M S‖² + C(S) over S ≥ 0.

    ``coupling(s) -> ∇C(s)`` adds the next block's coupling term (DeepFacto: β/2‖Z_{t+1} −
    block_{t+1}(S) + U_{t+1}‖²); ``coupling_lip`` is a Lipschitz bound of that gradient.
    Step 1/(‖MᵀM‖₂ + coupling_lip): monotone for a convex C with that Lipschitz bound.
    """
    g = m.T @ m
    mz = torch.matmul(m.T, z)
    lip = spectral_norm_sym(g) + coupling_lip
    for _ in range(steps):
        grad = torch.matmul(g, s) - mz
        if coupling is not None:
            grad = grad + coupling(s)
        s = (s - grad / lip).clamp_(min=0.0)
    return s


# --- NNLS projection (test time) ------------------------------------------------------------


@torch.no_grad()
def nnls(
    m: torch.Tensor,
    z: torch.Tensor,
    s0: torch.Tensor | None = None,
    tol: float = 1e-5,
    max_iter: int = 2000,
    check_every: int = 10,
) -> torch.Tensor:
    """S = argmin_{S ≥ 0} ½‖Z − M S‖², every column at once (batched, on z's device).

    ``m`` (C, r), ``z`` (..., C, n) -> S (..., r, n). Accelerated projected gradient (FISTA,
    step 1/‖MᵀM‖₂) with the adaptive (gradient) restart of O'Donoghue & Candès. Starts from
    ``s0`` if given, else from the projected least-squares solution max(M⁺Z, 0), each column
    scaled by its best factor in [0, 1].

    Each sample (the last two dims: one (C, n) block) runs on its own: its own momentum and
    restart, and it stops moving once its KKT violation max |min(S, ∇)| is at most ``tol`` ×
    its max|MᵀZ| (scale free), or after ``max_iter`` iterations. So a sample's S does not
    depend on which samples share its batch (a heatmap of one face equals its row of a
    batched projection); the loop ends when every sample has stopped.
    """
    m = m.to(z.dtype)
    g = m.T @ m  # (r, r)
    b = torch.matmul(m.T, z)  # (..., r, n)
    if b.numel() == 0:
        return torch.zeros_like(b)
    if s0 is None:
        s = torch.matmul(torch.linalg.pinv(m.double()).to(z.dtype), z).clamp_(min=0.0)
        # scale each column by its best factor in [0, 1]: never worse than S = 0 (matters when M is ill-conditioned)
        ms = torch.matmul(m, s)
        alpha = ((ms * z).sum(-2, keepdim=True) / ms.pow(2).sum(-2, keepdim=True).clamp(min=1e-30)).clamp(0.0, 1.0)
        s0 = s * alpha
    return nnls_gram(g, b, s0, tol, max_iter, check_every)


@torch.no_grad()
def nnls_gram(
    g: torch.Tensor, b: torch.Tensor, s0: torch.Tensor, tol: float = 1e-5, max_iter: int = 2000, check_every: int = 10
) -> torch.Tensor:
    """X = argmin_{X ≥ 0} ½ tr(Xᵀ G X) − tr(Bᵀ X), given the Gram matrix G (r, r) ⪰ 0 and B (..., r, n).

    The solver behind :func:`nnls` (G = MᵀM, B = MᵀZ) and :func:`solve_m` (G = SSᵀ, B = SZᵀ): FISTA
    from ``s0`` with step 1/‖G‖₂ and per-sample adaptive restart; a sample (the last two dims) stops
    once its KKT violation max |min(X, GX − B)| is at most ``tol`` × its max|B|, or after ``max_iter``.
    """
    if b.numel() == 0:
        return torch.zeros_like(b)
    lip = spectral_norm_sym(g)
    per_sample = (-2, -1)
    scale = b.abs().amax(per_sample, keepdim=True)  # (..., 1, 1)
    s = s0.to(b.dtype).clamp(min=0.0)
    active = scale != 0  # a sample with B = 0 has X = 0; a NaN one stays NaN (not a plausible X = 0)
    s = torch.where(active, s, 0.0)
    y, t = s.clone(), torch.ones_like(scale)
    for it in range(1, max_iter + 1):
        grad = torch.matmul(g, y) - b
        s_new = torch.where(active, (y - grad / lip).clamp_(min=0.0), s)  # a stopped sample keeps its S
        # adaptive restart: momentum pointing uphill -> drop it (per sample)
        uphill = ((y - s_new) * (s_new - s)).sum(per_sample, keepdim=True) > 0
        t_new = 0.5 * (1 + torch.sqrt(1 + 4 * t * t))
        y = s_new + torch.where(uphill, 0.0, (t - 1) / t_new) * (s_new - s)
        t = torch.where(uphill, 1.0, t_new)
        s = s_new
        if it % check_every == 0:
            pg = torch.matmul(g, s) - b
            kkt = torch.minimum(s, pg).abs().amax(per_sample, keepdim=True)  # 0 iff s ≥ 0, ∇ ≥ 0, s·∇ = 0
            active = active & (kkt > tol * scale)
            if not bool(active.any()):
                break
    return s


@torch.no_grad()
def solve_m(
    m: torch.Tensor, ss: torch.Tensor, zs: torch.Tensor, tol: float = 1e-6, max_iter: int = 3000
) -> torch.Tensor:
    """Exact M-step: argmin_{M ≥ 0} ½‖Z − M S‖², warm-started at ``m`` (C, r).

    With S fixed this is a convex non-negative least-squares problem in M (the paper: "solving
    for the other term would reduce to a normal convex least-squares problem"). In Mᵀ it reads
    ½ tr(M SSᵀ Mᵀ) − tr(M (ZSᵀ)ᵀ): :func:`nnls_gram` with G = SSᵀ, B = (ZSᵀ)ᵀ, so only the r × r
    and C × r statistics of :func:`gram_terms` are needed, whatever the number of columns.
    The tolerance is tight on purpose: warm-started at the last M, a loose one (the projection's
    1e-3) is met before M moves (measured at r = 256: the alternation froze after four rounds).
    """
    return nnls_gram(ss, zs.T, m.T, tol, max_iter).T.contiguous()


def project(m: torch.Tensor, z: torch.Tensor, tol: float = 1e-4, max_iter: int = 500, chunk: int = 256) -> torch.Tensor:
    """Test-time scores: (N, C, H, W) activations -> S (N, r, H, W) by :func:`nnls`, in chunks of samples."""
    n, c, h, w = z.shape
    out = []
    for i in range(0, n, chunk):
        zc = z[i : i + chunk].reshape(-1, c, h * w)
        out.append(nnls(m, zc, tol=tol, max_iter=max_iter).reshape(-1, m.shape[1], h, w))
    return torch.cat(out) if out else z.new_zeros((0, m.shape[1], h, w))


def init_basis(z: torch.Tensor, r: int, gen: torch.Generator | None = None) -> torch.Tensor:
    """Initial M (C × r): r activation columns drawn at random (with replacement) among the non-zero
    ones, plus a little noise (which also separates a column drawn twice).

    ``z`` is (..., C, n). Columns of real data start the basis inside the data's cone, so the
    first S-steps are not all-zero (a random Gaussian basis often is, for sparse ReLU maps).
    """
    c = z.shape[-2]
    cols = z.transpose(-1, -2).reshape(-1, c)  # every column as a row
    norms = cols.norm(dim=1)
    live = torch.nonzero(norms > 0).flatten()
    if live.numel() == 0:
        return torch.rand(c, r, generator=gen).to(z)
    pick = live[torch.randint(live.numel(), (r,), generator=gen)]
    m = cols[pick].T.clone()  # (C, r)
    m = m + 0.01 * m.mean() * torch.rand(m.shape, generator=gen).to(m)
    return m.clamp(min=0.0)
