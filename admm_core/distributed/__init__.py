"""Block-ADMM on torch.distributed: Z and U sharded over processes (and machines).

Launch with ``torchrun --nproc-per-node N -m admm_core train …`` (gloo on CPU, NCCL on
GPUs); ``init_from_env`` joins the process group torchrun describes (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, LOCAL_RANK). Without torchrun nothing here communicates and a
run is world size 1. Two ways to split the work (the method setting ``parallel``):

- ``samples`` (block-admm, gotmare): rank r holds the training rows [r·N/W, (r+1)·N/W) of
  X, Z_t and U_t (:class:`~admm_core.methods.base.Shard`). Z sweeps and dual steps are
  local; Θ-steps are synchronous data-parallel steps on the *global* minibatches (drawn by
  the same seeded generator on every rank, so the sequence does not depend on W): each
  rank backpropagates its rows of the minibatch, the gradients are summed by all-reduce and
  every rank takes the same optimizer step (identical optimizer state everywhere).
- ``blocks`` (:class:`BlockParallel`): rank t owns block t+1 (W = T): Θ_t, Z_t, U_t for every
  sample and a copy of its input Z_{t−1}. All blocks take their Θ-steps at once and Z
  moves by a Jacobi sweep; neighbours exchange Z_t (forward) and ∇_{Z_t} P_{t+1} (backward)
  by point-to-point sends.

Checkpoints of a run with W > 1 are one file per rank plus a manifest written by rank 0
after every rank's file is complete; resuming needs the same W.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError
from ..lazy import dist, no_grad, torch
from ..methods.base import MethodState, Shard, TrainBatch, adam_z_step, evaluate, per_block, tensor_bytes
from ..methods.block_admm import BlockADMM

MANIFEST = "checkpoint-manifest.json"


# --- the process group ---------------------------------------------------------------
def active() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if active() else 0


def world_size() -> int:
    return dist.get_world_size() if active() else 1


def is_lead() -> bool:
    """Rank 0 writes metrics, status and summary."""
    return rank() == 0


def init_from_env(device: str = "auto") -> bool:
    """Join the process group torchrun describes; False (and nothing done) without torchrun.

    Backend: NCCL when the run trains on CUDA, gloo otherwise.
    """
    if active() or "WORLD_SIZE" not in os.environ:
        return False
    cuda = device != "cpu" and torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if cuda else "gloo")
    return True


def shutdown() -> None:
    if active():
        dist.destroy_process_group()


def local_device(device: torch.device) -> torch.device:
    """cuda → this process's GPU (LOCAL_RANK) under torchrun."""
    if device.type == "cuda" and active():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return device


def broadcast(obj):
    """Rank 0's value of a picklable object, on every rank."""
    if world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def agreed(should_stop: Callable[[], bool] | None) -> Callable[[], bool] | None:
    """A stop poll all ranks agree on (any rank asked → all stop at the same point).

    Every rank must poll it equally often; the train loop does (the same epochs and progress
    calls everywhere).
    """
    if world_size() == 1:
        return should_stop

    def poll() -> bool:
        flag = torch.tensor([1.0 if should_stop and should_stop() else 0.0], dtype=torch.float64, device=_comm_device())
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    return poll


def _comm_device() -> torch.device:
    if active() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def shard_range(n: int, r: int, w: int) -> tuple[int, int]:
    """Rows [start, stop) of rank r: contiguous, sizes differ by at most one."""
    return r * n // w, (r + 1) * n // w


# --- building a session ---------------------------------------------------------------
def distribute(method, batch: TrainBatch, net) -> tuple[object, TrainBatch]:
    """The method and this process's batch for the current world size (unchanged when W = 1)."""
    w = world_size()
    if w == 1:
        return method, batch
    if not isinstance(method, BlockADMM):
        raise ConfigError(
            f"method = {method.name!r}: only block-admm and gotmare run on several processes (world size {w})"
        )
    if method.parallel == "blocks":
        return BlockParallel(method, rank(), w, net.T), batch
    r = rank()
    start, stop = shard_range(batch.n, r, w)
    if stop <= start:
        raise ConfigError(f"world size = {w}: more processes than training samples ({batch.n})")
    shard = Shard(rank=r, world=w, start=start, n_global=batch.n)
    # clone: the shard must not keep the whole training set alive through a view
    local = dataclasses.replace(batch, x=batch.x[start:stop].clone(), y=batch.y[start:stop].clone(), shard=shard)
    if batch.augment is not None:  # sample i keeps the view it has in one process: look it up by global row
        local.augment = _GlobalRows(batch.augment, start)
    return method, local


