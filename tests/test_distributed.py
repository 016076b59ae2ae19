"""Block-ADMM on torch.distributed (gloo, CPU): sample sharding and blocks in parallel.

Worker processes are spawned with torch.multiprocessing, bind 127.0.0.1 on a free port and
train digits through the ordinary run loop (admm_core.network.train); their per-rank checkpoint
files are compared with single-process runs of the same seed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket

import pytest
import torch
import torch.multiprocessing as mp

from admm_core import distributed as D
from admm_core.network import train
from admm_core.rundir import read_metrics
from admm_core.spec.config import ConfigError
from admm_core.spec.presets import preset_config

pytest.importorskip("sklearn")  # digits
if not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed without gloo", allow_module_level=True)

EPOCHS = 2


def digits(method="block-admm", **params):
    cfg = preset_config("digits-mlp", method).replace(train__epochs=EPOCHS, train__device="cpu")
    return cfg.replace(method_params={**cfg.method_params, **params}) if params else cfg


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world, port, cfg_json, run_dir, resume, die_mid_epoch, stop_rank0_at=None):
    from admm_core.network import train
    from admm_core.spec.config import RunConfig

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)

    seen = [0.0]

    def on_progress(done, m):
        seen[0] = done
        if die_mid_epoch and rank == world - 1 and done >= die_mid_epoch:
            os.kill(os.getpid(), signal.SIGKILL)  # a real kill: no clean-up, no last checkpoint

    try:
        stop = (lambda: rank == 0 and seen[0] >= stop_rank0_at) if stop_rank0_at else None
        train(RunConfig.from_json(cfg_json), run_dir, resume=resume, on_progress=on_progress, should_stop=stop)
    finally:
        torch.distributed.destroy_process_group()


def spawn(world, cfg, run_dir, resume=False, die_mid_epoch=None, stop_rank0_at=None):
    # fork: the workers inherit the imported modules (a fresh interpreter per worker costs
    # seconds of CPU each); the parent never joins a process group, so gloo starts clean
    mp.start_processes(
        _worker,
        args=(world, free_port(), cfg.to_json(), str(run_dir), resume, die_mid_epoch, stop_rank0_at),
        nprocs=world,
        join=True,
        start_method="fork",
    )


def single(cfg, run_dir):
    train(cfg, run_dir)
    return torch.load(run_dir / "checkpoint.pt", weights_only=False)


def rank_files(run_dir):
    m = json.loads((run_dir / D.MANIFEST).read_text())
    return m, [torch.load(run_dir / f, weights_only=False) for f in m["files"]]


def max_diff(a, b) -> float:
    return float((a - b).abs().max()) if a.numel() else 0.0


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """block-admm with random U_0 (exercises the world-size-independent draw): 1 process and 2 processes."""
    root = tmp_path_factory.mktemp("dist")
    cfg = digits(u_init="uniform")
    ref = single(cfg, root / "single")
    spawn(2, cfg, root / "two")
    return cfg, root, ref


def test_two_processes_equal_one_process(sharded):
    cfg, root, ref = sharded
    manifest, parts = rank_files(root / "two")
    assert manifest["world_size"] == 2 and manifest["epoch"] == EPOCHS
    n = ref["method_state"]["z"][0].shape[0]
    for r, ck in enumerate(parts):
        a, b = D.shard_range(n, r, 2)
        for key in ("z", "u"):
            for t, rows in enumerate(ck["method_state"][key]):
                assert rows.shape[0] == b - a  # each rank holds only its half
                assert max_diff(rows, ref["method_state"][key][t][a:b]) < 1e-5, (key, t, r)
        for name, p in ref["net"].items():
            assert max_diff(ck["net"][name], p) < 1e-5, name
    # the U draw is random, the run learned, and the logged (reduced) metrics match
    assert float(ref["method_state"]["u"][0].abs().max()) > 0
    m1, m2 = read_metrics(root / "single"), read_metrics(root / "two")
    assert [m["epoch"] for m in m2] == list(range(EPOCHS + 1))
    for x, y in zip(m1, m2):
        for k in ("train_loss", "test_accuracy", "train_accuracy"):
            assert abs(x[k] - y[k]) < 1e-5, k
        assert (
            max(abs(p - q) for p, q in zip(x["residuals"] + x["dual_norms"], y["residuals"] + y["dual_norms"])) < 1e-5
        )
    assert m2[-1]["test_accuracy"] > 0.5
    # Z/U bytes: half per process
    per_rank = m2[-1]["state_bytes_per_rank"]
    assert len(per_rank) == 2 and sum(per_rank) == m1[-1]["state_bytes"]
    assert max(per_rank) <= m1[-1]["state_bytes"] / 2 + 2 * 8 * 266  # at most one row more than half
    # rank 0 alone writes status and summary
    assert json.loads((root / "two" / "status.json").read_text())["state"] == "finished"
    assert json.loads((root / "two" / "summary.json").read_text())["epochs"] == EPOCHS


def test_killed_run_resumes_where_unbroken_run_ends(sharded):
    cfg, root, _ = sharded
    run = root / "killed"
    with pytest.raises(
        (mp.ProcessExitedException, mp.ProcessRaisedException)
    ):  # rank 1 is SIGKILLed in epoch 2; spawn tears the other one down
        spawn(2, cfg, run, die_mid_epoch=EPOCHS - 0.5)
    assert json.loads((run / D.MANIFEST).read_text())["epoch"] == EPOCHS - 1
    spawn(2, cfg, run, resume=True)
    _, resumed = rank_files(run)
    _, unbroken = rank_files(root / "two")
    for ck, ref in zip(resumed, unbroken):
        assert ck["epoch"] == EPOCHS
        for key in ("z", "u"):
            for a, b in zip(ck["method_state"][key], ref["method_state"][key]):
                assert max_diff(a, b) < 1e-6
        for name, p in ref["net"].items():
            assert max_diff(ck["net"][name], p) < 1e-6
    assert [m["epoch"] for m in read_metrics(run)] == list(range(EPOCHS + 1))
    assert len(list(run.glob("checkpoint-rank*.pt"))) == 2  # older epochs' files are gone


def test_resume_with_another_world_size_names_both(sharded, tmp_path):
    cfg, root, _ = sharded
    run = tmp_path / "copy"
    shutil.copytree(root / "two", run)
    with pytest.raises(ConfigError, match=r"written by 2 process\(es\) but this run has 1"):
        train(cfg, run, resume=True)
    # and a single-process checkpoint refuses a 2-process resume the same way (checked without a group)
    assert D.checkpoint_world(root / "single") == 1 and D.checkpoint_world(root / "two") == 2


def test_jacobi_sweep_differs_from_gauss_seidel_and_matches_hand_reference():
    """T = 2 linear blocks, one Z sweep on 3 rows: Z_1 sees the old Z_2 (Jacobi) or the new one."""
    from admm_core.methods.zsweep import reverse_z_sweep

    torch.manual_seed(0)
    W1, W2 = torch.randn(4, 3), torch.randn(2, 4)
    blocks = [lambda z: z @ W1.T, lambda z: z @ W2.T]
    x, z1, z2, u1, u2 = torch.randn(3, 3), torch.randn(3, 4), torch.randn(3, 2), torch.randn(3, 4), torch.randn(3, 2)
    y = torch.randn(3, 2)
    b, lr = 0.7, 0.1
    cpl = [lambda r, u=u: 0.5 * b * (r + u).pow(2).sum() for u in (u1, u2)]
    step = lambda t, z, g: z - lr * g  # noqa: E731
    J = lambda z: 0.5 * (z - y).pow(2).sum()  # noqa: E731
    z2_new = z2 - lr * ((z2 - y) + b * (z2 - z1 @ W2.T + u2))
    for jacobi, z2_seen in ((False, z2_new), (True, z2)):
        got = reverse_z_sweep(blocks, x, [z1, z2], J, cpl, step, jacobi=jacobi)
        # ∇_{Z_1}: β(Z_1 − X W1ᵀ + U_1) − β(Z_2 − Z_1 W2ᵀ + U_2) W2
        g1 = b * (z1 - x @ W1.T + u1) - b * (z2_seen - z1 @ W2.T + u2) @ W2
        assert torch.allclose(got[0], z1 - lr * g1, atol=1e-6)
        assert torch.allclose(got[1], z2_new, atol=1e-6)


# the settings that drifted in the old forked block-parallel code: per-block ζ, scaled steps and
# an adaptive penalty whose β cap binds (rho_bound small: it fires at once; 1 → min(2, 1.5))
DRIFTED = dict(
    z_sweep="jacobi",
    parallel="blocks",
    # parallel = 'blocks' runs Alg. 1's sweep schedule (digits-mlp's default is the minibatch recipe), here
    # with the step sizes digits-mlp had for it (at η = 2e-3 float rounding drifts past 1e-5 in 2 epochs)
    lr=5e-4,
    primal_steps=3,
    iters_per_epoch=3,
    z_schedule="sweep",
    z_start="previous",
    dual_theta="new",
    theta_input="new",
    z_lr=[0.3, 0.4, 0.5],
    z_step="scaled",
    adaptive_rho=True,
    rho_bound=1e-3,
    beta_max=1.5,
)


@pytest.fixture(scope="module")
def blocks_ref(tmp_path_factory):
    """One process, BlockADMM with the Jacobi sweep and the DRIFTED settings (parallel is ignored there)."""
    root = tmp_path_factory.mktemp("blocks")
    cfg = digits(**DRIFTED)
    return cfg, root, single(cfg, root / "single")


def check_blocks_equal_single(root, run, ref, world, T=3):
    """Metrics, network and each rank's own Z, U equal the one-process run (to float tolerance)."""
    m1, mw = read_metrics(root / "single"), read_metrics(run)
    assert [m["epoch"] for m in mw] == list(range(EPOCHS + 1))
    assert [m["betas"] for m in m1] == [m["betas"] for m in mw]  # the adaptive penalty and its cap
    for x, y in zip(m1, mw):
        for k in ("residuals", "dual_norms", "lipschitz", "z_lr_eff", "backprop_cosine"):
            assert len(x[k]) == len(y[k]) and max(abs(p - q) for p, q in zip(x[k], y[k])) < 1e-5, (k, x[k], y[k])
        for k in ("train_loss", "test_accuracy", "train_accuracy"):
            assert abs(x[k] - y[k]) < 1e-5, k
    assert mw[-1]["world_size"] == world
    _, parts = rank_files(run)
    owner = [r for r in range(world) for _ in range(*D.shard_range(T, r, world))]
    for r, ck in enumerate(parts):
        for name, p in ref["net"].items():  # every rank ends the epoch with the whole network
            assert max_diff(ck["net"][name], p) < 1e-5, (r, name)
        ms = ck["method_state"]
        for t in range(T):
            if owner[t] == r:  # its own blocks: Z_t and U_t of every row
                assert max_diff(ms["z"][t], ref["method_state"]["z"][t]) < 1e-5, (r, t)
                assert max_diff(ms["u"][t], ref["method_state"]["u"][t]) < 1e-5, (r, t)
            elif t + 1 < T and owner[t + 1] == r:  # the input of its first block
                assert max_diff(ms["z"][t], ref["method_state"]["z"][t]) < 1e-5, (r, t)
            else:
                assert ms["z"][t].numel() == 0 and ms["u"][t].numel() == 0  # nothing of another's block


