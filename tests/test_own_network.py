"""The Python API for a user's own network (admm_core.own): a CNN defined here and
nowhere else in the project, split by name, trained by three methods of the registry on real MNIST
into ordinary run directories that the dashboard's run list reads; resume after a stop with the
same module; one clear error naming the child for a network that is not a chain."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from helpers import cli_call
from torch import nn

from admm_core import own
from admm_core.compare import run_row
from admm_core.errors import ConfigError
from admm_core.rundir import read_json, read_metrics
from admm_core.spec.datasets import available
from admm_core.spec.presets import preset_config


class SmallCNN(nn.Module):
    """Named children, not an nn.Sequential; its forward flattens before the classifier, as
    torchvision's ResNets do (the one operation the chain allows between two children)."""

    def __init__(self, c=4):
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(1, c, 3, stride=2, padding=1), nn.ReLU())
        self.conv2 = nn.Sequential(nn.Conv2d(c, 2 * c, 3, stride=2, padding=1), nn.BatchNorm2d(2 * c), nn.ReLU())
        self.pool = nn.AdaptiveAvgPool2d(3)
        self.fc = nn.Linear(18 * c, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.conv2(self.conv1(x))), 1))


def mnist_present() -> bool:
    return "mnist" in available(os.environ.get("ADMM_DATA"))


needs_mnist = pytest.mark.skipif(not mnist_present(), reason="MNIST not found (set ADMM_DATA=/work/shared/data)")


@needs_mnist
def test_three_methods_train_a_cnn_from_this_file_and_the_dashboard_lists_them(tmp_path):
    from app.dashboard import charts as C
    from app.dashboard import workers as W

    root, made = tmp_path / "runs", {}
    for method in ("block-admm", "online-admm", "adam"):
        torch.manual_seed(0)
        net = SmallCNN()
        run = own.train(
            net,
            ["conv1", "conv2"],
            "mnist",
            method,
            settings=preset_config("cifar10-resnet18-small", method).method_params,  # the convnet recipe
            train_limit=384,
            test_limit=256,
            epochs=2,
            loss="ce",
            runs_dir=root,
        )
        made[method] = run
        lines = read_metrics(run.dir)
        assert run.summary["status"] == "finished" and [m["epoch"] for m in lines] == [0, 1, 2]
        losses = [m["train_loss"] for m in lines]
        assert losses[2] < losses[1] < losses[0], (method, losses)  # each epoch lowers the training loss
        assert len(lines[-1]["residuals"]) == (0 if method == "adam" else 3)  # T = 3 blocks (adam: end to end)
        chain = own.describe(run.dir)
        assert [r["name"] for r in chain["layers"]] == ["conv1", "conv2", "pool", "fc"]
        assert chain["blocks"] == [["conv1"], ["conv2"], ["pool", "fc"]] and chain["split"] == ["conv1", "conv2"]
        assert [r["out_shape"] for r in chain["block_rows"]] == [[4, 14, 14], [8, 7, 7], [10]]
        # the weights file loads into a fresh instance (safetensors, its own keys) and predicts the same
        x = torch.randn(5, 1, 28, 28)
        fresh = own.load_weights(SmallCNN(), run.dir).eval()
        with torch.no_grad():
            assert torch.equal(fresh(x), net.eval()(x))
    listed = {Path(r["dir"]).name: r for r in W.runs(root)}
    for method, run in made.items():
        r = listed[run.dir.name]
        assert r["config"]["method"] == method and r["config"]["model"]["arch"] == "own"
        assert r["status"]["state"] == "finished" and r["summary"]["test_accuracy"] == run.summary["test_accuracy"]
        metrics = read_metrics(r["dir"])
        fig = C.accuracy_figure(metrics)
        assert [len(t.y) for t in fig.data] == [3, 3]  # train and test accuracy, epochs 0-2
        row = run_row(r["name"], r["config"], r["status"], metrics, {}, {})
        assert row["method"] == method