class _GlobalRows:
    """An augmentation indexed by global rows, called with this shard's local row indices."""

    def __init__(self, augment, start: int):
        self.augment, self.start = augment, start

    def set_epoch(self, epoch: int, device) -> None:
        self.augment.set_epoch(epoch, device)

    def __call__(self, x: torch.Tensor, idx) -> torch.Tensor:
        if isinstance(idx, slice):  # a contiguous block of local rows, x = x_local[idx]
            first = idx.start or 0
            idx = torch.arange(first, first + x.shape[0], device=x.device)
        return self.augment(x, idx + self.start)


def evaluate_split(net, batch: TrainBatch, x_te, y_te, loss, train_limit: int) -> tuple[float, float, float, float]:
    """(train loss, train accuracy, test loss, test accuracy), reduced over ranks.

    Train figures cover the first ``train_limit`` *global* training rows (each rank its part
    of them), test figures the whole test set (each rank a contiguous slice).
    """
    sh = batch.shard
    if sh.world == 1:
        return (*evaluate(net, batch.x[:train_limit], batch.y[:train_limit], loss), *evaluate(net, x_te, y_te, loss))
    n_tr = max(0, min(batch.n, train_limit - sh.start))
    a, b = shard_range(x_te.shape[0], sh.rank, sh.world)
    sums = []
    for x, y in ((batch.x[:n_tr], batch.y[:n_tr]), (x_te[a:b], y_te[a:b])):
        lo, acc = evaluate(net, x, y, loss) if x.shape[0] else (0.0, 0.0)
        sums += [lo * x.shape[0], acc * x.shape[0], x.shape[0]]
    s = sh.sum(sums, batch.x.device)
    return s[0] / max(s[2], 1), s[1] / max(s[2], 1), s[3] / max(s[5], 1), s[4] / max(s[5], 1)


def extra_metrics(method, state) -> dict:
    """Per-run figures only a multi-process run has: world size and the Z/U bytes of all ranks."""
    w = world_size()
    if w == 1:
        return {}
    b = [0.0] * w
    b[rank()] = float(method.state_bytes(state))
    b = Shard(world=w).sum(b, _comm_device())
    return {"world_size": w, "state_bytes_per_rank": [int(v) for v in b], "state_bytes_total": int(sum(b))}


# --- checkpoints ------------------------------------------------------------------------
def checkpoint_world(run_dir: Path) -> int | None:
    """World size of the run directory's last checkpoint (None: there is none)."""
    m = _read_manifest(run_dir)
    if m is not None:
        return int(m["world_size"])
    return 1 if (Path(run_dir) / "checkpoint.pt").exists() else None


def _read_manifest(run_dir: Path) -> dict | None:
    try:
        return json.loads((Path(run_dir) / MANIFEST).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _rank_file(run_dir: Path, r: int, epoch: int) -> Path:
    return Path(run_dir) / f"checkpoint-rank{r}-epoch{epoch}.pt"


def check_world(run_dir: Path) -> None:
    """ConfigError when the checkpoint was written by another number of processes."""
    saved, now = checkpoint_world(run_dir), world_size()
    if saved is not None and saved != now:
        raise ConfigError(
            f"resume: the checkpoint in {run_dir} was written by {saved} process(es) but this run has {now}; "
            f"resume with the same world size (torchrun --nproc-per-node {saved})"
        )


def save(run_dir: Path, payload: dict, epoch: int, write: Callable[[dict, Path], None]) -> None:
    """One file per rank, then rank 0's manifest naming them; older files go after that.

    A kill at any point leaves a manifest that names a complete set of files.
    """
    r, w = rank(), world_size()
    write({**payload, "rank": r, "world_size": w}, _rank_file(run_dir, r, epoch))
    dist.barrier()
    if r == 0:
        files = [_rank_file(run_dir, i, epoch).name for i in range(w)]
        tmp = Path(run_dir) / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps({"world_size": w, "epoch": epoch, "files": files}, indent=2))
        os.replace(tmp, Path(run_dir) / MANIFEST)
    dist.barrier()
    for old in Path(run_dir).glob(f"checkpoint-rank{r}-epoch*.pt"):
        if old.name != _rank_file(run_dir, r, epoch).name:
            old.unlink(missing_ok=True)