def test_block_parallel_three_processes_equal_one_process_with_every_setting(blocks_ref):
    """The same settings (per-block ζ, z_step=scaled, adaptive β with a binding cap) in one process and
    in three (one block each): the same β, residuals, L_t, ζ_eff, network and Z."""
    cfg, root, ref = blocks_ref
    betas = [m["betas"] for m in read_metrics(root / "single")]
    assert betas[0] == [1.0] * 3 and betas[-1] == [1.5] * 3  # the penalty fired and the cap bound it
    spawn(3, cfg, root / "three")
    check_blocks_equal_single(root, root / "three", ref, 3)
    gs = single(digits(**{**DRIFTED, "z_sweep": "gauss-seidel"}), root / "gs")
    assert max_diff(gs["method_state"]["z"][0], ref["method_state"]["z"][0]) > 1e-4  # the sweep order matters


def test_block_parallel_two_processes_for_three_blocks(blocks_ref):
    """Rank 0 owns block 1, rank 1 blocks 2 and 3 (the message between them stays in memory): same numbers."""
    cfg, root, ref = blocks_ref
    spawn(2, cfg, root / "two")
    check_blocks_equal_single(root, root / "two", ref, 2)
    per_rank = read_metrics(root / "two")[-1]["state_bytes_per_rank"]
    ms = ref["method_state"]
    z = [t.numel() * t.element_size() for t in ms["z"]]
    assert per_rank == [2 * z[0], z[0] + 2 * (z[1] + z[2])]  # Z and U of its blocks, plus its input copy