def digits_images():
    """scikit-learn's 8×8 digits as (N, 1, 8, 8) images: (train, test) tensor pairs."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.data / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    y = torch.tensor(d.target)
    return (x[:400], y[:400]), (x[1500:1700], y[1500:1700])


def test_a_stopped_run_resumes_with_the_same_module_and_refuses_another(tmp_path):
    (x, y), test = digits_images()
    ds = torch.utils.data.TensorDataset(x, y)  # a map-style Dataset
    seen: list[int] = []
    torch.manual_seed(0)
    net = SmallCNN()
    run = own.train(
        net, ["conv2"], ds, "adam", test_data=test, epochs=3, out=tmp_path / "r",
        on_progress=lambda e, m: m and seen.append(m["epoch"]), should_stop=lambda: 1 in seen,
    )  # fmt: skip
    assert run.summary["status"] == "stopped" and [m["epoch"] for m in read_metrics(run.dir)] == [0, 1]
    assert read_json(run.dir / "config.json")["data"]["name"] == "own"
    rc, _, err = cli_call(["train", "--resume", str(run.dir)])  # the CLI has no module to rebuild it from
    assert rc == 2 and "admm_core.own.resume" in err and "Traceback" not in err
    rc, _, err = cli_call(["evaluate", "--run", str(run.dir)])
    assert rc == 2 and "admm_core.own.resume" in err and "Traceback" not in err
    with pytest.raises(ConfigError, match="pass the same data again"):
        own.resume(net, run.dir)
    with pytest.raises(
        ConfigError, match=r"child.*'conv1'.*Sequential', 80\).*the run's \('conv1', 'Sequential', 40\)"
    ):
        own.resume(SmallCNN(c=8), run.dir, ds, test_data=test)
    done = own.resume(net, run.dir, ds, test_data=test)
    lines = read_metrics(run.dir)
    assert done.summary["status"] == "finished" and [m["epoch"] for m in lines] == [0, 1, 2, 3]
    again = own.evaluate(SmallCNN(), run.dir, ds, test_data=test)  # a fresh instance: the checkpoint's weights
    assert again["epoch"] == 3 and again["test_accuracy"] == lines[-1]["test_accuracy"]
    assert (run.dir / "weights.safetensors").exists()


class Skip(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 3)

    def forward(self, x):
        h = self.a(x)
        return self.c(self.b(h) + h)  # a skip connection around b


class Shared(Skip):
    def forward(self, x):
        return self.c(self.a(self.b(self.a(x))))  # a's weights in both blocks when cut after b


class DataDependent(Skip):
    def forward(self, x):
        h = self.a(x)
        if h.sum() > 0:  # control flow on the data: torch.fx cannot trace it
            h = -h
        return self.c(self.b(h))


class Flip(nn.Module):
    def forward(self, h):
        return -h if h.sum() > 0 else h  # control flow on the data, inside a submodule


class WithFlip(Skip):
    def __init__(self):
        super().__init__()
        self.flip = Flip()

    def forward(self, x):
        return self.c(self.b(self.flip(self.a(x))))


class Branchy(Skip):
    def forward(self, x):
        return self.c(nn.functional.dropout(self.b(self.a(x)), 0.5, training=self.training))


def test_cut_points_are_checked_on_the_traced_graph(tmp_path):
    """Each way a cut can be wrong is one ConfigError naming it, before any run directory."""
    data = (torch.randn(8, 4), torch.randint(0, 3, (8,)))

    def refused(model, split, message, **kw):
        with pytest.raises(ConfigError, match=message):
            own.train(model, split, data, "adam", test_data=data, epochs=1, out=tmp_path / "r", **kw)
        assert not (tmp_path / "r").exists()

    # the skip connection h jumps the cut after b: the skip named by its source and its consumer
    refused(Skip(), ["b"], r"'b': the skip from a \(to add\) crosses here.*valid cut points of Skip: a")
    refused(Shared(), ["b"], r"'a' runs in blocks 1, 2")
    refused(DataDependent(), ["a"], r"DataDependent cannot be traced by torch.fx.*control flow")
    refused(Branchy(), ["a"], r"Branchy.forward computes something else in train and in eval mode")
    refused(Skip(), ["nope", "c"], r"'nope': no such module or node; 'c': the network's end")
    refused(Skip(), ["a"], r"leaf_modules.*'zz': no such module", leaf_modules=["zz"])
    # an untraceable submodule is named, and kept whole it trains
    refused(WithFlip(), ["a"], r"WithFlip cannot be traced by torch.fx inside 'flip' \(Flip\).*leaf_modules=\['flip'\]")
    run = own.train(
        WithFlip(), ["flip"], data, "adam", test_data=data, epochs=1, out=tmp_path / "leaf", leaf_modules=["flip"]
    )
    assert run.summary["status"] == "finished" and own.describe(run.dir)["leaf_modules"] == ["flip"]
    # the same skip network cut where one tensor crosses (after a: h feeds both b and the add)
    run = own.train(Skip(), ["a"], data, "block-admm", test_data=data, epochs=1, out=tmp_path / "ok")
    assert run.summary["status"] == "finished" and own.describe(run.dir)["blocks"] == [["a"], ["b", "c"]]


def example_net() -> nn.Module:
    """The MNIST ``Net`` of PyTorch's examples (pytorch/examples, mnist/main.py), as the zoo writes it
    (experiments/zoo_models.py): functional ops in forward, dropout2 assigned before fc1, run after."""
    from helpers import ROOT

    from admm_core import modelfile

    return modelfile.load(f"{ROOT / 'experiments' / 'zoo_models.py'}:Net")[0]


def test_an_invalid_cut_names_the_skip_that_jumps_it_in_module_terms():
    """The why of a cut that two values cross names the skip by the module whose output jumps the
    cut and its consumer, on a hand-written skip net and on torchvision's ResNet-18 (CIFAR stem)."""
    from admm_core import cuts
    from experiments.zoo_models import resnet18_cifar

    def why(model, probe):
        return {n: p.why for p in cuts.cut_points(cuts.trace(model, probe)) for n in p.names}

    assert why(Skip(), torch.zeros(1, 4)) == {"a": "", "b": "the skip from a (to add) crosses here"}
    resnet = why(resnet18_cifar(), torch.zeros(1, 3, 32, 32))
    assert resnet["layer2.0.conv1"] == "the skip from layer1.1 (to layer2.0.downsample.0) crosses here"
    assert resnet["layer1.1.bn2"] == "the skip from layer1.0 (to layer1.1) crosses here"
    assert resnet["layer3.1.conv2"] == "the skip from layer3.0 (to layer3.1) crosses here"
    assert resnet["layer2.0"] == resnet["layer3.1"] == resnet["conv1"] == ""  # between blocks: one tensor