def load(run_dir: Path, device, read: Callable[[Path], dict] | None = None) -> dict:
    """This rank's checkpoint payload (after :func:`check_world`).

    ``read`` loads one file (the run loop passes its verifying, tensors-only loader); the
    default is ``torch.load(..., weights_only=True)``: a checkpoint never runs code.
    """
    check_world(run_dir)
    m = _read_manifest(run_dir)
    path = Path(run_dir) / m["files"][rank()]
    ck = read(path) if read else torch.load(path, map_location=device, weights_only=True)
    if ck.get("epoch") != m["epoch"]:
        raise ConfigError(f"resume: {m['files'][rank()]} holds epoch {ck.get('epoch')}, the manifest {m['epoch']}")
    return ck


# --- blocks in parallel (Jacobi) ---------------------------------------------------------
@dataclass
class BlockParallelState(MethodState):
    """Rank t's part: its block's Z_t, U_t for every sample and a copy of its input Z_{t−1}."""

    z: torch.Tensor  # Z_t, (N, *d_t)
    u: torch.Tensor  # U_t
    zin: torch.Tensor | None  # Z_{t−1} (None on rank 0: the input is X)
    beta: list[float]  # β of every block (the adaptive penalty needs all residuals)
    z_lr: list[float]
    opt: torch.optim.Optimizer  # Θ_t only
    gen: torch.Generator  # minibatch draws, the same sequence on every rank
    z_m: torch.Tensor | None = None
    z_v: torch.Tensor | None = None
    z_steps: int = 0
    iteration: int = 0
    rho_bound: float = 1.0
    residuals: list[float] = field(default_factory=list)