def test_block_parallel_killed_run_resumes_where_unbroken_run_ends(blocks_ref):
    """Each rank's checkpoint holds only its blocks (the others' Z, U are empty placeholders) and the
    β, ζ and power-iteration state; a run killed in epoch 2 resumes to the unbroken run's numbers."""
    cfg, root, _ = blocks_ref
    if not (root / "three" / D.MANIFEST).exists():
        spawn(3, cfg, root / "three")
    run = root / "three-killed"
    with pytest.raises((mp.ProcessExitedException, mp.ProcessRaisedException)):
        spawn(3, cfg, run, die_mid_epoch=EPOCHS - 0.5)
    assert json.loads((run / D.MANIFEST).read_text())["epoch"] == EPOCHS - 1
    spawn(3, cfg, run, resume=True)
    _, resumed = rank_files(run)
    _, unbroken = rank_files(root / "three")
    for ck, ref in zip(resumed, unbroken):
        assert ck["epoch"] == EPOCHS and ck["method_state"]["beta"] == ref["method_state"]["beta"]
        for key in ("z", "u"):
            for a, b in zip(ck["method_state"][key], ref["method_state"][key]):
                assert a.shape == b.shape and max_diff(a, b) < 1e-6
        for name, p in ref["net"].items():
            assert max_diff(ck["net"][name], p) < 1e-6