def test_each_residual_block_of_resnet18_is_one_skip_arc_from_its_input_to_its_add():
    """torchvision's ResNet-18 on CIFAR-sized inputs: every BasicBlock's identity or downsample path
    is one arc (``skip_to``), from the row that made the block's input to the row of its add (the
    block's own end), and no other arc; a downsample's layers lie on their block's arc (``on_skip``),
    its cuts no arc of their own (fx runs the main path first; its output then waits beside the
    downsample's, which is that same skip)."""
    import torchvision

    from admm_core import cuts

    net = torchvision.models.resnet18(num_classes=10)
    rows = cuts.table(cuts.trace(net, torch.zeros(2, 3, 32, 32)))
    at = {name: i for i, r in enumerate(rows) for name in [r["name"], *r["also"]]}
    blocks = [p for p, m in net.named_modules() if isinstance(m, torchvision.models.resnet.BasicBlock)]
    want, side = set(), {}
    for b in blocks:
        first = min(i for i, r in enumerate(rows) if r["name"].startswith(b + "."))
        arc = (rows[first - 1]["name"], rows[at[b]]["name"])  # the row before the block's first layer
        want.add(arc)
        side |= {r["name"]: list(arc) for r in rows if r["name"].startswith(b + ".downsample")}
    drawn = [(r["name"], to) for r in rows for to in r["skip_to"]]
    assert len(blocks) == 8 and len(side) == 6, (blocks, side)
    assert sorted(drawn) == sorted(want), sorted(set(drawn) ^ want)
    assert {r["name"]: r["on_skip"] for r in rows if r["on_skip"]} == side
    assert ("layer1", "layer2.0") in want and ("layer3", "layer4.0") in want  # the downsample blocks
    assert at["layer3.1"] == at["layer3"] and rows[at["layer3"]]["also_blocks"] == ["layer3.1"]


