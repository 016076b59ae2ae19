"""The Block-ADMM trainer of DeepFacto: backbone → NMF module → FC layer.

Network (T = 2 blocks with an NMF module between them, paper §DeepFacto):

    X ──block_1 = backbone──▶ Z_1 (N, C, h, w) ≈ M S ──▶ S (N, r, h, w) ──block_2 = FC──▶ Z_2 (N, d)

Objective (paper eq. block_admm_nmf, t = 1), J = batch-hard triplet loss on Z_2/‖Z_2‖:

    J(Y, Z_2) + β_1/2 ‖Z_1 − block_1(X) + U_1‖² + γ/2 ‖Z_1 − M S + V‖²
              + β_2/2 ‖Z_2 − block_2(S) + U_2‖²,        M ≥ 0, S ≥ 0

Inference (straight through): S = P_M(block_1(x)) = argmin_{S≥0}‖block_1(x) − M S‖
(:func:`admm_core.nmf.nnls`), embedding = normalise(block_2(S)).

``s_mode = "projection"`` (default; a deviation from the paper, for the reason below). S is not
a free variable: it is the test-time map S = P_M(block_1(X)) in training too, so block 2
learns on the S that inference gives it. One iteration:

    Z_2 ← Z_2 − ζ ∇_{Z_2}(J + P_2)                                  # Z-update, top block
    M   ← P₊(M − ∇_M ½‖F − M S‖² / L_M) × m_steps                   # M-step (or solved: m_update); F = block_1(X) (warm-up),
                                                                    #   F = Z_1 + V (fine-tune: the ADMM term)
    Z_1 ← (γ (MS − V) + β_1 (block_1(X) − U_1)) / (γ + β_1)         # Z_1-step, fine-tune only
    Θ_1 ← Adam steps on P_1, block_1(X) recomputed                   # fine-tune only
    S   ← P_M(block_1(X))                                           # the test-time projection
    Θ_2 ← Adam steps on P_2 with that S                             # Θ-update
    U_2 += Z_2 − block_2(S);  fine-tune: U_1 += Z_1 − block_1(X), V += Z_1 − MS   # U-update

While the backbone is frozen (warm-up) Z_1, U_1 and V rest (Z_1 = block_1(X)): the NMF module is
plain NMF of the frozen features, M fitted to block_1(X) with S its projection. Why: with Θ_1
frozen, Z_1 = block_1(X) and Z_1 = M S cannot both hold, so in the paper's scheme Z_1 collapses
onto M S and M follows Z_1 + V, while S also feels block 2; the S block 2 trained on was not the
projection inference computes (measured on LFW: docs/results/deepfacto.md), and
‖block_1(X) − MS‖/‖block_1(X)‖ stayed high (0.99 at r = 4).

``s_mode = "admm"``: the paper's scheme, S a variable that also feels block 2 (Alg. 1, the NMF
factors slotted into the reverse sweep):

    Z_2 ← Z_2 − ζ ∇_{Z_2}(J + P_2)                                  # Z-update, top block
    S   ← P₊(S − ∇_S(γ/2‖Z_1 − MS + V‖² + P_2) / L_S)  × s_steps    # S-step (feels block_2)
    M   ← P₊(M − ∇_M(γ/2‖Z_1 − MS + V‖²) / L_M)        × m_steps    # M-step
    Z_1 ← (γ (MS − V) + β_1 (block_1(X) − U_1)) / (γ + β_1)         # Z_1-step (exact minimiser)
    Θ_1 ← Adam steps on P_1 (fine-tune phase only), then Θ_2 on P_2, per minibatch        # Θ-update
    U_1 += Z_1 − block_1(X);  V += Z_1 − MS;  U_2 += Z_2 − block_2(S)                      # U-update

There V does not grow without bound: V stops moving when Z_1 = MS, and the Z_1-step then gives
V = (β_1/γ)(block_1(X) − MS − U_1). Deviation (both modes): U_1 is not updated during the
warm-up. With Θ_1 frozen nothing can close Z_1 − block_1(X), so its dual only winds up
(measured: after 12 warm-up iterations the first fine-tune step tripled ‖Z_1 − block_1(X)‖ and
dropped verification from 74% to 59%); it starts from 0 when Θ_1 starts moving.

Phases (paper §exp:hetero): ``warmup_epochs`` iterations with the backbone frozen, then
``finetune_epochs`` iterations that also step Θ_1 (BatchNorm statistics stay frozen, so block_1 is
a fixed per-sample map while Z sweeps run). Backprop never crosses the NMF module.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .. import nmf
from ..faces.backbone import FaceBackbone, identity_batches, triplet_loss
from ..faces.tensors import to_tensor
from ..faces.verification import embed_all
from ..loop import StopRun
from ..methods.base import MethodState
from ..spec.deepfacto import DeepFactoConfig


@dataclass
class DeepFactoState(MethodState):
    """The Block-ADMM variables of DeepFacto; spatial dims are flattened: n = h·w. A
    :class:`~admm_core.methods.base.MethodState`: its fields are its checkpoint (``state.pt``'s
    ``trainer["state"]``, the layout runs have saved all along)."""

    f: torch.Tensor  # block_1(X) (N, C, n), recomputed when Θ_1 moves
    z1: torch.Tensor  # Z_1 (N, C, n)
    u1: torch.Tensor  # U_1 (N, C, n)
    v: torch.Tensor  # V (N, C, n), dual of Z_1 = M S
    s: torch.Tensor  # S (N, r, n) ≥ 0: the input block 2 trains on
    m: torch.Tensor  # M (C, r) ≥ 0
    z2: torch.Tensor  # Z_2 (N, d)
    u2: torch.Tensor  # U_2 (N, d)
    iteration: int = 0
    residuals: list = dataclasses.field(default_factory=list)

    def nbytes(self) -> int:
        """Bytes of the variables (what the record's ``estimate_state_bytes`` predicts by arithmetic)."""
        return sum(
            t.numel() * t.element_size() for t in (self.f, self.z1, self.u1, self.v, self.s, self.m, self.z2, self.u2)
        )


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    """‖a − b‖ / ‖b‖ (Frobenius over everything)."""
    return float((a - b).norm() / b.norm().clamp(min=1e-12))


class DeepFactoTrainer:
    """Block-ADMM for backbone → NMF → FC (see the module docstring for the updates)."""

    def __init__(
        self,
        cfg: DeepFactoConfig,
        backbone: FaceBackbone,
        images: np.ndarray,
        identity: np.ndarray,
        device,
        gen: torch.Generator,
        should_stop=None,
    ):
        self.cfg, self.backbone, self.images, self.device, self.gen = cfg, backbone, images, device, gen
        self.should_stop = should_stop  # checked between projection chunks and backbone steps: Stop answers soon
        self.identity = identity
        self.y = torch.from_numpy(identity).to(device)
        self.rng = np.random.default_rng(cfg.seed + 1)
        # images per projection chunk: on an H200 the r = 256 projection of 13,143 faces took 6.5 s
        # in chunks of 256 and 3.1 s in chunks of 4,096 (docs/results/deepfacto.md, gpu-projection);
        # S does not depend on the chunk (each sample runs on its own in nmf.nnls)
        self.chunk = 4096 if torch.device(device).type == "cuda" else 256
        self.version = 0  # bumped whenever Θ_1 moves (cached backbone features go stale)
        with torch.no_grad():
            f = self.forward_backbone()
        n_img, c, n = f.shape
        self.hw = (cfg.image_size // 8, cfg.image_size // 8)
        r = cfg.rank
        m = nmf.init_basis(f[: min(512, n_img)], r, gen)
        s = nmf.nnls(m, f, tol=1e-3, max_iter=20)
        # a few plain NMF rounds so the ADMM starts from a sensible factorisation
        for _ in range(3):
            ss, zs = nmf.gram_terms(f, s)
            m = self.m_step(m, ss, zs, 5)
            s = self.project(f, m, to_cpu=False) if self.projected else nmf.update_s(m, f, s, 3)
        self.fc = nn.Linear(r * n, cfg.emb_dim).to(device)  # block_2
        with torch.no_grad():
            g = self.fc(s.flatten(1))
            self.fc.weight.mul_(1.0 / g.norm(dim=1).median().clamp(min=1e-6))  # ‖block_2(S)‖ ≈ 1 at start
            self.fc.bias.zero_()
            g = self.block2(s)
        self.state = DeepFactoState(
            f=f,
            z1=f.clone(),
            u1=torch.zeros_like(f),
            v=torch.zeros_like(f),
            s=s,
            m=m,
            z2=g.clone(),
            u2=torch.zeros_like(g),
        )
        self.opt_fc = torch.optim.Adam(self.fc.parameters(), lr=cfg.fc_lr)
        self.opt_bb = torch.optim.Adam(self.backbone.parameters(), lr=cfg.backbone_lr_ft)

    @property
    def projected(self) -> bool:
        return self.cfg.s_mode == "projection"

    # blocks
    def forward_backbone(self) -> torch.Tensor:
        """block_1(X) for every training image, eval mode: (N, C, n)."""
        self.backbone.eval()
        idx = np.arange(len(self.images))
        z = embed_all(self.backbone.features, self.images, idx, self.device, self.chunk).to(self.device)
        return z.flatten(2)

    def block2(self, s: torch.Tensor) -> torch.Tensor:
        return self.fc(s.flatten(1))

    def m_step(self, m: torch.Tensor, ss: torch.Tensor, zs: torch.Tensor, steps: int | None = None) -> torch.Tensor:
        """M ← argmin_{M≥0} ½‖F − MS‖² (``m_update="exact"``), else ``steps`` (default ``m_steps``)
        projected gradient steps on it; ``ss``, ``zs`` = SSᵀ, FSᵀ (:func:`nmf.gram_terms`)."""
        if self.cfg.m_update == "exact":
            return nmf.solve_m(m, ss, zs)
        return nmf.update_m(m, ss, zs, self.cfg.m_steps if steps is None else steps)

    def objective_j(self, z2: torch.Tensor, y: torch.Tensor, reduction="sum") -> torch.Tensor:
        return triplet_loss(F.normalize(z2, dim=1), y, self.cfg.margin, reduction)

    # one iteration
    def iterate(self, finetune: bool) -> dict:
        cfg, st = self.cfg, self.state
        gamma, beta = cfg.gamma, cfg.beta
        batches = identity_batches(self.identity, self.rng, 4, cfg.batch_size)
        # Z-update, top block: Z_2 ← Z_2 − ζ ∇(J + P_2)
        with torch.no_grad():
            g_s = self.block2(st.s)
        j_total = 0.0
        for b in batches:
            b = torch.from_numpy(b).to(self.device)
            z = st.z2[b].detach().requires_grad_()
            j = self.objective_j(z, self.y[b])
            p2 = 0.5 * beta * (z - g_s[b] + st.u2[b]).pow(2).sum()
            grad = torch.autograd.grad(j + p2, z)[0]
            st.z2[b] = z.detach() - cfg.z_lr * grad
            j_total += float(j.detach())
        with torch.no_grad():
            if self.projected:
                # M-step on ½‖F − MS‖², S = P_M(block_1(X)): F = block_1(X) while frozen, Z_1 + V when fine-tuning
                target = st.z1 + st.v if finetune else st.f
                ss, zs = nmf.gram_terms(target, st.s)
                st.m = self.m_step(st.m, ss, zs)
                if finetune:  # Z_1-step: exact minimiser of γ/2‖Z_1 − MS + V‖² + β/2‖Z_1 − block_1(X) + U_1‖²
                    st.z1 = (gamma * (nmf.reconstruct(st.m, st.s) - st.v) + beta * (st.f - st.u1)) / (gamma + beta)
            else:
                self._admm_s_m_z1_steps()
        if finetune:
            self._backbone_step()
        if self.projected:  # S = the test-time projection with this iteration's M and block_1(X)
            st.s = self.project(st.f, to_cpu=False)
            if not finetune:
                st.z1 = st.f  # Z_1, U_1, V rest while the backbone is frozen
        # Θ-update: block_2 (FC) on P_2
        self.fc.train()
        for b in batches:
            b = torch.from_numpy(b).to(self.device)
            loss = 0.5 * beta * (st.z2[b] + st.u2[b] - self.block2(st.s[b])).pow(2).sum() / len(b)
            self.opt_fc.zero_grad(set_to_none=True)
            loss.backward()
            self.opt_fc.step()
        # U-update (dual steps) and diagnostics
        with torch.no_grad():
            g_s = self.block2(st.s)
            ms = nmf.reconstruct(st.m, st.s)
            r1, r_nmf, r2 = st.z1 - st.f, st.z1 - ms, st.z2 - g_s
            if finetune:  # deviation: U_1 rests while Θ_1 is frozen (see module docstring)
                st.u1 += r1
            if finetune or not self.projected:
                st.v += cfg.nmf_dual_step * r_nmf
            st.u2 += r2
            n_img = st.z1.shape[0]
            st.residuals = [float(r.pow(2).sum().sqrt()) / math.sqrt(n_img) for r in (r1, r_nmf, r2)]
            st.iteration += 1
            # what inference gives for (the first eval_images of) the training images
            k = min(n_img, cfg.eval_images)
            s_test = self.project(st.f[:k], to_cpu=False)
            return {
                "phase": "finetune" if finetune else "warmup",
                "admm_triplet_loss": j_total / n_img,
                "residuals": st.residuals,
                "dual_norms": [float(u.pow(2).sum().sqrt()) / math.sqrt(n_img) for u in (st.u1, st.v, st.u2)],
                "betas": [beta, gamma, beta],
                "nmf_residual": float(r_nmf.norm() / st.z1.norm().clamp(min=1e-12)),
                # the reconstruction error of the features, with the S block 2 trained on and with inference's S
                "nmf_residual_backbone": relative(ms, st.f),
                "reconstruction_error": relative(nmf.reconstruct(st.m, s_test), st.f[:k]),
                "s_mismatch": relative(st.s[:k], s_test),  # ‖S_train − S_test‖/‖S_test‖
                "s_sparsity": float((st.s == 0).float().mean()),
                "iteration": st.iteration,
            }

    def _admm_s_m_z1_steps(self) -> None:
        """s_mode "admm": the paper's S-, M- and Z_1-steps (under no_grad)."""
        cfg, st = self.cfg, self.state
        gamma, beta = cfg.gamma, cfg.beta
        # S-step: γ/2‖Z_1 + V − MS‖² + β/2‖Z_2 − block_2(S) + U_2‖², projected, step 1/L
        w = self.fc.weight.detach()  # (d, r·n)
        lip_w = beta * float(torch.linalg.matrix_norm(w, 2)) ** 2
        for s0 in range(0, st.s.shape[0], 1024):
            rows = slice(s0, s0 + 1024)
            target = st.z2[rows] + st.u2[rows]

            def coupling(s, target=target):
                return (beta * ((self.block2(s) - target) @ w)).view_as(s)

            st.s[rows] = nmf.update_s(
                st.m,
                st.z1[rows] + st.v[rows],
                st.s[rows],
                cfg.s_steps,
                coupling=lambda s, c=coupling: c(s) / gamma,
                coupling_lip=lip_w / gamma,
            )
        # M-step: γ/2‖Z_1 + V − MS‖² over M ≥ 0 (γ cancels in the 1/L step)
        ss, zs = nmf.gram_terms(st.z1 + st.v, st.s)
        st.m = self.m_step(st.m, ss, zs)
        # Z_1-step: exact minimiser of γ/2‖Z_1 − MS + V‖² + β/2‖Z_1 − block_1(X) + U_1‖²
        ms = nmf.reconstruct(st.m, st.s)
        st.z1 = (gamma * (ms - st.v) + beta * (st.f - st.u1)) / (gamma + beta)

    def _backbone_step(self) -> None:
        """Θ_1 on P_1 = β/2‖Z_1 + U_1 − block_1(X)‖² (BN statistics frozen), then block_1(X) anew."""
        st, beta = self.state, self.cfg.beta
        self.backbone.eval()  # BN statistics frozen; weights move
        for b in identity_batches(self.identity, self.rng, 4, 64):
            if self.should_stop and self.should_stop():
                raise StopRun()
            x = to_tensor(self.images[b]).to(self.device)
            bt = torch.from_numpy(b).to(self.device)
            out = self.backbone.features(x).flatten(2)
            loss = 0.5 * beta * (st.z1[bt] + st.u1[bt] - out).pow(2).sum() / len(b)
            self.opt_bb.zero_grad(set_to_none=True)
            loss.backward()
            self.opt_bb.step()
        with torch.no_grad():
            st.f = self.forward_backbone()
        self.version += 1

    # checkpoint of the whole loop state (resume)
    def state_dict(self) -> dict:
        return {
            "state": self.state.state_dict(),
            "backbone": self.backbone.state_dict(),
            "fc": self.fc.state_dict(),
            "opt_fc": self.opt_fc.state_dict(),
            "opt_bb": self.opt_bb.state_dict(),
            "rng": self.rng.bit_generator.state,
            "gen": self.gen.get_state(),
            "version": self.version,
        }

    def load_state_dict(self, ck: dict) -> None:
        self.state.load_state_dict(
            {k: (v.to(self.device) if torch.is_tensor(v) else v) for k, v in ck["state"].items()}
        )
        self.backbone.load_state_dict(ck["backbone"])
        self.fc.load_state_dict(ck["fc"])
        self.opt_fc.load_state_dict(ck["opt_fc"])
        self.opt_bb.load_state_dict(ck["opt_bb"])
        self.rng.bit_generator.state = ck["rng"]
        self.gen.set_state(ck["gen"])
        self.version = ck["version"] + 1  # cached evaluation features are stale

    # straight-through inference
    @torch.no_grad()
    def features(self, images: np.ndarray, chunk: int = 256) -> torch.Tensor:
        """block_1(x) of uint8 images, (B, C, n) on the CPU."""
        self.backbone.eval()
        return embed_all(
            lambda x: self.backbone.features(x).flatten(2), images, np.arange(len(images)), self.device, chunk
        )

    @torch.no_grad()
    def project(self, z: torch.Tensor, m: torch.Tensor | None = None, to_cpu: bool = True) -> torch.Tensor:
        """S = argmin_{S≥0} ‖Z − M S‖ (the NMF module at test time), (B, r, n).

        Batched on the trainer's device (CUDA when the run has one), ``self.chunk`` images at a
        time: training and inference call this same function, so for the same M and Z they get
        the same S.
        """
        m = self.state.m if m is None else m
        out = []
        for i in range(0, len(z), self.chunk):
            if self.should_stop and self.should_stop():
                raise StopRun()
            s = nmf.nnls(
                m, z[i : i + self.chunk].to(self.device), tol=self.cfg.nnls_tol, max_iter=self.cfg.nnls_max_iter
            )
            out.append(s.cpu() if to_cpu else s)
        return torch.cat(out) if out else torch.zeros(0, m.shape[1], z.shape[-1])

    def scores(self, images: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """(S (B, r, n), block_1(x) (B, C, n)) of uint8 images, on the CPU."""
        z = self.features(images)
        return self.project(z), z

    @torch.no_grad()
    def embed(self, s: torch.Tensor) -> torch.Tensor:
        self.fc.eval()
        return F.normalize(self.fc(s.to(self.device).flatten(1)), dim=1).cpu()