def test_block_parallel_refuses_what_it_cannot_run():
    from admm_core.methods import make_method

    jac = make_method("block-admm", {"z_sweep": "jacobi", "parallel": "blocks", "z_schedule": "sweep"})
    with pytest.raises(ConfigError, match="T = 3 blocks but world size 4"):
        D.block_world(jac, 0, 4, 3)
    assert D.block_world(jac, 1, 2, 3).owner == (0, 1, 1)
    with pytest.raises(ConfigError, match="z_sweep"):
        D.block_world(make_method("block-admm", {"parallel": "blocks", "z_schedule": "sweep"}), 0, 3, 3)
    with pytest.raises(ConfigError, match="z_schedule"):
        D.block_world(make_method("block-admm", {"z_sweep": "jacobi", "z_schedule": "minibatch"}), 0, 3, 3)


def test_dashboard_worker_command_under_torchrun():
    from app.dashboard.workers import worker_command

    assert worker_command(["--out", "R"])[1:4] == ["-m", "admm_core", "train"]
    cmd = worker_command(["--out", "R"], processes=2)
    assert cmd[1:7] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m"]
    assert cmd[7:] == ["admm_core", "train", "--out", "R", "--quiet"]
    with pytest.raises(ValueError, match="processes = 0"):
        worker_command([], processes=0)


def test_dashboard_start_with_two_processes_runs_to_the_end(tmp_path, monkeypatch):
    """What the Train page's Start does with Processes = 2: a real torchrun worker whose two
    ranks each hold half of Z/U, finishing like any run."""
    import time

    from app.dashboard import workers as W

    monkeypatch.setenv("ADMM_RUNS", str(tmp_path))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    run_dir = W.start_run(digits().replace(train__epochs=1), tmp_path, processes=2)
    deadline = time.time() + 300
    while W.state_of(run_dir)["state"] in ("starting", "running") and time.time() < deadline:
        time.sleep(0.5)
    assert W.state_of(run_dir)["state"] == "finished", W.log_tail(run_dir)
    m = read_metrics(run_dir)[-1]
    per_rank = m["state_bytes_per_rank"]
    assert m["world_size"] == 2 and len(per_rank) == 2 and sum(per_rank) == m["state_bytes_total"]
    assert max(per_rank) <= 0.51 * m["state_bytes_total"]


