"""Many linear SVMs at once, in torch: LinearSVC's problem solved by a batched Newton method.

DeepFacto's evaluation fits one linear SVM per (attribute, C): 40 × 3 problems on the same
10,502 × 2,304 features. scikit-learn's LinearSVC (liblinear) fits them one by one on the CPU,
about 27 minutes on 2 cores at r = 256; here they share every matrix product, on the GPU when
there is one. The problem is LinearSVC's own (``penalty="l2"``, ``loss="squared_hinge"``,
``fit_intercept=True``, ``intercept_scaling=1``), so both solvers aim at the same unique minimiser.

For labels y ∈ {−1, +1}ⁿ, features X (n, d) and x̃ = (x, 1) (liblinear appends the constant
feature, so the intercept is penalised like any weight):

    f(w) = ½‖w‖² + C Σᵢ max(0, 1 − yᵢ x̃ᵢᵀw)²                      w ∈ ℝ^{d+1}
    ∇f(w) = w − 2C X̃ᵀ(y ⊙ ξ),          ξ = max(0, 1 − y ⊙ X̃w)
    H v   = v + 2C X̃ᵀ(a ⊙ X̃v),          a = [ξ > 0]  (the generalised Hessian)

f is strongly convex and piecewise quadratic. Each Newton step solves H d = −∇f by conjugate
gradients (Jacobi preconditioner, truncated: relative residual min(0.1, √(‖∇f‖/‖∇f₀‖))), then
halves the step until f falls by the Armijo amount. All K problems run side by side as the
columns of W (d+1, K), each with its own labels, C, active set, CG scalars and stopping point.
"""

from __future__ import annotations

import torch


@torch.no_grad()
def squared_hinge_svms(
    x: torch.Tensor,
    y: torch.Tensor,
    c: torch.Tensor,
    tol: float = 1e-6,
    max_newton: int = 60,
    max_cg: int = 500,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Minimise f_k(w) above for every column k: x (n, d), y (n, K) in {−1, +1}, c (K,) > 0.

    Returns (W (d, K), b (K,)): the decision function is x @ W + b. A problem stops once
    ‖∇f_k‖ ≤ ``tol`` · ‖∇f_k(0)‖, or after ``max_newton`` steps. Computes in x's dtype and device.
    """
    n, d = x.shape
    k = y.shape[1]
    y = y.to(x)
    c2 = 2 * c.to(x).reshape(1, k)
    xt = torch.cat([x, x.new_ones(n, 1)], 1)  # x̃ = (x, 1)
    sq = xt * xt  # for the Jacobi preconditioner: diag(H) = 1 + 2C (x̃²)ᵀ a
    w = x.new_zeros(d + 1, k)

    def parts(w):
        """f, ∇f and the active set a at w (all columns)."""
        xi = (1 - y * (xt @ w)).clamp_(min=0)
        f = 0.5 * w.pow(2).sum(0) + 0.5 * c2[0] * xi.pow(2).sum(0)
        g = w - xt.T @ (c2 * y * xi)
        return f, g, (xi > 0).to(x)

    f, g, a = parts(w)
    g0 = g.norm(dim=0)
    live = g0 > 0
    for _ in range(max_newton):
        gn = g.norm(dim=0)
        live = live & (gn > tol * g0)
        if not bool(live.any()):
            break
        # Newton direction: H p = −g by preconditioned CG, column by column (masked, batched)
        eta = torch.clamp(torch.sqrt(gn / g0), max=0.1)
        m_inv = 1 / (1 + c2 * (sq.T @ a))  # (d+1, K)
        p = torch.zeros_like(w)
        r = -g
        z = m_inv * r
        q = z.clone()
        rz = (r * z).sum(0)
        cg_live = live.clone()
        for _ in range(max_cg):
            hq = q + xt.T @ (c2 * a * (xt @ q))
            alpha = torch.where(cg_live, rz / (q * hq).sum(0).clamp(min=1e-300), 0.0)
            p = p + alpha * q
            r = r - alpha * hq
            cg_live = cg_live & (r.norm(dim=0) > eta * gn)
            if not bool(cg_live.any()):
                break
            z = m_inv * r
            rz_new = (r * z).sum(0)
            q = z + (rz_new / rz.clamp(min=1e-300)) * q
            rz = rz_new
        # Armijo backtracking on each column's own step (f is convex: a short step always helps)
        slope = (g * p).sum(0)  # < 0: p is a descent direction
        step = torch.where(live, 1.0, 0.0).to(x)
        for _ in range(30):
            f_new, g_new, a_new = parts(w + step * p)
            ok = (f_new <= f + 1e-4 * step * slope) | ~live
            if bool(ok.all()):
                break
            step = torch.where(ok, step, step / 2)
        else:  # gave up halving: f, ∇f at the step taken
            f_new, g_new, a_new = parts(w + step * p)
        w = w + step * p
        f, g, a = f_new, g_new, a_new
    return w[:d], w[d]


def predict(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Class 1 where x @ W + b > 0, else class 0 (LinearSVC's rule: a tie goes to the first class); (n, K) bool."""
    return (x @ w + b) > 0