def test_the_examples_net_and_a_resnet_cut_inside_a_stage_train_through_the_api(tmp_path):
    """Two networks written by others, as written: the examples' MNIST Net (functional ops, dropout
    out of assignment order) and torchvision's resnet18 (CIFAR stem) cut between two residual blocks
    of a stage; each trains by block-admm, its blocks compute what the module computes, and the
    module handed in is the trained network."""
    import torchvision

    torch.manual_seed(0)
    x = torch.rand(64, 1, 28, 28)
    y = torch.randint(0, 10, (64,))
    net = example_net()
    before = net.fc1.weight.detach().clone()
    run = own.train(
        net, ["conv2", "fc1"], (x, y), "block-admm", test_data=(x[:16], y[:16]), epochs=1, out=tmp_path / "a"
    )
    assert run.summary["status"] == "finished" and not torch.equal(before, net.fc1.weight)
    info = own.describe(run.dir)
    assert info["blocks"] == [["conv1", "conv2"], ["dropout1", "fc1"], ["dropout2", "fc2"]]
    resnet = torchvision.models.resnet18(num_classes=10)
    resnet.conv1, resnet.maxpool = nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.Identity()
    xs = torch.rand(16, 3, 32, 32)
    rows = {r["name"]: r for r in own.cut_table(resnet, xs[:2])}
    assert rows["layer2.0"]["valid"] and rows["layer2.0"]["out_shape"] == [128, 16, 16]
    assert not rows["layer2.0.conv1"]["valid"] and "the skip from layer1.1 " in rows["layer2.0.conv1"]["why"]
    from admm_core.cuts import cut, trace

    blocks, _ = cut(trace(resnet, xs[:2]), ["layer2.0", "layer3.1"])
    resnet.eval()
    z = xs
    with torch.no_grad():
        for b in blocks.values():
            z = b(z)
        assert torch.equal(z, resnet(xs))
    assert blocks["block1"].get_submodule("conv1") is resnet.conv1  # the user's modules, not copies
    yr = torch.randint(0, 10, (16,))
    before = resnet.layer2[1].conv1.weight.detach().clone()
    run = own.train(
        resnet, ["layer2.0", "layer3.1"], (xs, yr), "gotmare", test_data=(xs, yr), epochs=1, out=tmp_path / "r"
    )
    assert run.summary["status"] == "finished" and len(read_metrics(run.dir)[-1]["residuals"]) == 3
    assert not torch.equal(before, resnet.layer2[1].conv1.weight)