def test_gotmare_sharded_equals_single_process(tmp_path):
    cfg = digits("gotmare").replace(train__epochs=1)
    ref = single(cfg, tmp_path / "single")
    spawn(2, cfg, tmp_path / "two")
    _, parts = rank_files(tmp_path / "two")
    n = ref["method_state"]["z"][0].shape[0]
    for r, ck in enumerate(parts):
        a, b = D.shard_range(n, r, 2)
        for t, rows in enumerate(ck["method_state"]["z"]):
            assert max_diff(rows, ref["method_state"]["z"][t][a:b]) < 1e-5
        assert all(float(u.abs().max()) == 0 for u in ck["method_state"]["u"])  # no duals
        for name, p in ref["net"].items():
            assert max_diff(ck["net"][name], p) < 1e-5, name
    m1, m2 = read_metrics(tmp_path / "single")[-1], read_metrics(tmp_path / "two")[-1]
    assert max(abs(p - q) for p, q in zip(m1["residuals"], m2["residuals"])) < 1e-5


def test_a_stop_asked_of_one_rank_stops_every_rank(tmp_path):
    """SIGTERM reaches one rank (the dashboard signals rank 0): all ranks stop at the same poll."""
    spawn(2, digits(), tmp_path / "run", stop_rank0_at=1.4)  # returns: no rank hangs in a collective
    assert json.loads((tmp_path / "run" / "status.json").read_text())["state"] == "stopped"
    assert json.loads((tmp_path / "run" / D.MANIFEST).read_text())["epoch"] == 1  # resumable


def test_a_method_of_one_process_is_refused_under_torchrun_as_the_preflight_refuses_it(monkeypatch):
    """The launcher's refusal is the preflight's (one message, from spec.resources.multi_process_problem)."""
    from admm_core.methods import make_method
    from admm_core.spec.resources import preflight_problems

    monkeypatch.setattr(D, "world_size", lambda: 2)
    with pytest.raises(ConfigError) as got:
        D.distribute(make_method("sgd"), None, None)
    said = preflight_problems(preset_config("mnist5k-mlp", "sgd"), 2)["processes"]
    assert str(got.value) == "world size = 2: only block-admm and gotmare run on several processes (method 'sgd')"
    assert said == "processes = 2: only block-admm and gotmare run on several processes (method 'sgd')"


def test_admm_train_under_torchrun_refuses_what_the_form_refuses(tmp_path, monkeypatch):
    """``admm train`` under torchrun on one machine runs the preflight with its world size, as the
    dashboard's Processes field does: a method of one process, and worker processes that do not fit
    in memory together (the run alone does), are refused before any run directory exists, by field."""
    from helpers import cli_call

    from admm_core.cli import make_parser
    from admm_core.cli.train import config_from_args, processes_here
    from admm_core.spec import resources

    monkeypatch.setattr(D, "world_size", lambda: 2)  # torchrun --standalone --nproc-per-node 2, all here
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    runs = tmp_path / "runs"
    monkeypatch.setenv("ADMM_RUNS", str(runs))
    rc, _, err = cli_call(["train", "--method", "sgd", "--epochs", "1", "--device", "cpu"])
    assert rc == 2 and "processes = 2: only block-admm and gotmare run on several processes (method 'sgd')" in err
    argv = ["train", "--epochs", "1", "--device", "cpu", "--hidden", "32,16", "--train-limit", "200"]
    one = resources.estimate_memory(config_from_args(make_parser().parse_args(argv)))
    per_process = one["data_bytes"] + one["param_bytes"] + one["optimizer_bytes"]
    room = one["total_bytes"] + per_process // 2  # the run alone fits; two processes do not
    monkeypatch.setattr(resources, "available_memory", lambda device="cpu": (room, "available CPU RAM"))
    rc, _, err = cli_call(argv)
    assert rc == 2 and "error: processes = 2: each process holds the data, the network and its optimizer" in err, err
    assert "(available CPU RAM); use fewer processes" in err
    assert not runs.exists() or not any(runs.iterdir())
    assert processes_here() == 2
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")  # across machines: the preflight checks this machine's process
    assert processes_here() == 1