class BlockParallel:
    """Block-ADMM with one block per process and a Jacobi Z sweep (``parallel='blocks'``).

    Rank t (0-based, block_{t+1} of the paper) per Z sweep, every Z from the previous iterate:

        send  ∇_{Z_{t−1}} P_t(Z_t, block_t(Z_{t−1}))  to rank t−1    (it owns Z_{t−1})
        Z_t ← Z_t − ζ_t [∇_{Z_t} P_t + ∇_{Z_t} P_{t+1}]               (second term from rank t+1;
                                                                         ∇ J too on the last rank)
        send the new Z_t to rank t+1                                   (its input copy)

    Θ-steps (Θ_t ← Θ_t − η ∇ P_t/|i|) use the rank's own Z_{t−1}, Z_t, U_t rows and run on all
    ranks at once on the same minibatches; the dual step U_t ← U_t + Z_t − block_t(Z_{t−1})
    is local. Residuals and dual norms are gathered for logging; after each epoch every
    rank broadcasts its block's parameters so each holds the whole current network for
    evaluation and checkpoints. The numbers equal BlockADMM with ``z_sweep='jacobi'`` in
    one process (the dual step here is never folded into the sweep: same values).
    """

    uses_blocks = True

    def __init__(self, m: BlockADMM, rank: int, world: int, T: int):
        if world != T:
            raise ConfigError(
                f"{m.name}.parallel = 'blocks': needs one process per block, T = {T} blocks but world size {world}"
            )
        if m.z_sweep != "jacobi":
            raise ConfigError(
                f"{m.name}.z_sweep = {m.z_sweep!r}: parallel = 'blocks' computes a Jacobi sweep; set z_sweep=jacobi"
            )
        self.m, self.t, self.T = m, rank, T
        self.name, self.summary = m.name, m.summary

    def __getattr__(self, key):  # settings (lr, chunk_size, …) are the wrapped method's
        return getattr(self.m, key)

    # --- helpers -------------------------------------------------------------------------
    def _input(self, state, batch, rows):
        return batch.x[rows] if self.t == 0 else state.zin[rows]

    def _gather(self, values: list[float], device) -> list[float]:
        """Each rank's value at its own index → every rank gets them all."""
        v = [0.0] * self.T
        for i, x in enumerate(values):
            v[i] = x
        return Shard(world=self.T).sum(v, device)

    # --- protocol ------------------------------------------------------------------------
    @no_grad
    def init_state(self, net, batch: TrainBatch, gen: torch.Generator) -> BlockParallelState:
        m, t = self.m, self.t
        net.eval()
        parts = [[] for _ in range(self.T)]
        for s in range(0, batch.n, m.chunk_size):  # every rank has every block's initial Θ (seeded)
            for i, z in enumerate(net.forward_all(batch.x[s : s + m.chunk_size])):
                parts[i].append(z)
        z = [torch.cat(p) for p in parts]
        if m.u_init == "uniform":  # draw every block's U so the generator advances as in one process
            u = [m._uniform_rows(zt, batch, gen) for zt in z][t]
        else:
            u = torch.zeros_like(z[t])
        opt_cls = torch.optim.Adam if m.theta_optimizer == "adam" else torch.optim.SGD
        state = BlockParallelState(
            z=z[t],
            u=u,
            zin=z[t - 1] if t > 0 else None,
            beta=per_block(m.beta, self.T, f"{m.name}.beta"),
            z_lr=[m.z_lr] * self.T,
            opt=opt_cls([{"params": list(net.blocks[t].parameters())}], lr=m.lr, foreach=True),
            gen=gen,
            rho_bound=m.rho_bound,
            residuals=[0.0] * self.T,
        )
        if m.z_optimizer == "adam":
            state.z_m, state.z_v = torch.zeros_like(z[t]), torch.zeros_like(z[t])
        return state

    def run_epoch(self, net, state: BlockParallelState, batch: TrainBatch, progress=None) -> dict:
        from ..methods.base import minibatches

        m = self.m
        batches = minibatches(batch.n, batch.batch_size, state.gen)
        phases = m.iters_per_epoch * m.primal_steps
        per_phase = [
            batches[round(i * len(batches) / phases) : round((i + 1) * len(batches) / phases)] for i in range(phases)
        ]
        for it in range(m.iters_per_epoch):
            for p in range(m.primal_steps):
                self.z_update(net, state, batch)
                self.theta_steps(net, state, batch, per_phase[it * m.primal_steps + p])
            self.dual_step(net, state, batch)
            if progress:
                progress((it + 1) / m.iters_per_epoch)
        self.sync_net(net)
        return {}

    def z_update(self, net, state: BlockParallelState, batch: TrainBatch) -> None:
        """One Jacobi Z sweep (Alg. 1's Z-update with every Z_t from the previous iterate)."""
        m, t, T = self.m, self.t, self.T
        net.eval()
        block, beta = net.blocks[t], state.beta[t]
        g = torch.empty_like(state.z)
        g_prev = torch.empty_like(state.zin) if t > 0 else None
        with torch.enable_grad():
            for s in range(0, batch.n, m.chunk_size):
                rows = slice(s, s + m.chunk_size)
                zt, ut = state.z[rows], state.u[rows]
                if t > 0:  # P_t differentiated through block_t w.r.t. its input: rank t−1's term
                    inp = state.zin[rows].detach().requires_grad_()
                    out = block(inp)
                    g_prev[rows] = torch.autograd.grad(0.5 * beta * (zt - out + ut).pow(2).sum(), inp)[0]
                else:
                    with torch.no_grad():
                        out = block(batch.x[rows])
                z_var = zt.detach().requires_grad_()
                own = 0.5 * beta * (z_var - out.detach() + ut).pow(2).sum()
                if t == T - 1:
                    own = batch.loss(z_var, batch.y[rows]) + own  # Z_T-step: ∇ (J + P_T)
                g[rows] = torch.autograd.grad(own, z_var)[0]
        ops = []
        g_next = torch.empty_like(state.z) if t < T - 1 else None
        if t > 0:
            ops.append(dist.P2POp(dist.isend, g_prev, t - 1))
        if t < T - 1:
            ops.append(dist.P2POp(dist.irecv, g_next, t + 1))
        for op in dist.batch_isend_irecv(ops) if ops else []:
            op.wait()
        if g_next is not None:
            g = g + g_next
        if state.z_m is None:
            state.z = state.z - state.z_lr[t] * g
        else:
            state.z = adam_z_step(state.z, g, state.z_m, state.z_v, state.z_steps + 1, state.z_lr[t])
        ops = []
        if t < T - 1:
            ops.append(dist.P2POp(dist.isend, state.z, t + 1))
        if t > 0:
            ops.append(dist.P2POp(dist.irecv, state.zin, t - 1))
        for op in dist.batch_isend_irecv(ops) if ops else []:
            op.wait()
        state.z_steps += 1

    def theta_steps(self, net, state: BlockParallelState, batch: TrainBatch, idx_list) -> None:
        """Θ_t ← Θ_t − η ∇_{Θ_t} P_t/|i| on each minibatch (every rank its own block, at once)."""
        if not idx_list:
            return
        block, beta = net.blocks[self.t], state.beta[self.t]
        block.train()
        for idx in idx_list:
            idx = idx.to(batch.x.device)
            target = state.z[idx] + state.u[idx]
            state.opt.zero_grad(set_to_none=True)
            (0.5 * beta * (target - block(self._input(state, batch, idx))).pow(2).sum() / len(idx)).backward()
            state.opt.step()

    @no_grad
    def dual_step(self, net, state: BlockParallelState, batch: TrainBatch) -> None:
        """U_t ← U_t + Z_t − block_t(Z_{t−1}); residuals of every block gathered."""
        m, t = self.m, self.t
        net.eval()
        sq = 0.0
        for s in range(0, batch.n, m.chunk_size):
            rows = slice(s, s + m.chunk_size)
            r = state.z[rows] - net.blocks[t](self._input(state, batch, rows))
            if m.uses_duals:
                state.u[rows] += r
            sq += float(r.pow(2).sum())
        sq_all = self._gather([0.0] * t + [sq], batch.x.device)
        state.residuals = [math.sqrt(v / batch.n) for v in sq_all]
        state.iteration += 1
        if m.adaptive_rho:  # BlockADMM.adapt_penalty on this rank's share
            h = math.sqrt(sum(r * r for r in state.residuals))
            if h > state.rho_bound:
                c = m.rho_c
                state.beta = [b / c for b in state.beta]
                state.z_lr = [lr * c for lr in state.z_lr]
                state.u.mul_(c)
            state.rho_bound *= m.rho_bound_decay

    @no_grad
    def sync_net(self, net) -> None:
        """Every rank gets every block's current parameters (block t from rank t)."""
        for i, b in enumerate(net.blocks):
            for p in [*b.parameters(), *b.buffers()]:
                dist.broadcast(p.data, src=i)

    def diagnostics(self, net, state: BlockParallelState, batch: TrainBatch) -> dict:
        sq = self._gather([0.0] * self.t + [float(state.u.pow(2).sum())], batch.x.device)
        return {
            "residuals": list(state.residuals),
            "dual_norms": [math.sqrt(v / batch.n) for v in sq],
            "betas": list(state.beta),
            "iteration": state.iteration,
        }

    def state_bytes(self, state: BlockParallelState) -> int:
        own = [state.z, state.z_m, state.z_v] + ([state.u] if self.m.uses_duals else [])
        return tensor_bytes([*own, state.zin])


def barrier() -> None:
    if world_size() > 1:
        dist.barrier()