def test_bad_split_names_and_settings_are_named_at_once(tmp_path):
    data = (torch.randn(8, 4), torch.randint(0, 3, (8,)))
    seq = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 3))  # children '0', '1', '2'
    with pytest.raises(ConfigError) as e:
        own.train(seq, ["7", "2"], data, "block-admm", test_data=data, epochs=1, out=tmp_path / "r")
    msg = str(e.value)
    assert (
        "'7': no such module or node" in msg
        and "'2': the network's end" in msg
        and "cut points of Sequential: 0, 1" in msg
    )
    with pytest.raises(ConfigError, match="epoch: not a train setting"):
        own.train(seq, ["1"], data, "block-admm", test_data=data, epoch=1)
    with pytest.raises(ConfigError, match="test_data: needed"):
        own.train(seq, ["1"], data, "block-admm", epochs=1)
    with pytest.raises(ConfigError, match="method"):
        own.train(seq, ["1"], data, "no-such-method", test_data=data, epochs=1, out=tmp_path / "r")
    cnn = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(8, 3))
    images = (torch.randn(8, 1, 4, 4), torch.randint(0, 3, (8,)))
    with pytest.raises(ConfigError, match="'admm-closed'.*Conv2d layer"):  # closed-form layer solves
        own.train(cnn, ["0"], images, "admm-closed", test_data=images, epochs=1, out=tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_the_docs_examples_run_as_printed(tmp_path, monkeypatch, capsys):
    """docs/your-own-network.md's two examples, as printed: two methods on the digits CNN, then a resume."""
    import re

    from helpers import ROOT

    text = (ROOT / "docs" / "your-own-network.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 2
    monkeypatch.setenv("ADMM_RUNS", str(tmp_path / "runs"))
    ns: dict = {"__name__": "docs_example"}
    exec(compile(blocks[0], "docs/your-own-network.md", "exec"), ns)
    runs = ns["runs"]
    assert set(runs) == {"block-admm", "adam"} and all(r.summary["status"] == "finished" for r in runs.values())
    assert all(r.dir.parent == tmp_path / "runs" for r in runs.values())
    exec(compile(blocks[1], "docs/your-own-network.md", "exec"), ns)
    assert ns["run"].summary["status"] == "finished" and ns["run"].summary["epochs"] == 3
    assert [m["epoch"] for m in read_metrics(runs["adam"].dir)] == [0, 1, 2, 3]
    assert "block-admm" in capsys.readouterr().out


def test_every_network_method_of_the_registry_trains_an_own_mlp(tmp_path):
    """An nn.Sequential MLP on digits tensors, one epoch by each network method: each run finishes
    with its metrics lines (the lifted baselines' closed-form solves take it too: Linear + ReLU only)."""
    from sklearn.datasets import load_digits

    from admm_core.spec.kinds import NETWORK
    from admm_core.spec.methods import names_for

    d = load_digits()
    x, y = torch.tensor(d.data / 16.0, dtype=torch.float32), torch.tensor(d.target)
    failed = {}
    for method in names_for(NETWORK):
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))
        run = own.train(
            net, ["1"], (x[:200], y[:200]), method, test_data=(x[1500:1600], y[1500:1600]), epochs=1,
            out=tmp_path / method, tensorboard=False,
        )  # fmt: skip
        lines = read_metrics(run.dir)
        if run.summary["status"] != "finished" or [m["epoch"] for m in lines] != [0, 1]:
            failed[method] = run.summary["status"]
    assert not failed and len(names_for(NETWORK)) >= 8


def test_an_own_run_shows_on_the_runs_and_compare_pages(tmp_path, monkeypatch):
    """The dashboard's pages (AppTest) on an own run: the Runs page's details draw its charts and
    its config, Compare draws it beside a CLI-made run; no exception on either page."""
    from helpers import ROOT, tiny
    from streamlit.testing.v1 import AppTest

    from admm_core.network import train as engine_train

    (x, y), test = digits_images()
    root = tmp_path / "runs"
    torch.manual_seed(0)
    run = own.train(SmallCNN(), ["conv2"], (x, y), "adam", test_data=test, epochs=1, runs_dir=root, name="cnn")
    engine_train(tiny("adam", epochs=1), root / "cli-adam")
    monkeypatch.setenv("ADMM_RUNS", str(root))
    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=60).run()
    at.switch_page("views/runs.py").run()
    sel = next(s for s in at.selectbox if (s.key or "").startswith("runs_sel."))
    assert run.dir.name in sel.options
    sel.set_value(run.dir.name).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.get("plotly_chart")  # its accuracy chart
    assert any('"arch":"own"' in str(j.proto.body).replace(" ", "") for j in at.get("json"))  # its config.json
    at = AppTest.from_file(str(ROOT / "app" / "views" / "compare.py"), default_timeout=60)
    at.query_params["runs"] = f"{run.dir.name},cli-adam"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.get("plotly_chart") and len(at.dataframe[0].value) == 2
    # Runs -> "Load into Train" (the ?load= link): the form cannot rebuild a handed-in network, so it
    # keeps its values and the notice says how such a run is resumed
    at = AppTest.from_file(str(ROOT / "app" / "views" / "train.py"), default_timeout=60)
    at.query_params["load"] = run.dir.name
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    said = " ".join(str(m.value) for kind in ("info", "warning", "error", "success") for m in at.get(kind))
    assert "Not loaded into the form" in said and "admm_core.own.resume" in said, said


def test_a_network_of_ones_own_gets_the_measured_recipe_unless_told_otherwise(tmp_path):
    """No settings: block-admm's defaults, the minibatch recipe (nothing recorded as given); given
    settings override it; z_schedule=sweep alone is Alg. 1's schedule; recipe=paper: Alg. 1 as printed."""
    from admm_core.methods import make_method

    data = (torch.randn(32, 4), torch.randint(0, 3, (32,)))
    seq = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))

    def params(out, **kw):
        run = own.train(seq, ["1"], data, "block-admm", test_data=data, epochs=1, out=tmp_path / out, **kw)
        cfg = read_json(run.dir / "config.json")
        return cfg["method_params"], make_method("block-admm", cfg["method_params"])

    given, m = params("own")
    assert given == {}
    assert (m.z_schedule, m.z_start, m.theta_input, m.dual_theta) == ("minibatch", "forward", "start", "old")
    assert (m.bn_mode, m.dual_lr, m.primal_steps, m.lr) == ("train", 0.01, 1, 1e-3)
    given, m = params("lr", settings={"lr": 0.01, "z_schedule": "sweep"})
    assert given == {"lr": 0.01, "z_schedule": "sweep"}
    # the minibatch schedule's own settings read as the sweep has them, the rest stay the recipe's
    assert (m.lr, m.z_schedule, m.z_start, m.theta_input, m.dual_theta) == (0.01, "sweep", "previous", "new", "new")
    assert m.primal_steps == 1 and m.bn_mode == "train"
    given, m = params("paper", settings={"recipe": "paper"})
    assert m.z_schedule == "sweep" and m.z_optimizer == "adam" and m.bn_mode == "eval"  # Alg. 1 as printed
    assert m.primal_steps == 3 and m.dual_lr == 1.0 and m.u_init == "uniform"


def test_a_vision_transformer_cut_between_encoder_layers_trains_by_online_admm(tmp_path):
    """torchvision's VisionTransformer, cut between encoder layers (its class token and position
    embedding read in block 1): online-admm's Lipschitz estimate takes second derivatives through
    attention, which CPU's fused attention kernels do not have."""
    import torchvision

    torch.manual_seed(0)
    vit = torchvision.models.VisionTransformer(
        image_size=16, patch_size=4, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=10
    )
    x, y = torch.randn(64, 3, 16, 16), torch.randint(0, 10, (64,))
    run = own.train(
        vit, ["encoder.layers.encoder_layer_0"], (x, y), "online-admm", test_data=(x[:16], y[:16]), epochs=1,
        batch_size=16, out=tmp_path / "vit", tensorboard=False,
    )  # fmt: skip
    assert run.summary["status"] == "finished", run.summary
    assert own.describe(run.dir)["blocks"][0] == ["conv_proj", "encoder.dropout", "encoder.layers.encoder_layer_0"]
