"""DeepFacto in the registries: the method (``METHODS["deepfacto"]``), its data set (``DATASETS["lfwa"]``)
and its backbone (``ARCHS["face-resnet18s"]``), each saying which kind of run it serves; the network
engine's menus leave them out, the preflight names a mismatch, a run's config.json records its kind."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import torch

from admm_core.deepfacto.trainer import DeepFactoState
from admm_core.errors import ConfigError
from admm_core.spec import datasets as data
from admm_core.spec import kinds
from admm_core.spec.archs import ARCHS, archs_for
from admm_core.spec.config import RunConfig
from admm_core.spec.deepfacto import DeepFactoConfig, records, run_config_dict
from admm_core.spec.faces import FACE_ARCH, FACE_FEATURES
from admm_core.spec.methods import METHODS, make_settings, names_for
from admm_core.spec.methods.base import StateSizes
from admm_core.spec.methods.deepfacto import DeepFacto
from admm_core.spec.resources import estimate_memory, preflight_problems
from app.dashboard import charts as C
from app.dashboard import form as F
from tests.helpers import cli_call

SHARED = Path(os.environ.get("ADMM_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def test_each_record_says_the_kind_of_run_it_serves():
    assert METHODS["deepfacto"] is DeepFacto and DeepFacto.kind == kinds.DEEPFACTO
    assert data.DATASETS["lfwa"].kind == kinds.DEEPFACTO and data.DATASETS["lfwa"].labels == "attributes"
    assert ARCHS[FACE_ARCH].kind == kinds.DEEPFACTO
    assert "deepfacto" not in names_for(kinds.NETWORK) and names_for(kinds.DEEPFACTO) == ("deepfacto",)
    assert "lfwa" not in data.names_for(kinds.NETWORK) and FACE_ARCH not in archs_for(kinds.NETWORK)
    for kind in kinds.KINDS:  # every kind has a method, a data set and an architecture
        assert names_for(kind) and data.names_for(kind) and archs_for(kind)
    assert records() == ("lfwa", FACE_ARCH)  # DeepFacto's data set and block 1: the records of its kind


def test_the_network_menus_leave_deepfacto_out():
    fields = {f.path: f for f in F.FIELDS}
    menu = {path: F.choices(fields[path]) for path in ("method", "model.arch", "data.name")}
    assert "deepfacto" not in menu["method"] and "block-admm" in menu["method"]
    assert FACE_ARCH not in menu["model.arch"] and "resnet18" in menu["model.arch"]
    assert "lfwa" not in menu["data.name"]
    rc, _, err = cli_call(["train", "--arch", FACE_ARCH])
    assert rc == 2 and "invalid choice" in err


def test_the_command_line_lists_the_deepfacto_records():
    rc, out, _ = cli_call(["archs"])
    assert rc == 0 and f"{FACE_ARCH}: " in out and "expand" in out and "deepfacto runs" in out
    rc, out, _ = cli_call(["datasets"])
    line = next(ln for ln in out.splitlines() if ln.startswith("lfwa:"))
    assert "input (3, 64, 64), 40 attributes, 10502 / 2641 samples" in line and "lfw/lfwa_att_40.csv" in line
    rc, out, _ = cli_call(["methods"])
    assert rc == 0 and "deepfacto: " in out and "rank = 32" in out


def test_the_lfwa_record_matches_the_labels_and_the_split():
    """The record's sizes are the default identity split of the labelled faces (labels only: no pixels)."""
    from admm_core.faces.lfw import load_lfwa
    from admm_core.spec.faces import LFWA_SEED, LFWA_TEST_FRACTION

    if "lfwa" not in data.available(str(SHARED)):
        pytest.skip(f"LFWA not found under {SHARED}")
    assert "lfwa" not in data.available(str(SHARED), kind=kinds.NETWORK)
    faces = load_lfwa(str(SHARED), size=None)
    tr, te = faces.split(LFWA_SEED, LFWA_TEST_FRACTION)
    s = data.DATASETS["lfwa"]
    assert (s.n_classes, s.n_train, s.n_test) == (faces.attributes.shape[1], len(tr), len(te))
    cfg = DeepFactoConfig()  # DeepFacto's defaults read the record: the same faces, the same split
    assert (cfg.image_size, cfg.test_fraction) == (s.input_shape[-1], LFWA_TEST_FRACTION)


def test_the_state_estimate_is_the_state_deepfacto_keeps():
    """estimate_state_bytes (arithmetic, no torch) = the bytes of a DeepFactoState of those shapes."""
    n, hw, rank, d = 6, 8 * 8, 4, 16
    method = DeepFacto(rank=rank, emb_dim=d)
    z = lambda *shape: torch.zeros(*shape)  # noqa: E731
    big = (n, FACE_FEATURES, hw)
    state = DeepFactoState(z(*big), z(*big), z(*big), z(*big), z(n, rank, hw), z(FACE_FEATURES, rank), z(n, d), z(n, d))
    sizes = StateSizes(n, 32, (FACE_FEATURES * hw, d), ())
    assert method.estimate_state_bytes(sizes) == state.nbytes()


def _face_run(**kw) -> RunConfig:
    return RunConfig(method="deepfacto").replace(data__name="lfwa", model__arch=FACE_ARCH, model__width=16, **kw)


def test_the_preflight_names_a_method_asked_of_another_kinds_data_or_network():
    on_digits = preflight_problems(RunConfig(method="deepfacto"), datasets=["digits"])
    assert set(on_digits) == {"data.name", "model.arch"}
    assert "method 'deepfacto' trains on: lfwa" in on_digits["data.name"]
    assert f"method 'deepfacto' trains: {FACE_ARCH}" in on_digits["model.arch"]
    face_arch_only = _face_run().replace(data__name="digits")
    assert set(preflight_problems(face_arch_only, datasets=["digits"])) == {"data.name"}
    sgd_on_faces = RunConfig(method="sgd").replace(data__name="lfwa")
    problems = preflight_problems(sgd_on_faces, datasets=["lfwa"])
    assert (
        set(problems) == {"data.name"}
        and "a data set of deepfacto runs; method 'sgd' trains on: digits" in problems["data.name"]
    )
    # matching kinds: no mismatch, and the memory estimate counts DeepFacto's own state
    ok = _face_run(data__train_limit=100)
    assert not {"data.name", "model.arch"} & set(preflight_problems(ok, datasets=["lfwa"], free=(1 << 40, "test")))
    z1 = FACE_FEATURES * 8 * 8  # C × 64/8 × 64/8 per face
    assert estimate_memory(ok)["state_bytes"] == 4 * (100 * (4 * z1 + 32 * 64 + 2 * 128) + FACE_FEATURES * 32)


def test_a_run_config_records_its_kind():
    cfg = RunConfig(method="gotmare")
    d = json.loads(cfg.to_json())
    assert d["kind"] == kinds.NETWORK and kinds.run_kind(d) == kinds.NETWORK
    assert RunConfig.from_dict(d) == cfg
    del d["kind"]  # a config.json written before the kind was recorded
    assert RunConfig.from_dict(d) == cfg
    with pytest.raises(ConfigError, match="kind.*choose from"):
        RunConfig.from_dict({**d, "kind": "cooking"})
    with pytest.raises(ConfigError, match="method 'gotmare' makes runs of kind 'network'"):
        RunConfig.from_dict({**d, "kind": kinds.DEEPFACTO})
    # a DeepFacto run's config.json: the kind, method, data set and backbone are the registry's
    df = run_config_dict(DeepFactoConfig(rank=4))
    assert (df["kind"], df["method"], df["data"]["name"], df["model"]["arch"]) == (
        "deepfacto",
        "deepfacto",
        "lfwa",
        FACE_ARCH,
    )
    assert kinds.run_kind(df) == kinds.run_method(df) == kinds.DEEPFACTO


def test_the_live_charts_are_the_methods_declaration():
    spec = C.live_spec(method="deepfacto")
    assert list(spec) == ["accuracy", "loss", "seconds", *DeepFacto.live_metrics]
    assert {c["xtitle"] for c in spec.values()} == {"epoch"}
    assert spec["accuracy"]["title"] == DeepFacto.live_accuracy
    assert spec["residuals"]["series"][0]["names"] == list(DeepFacto.live_charts["residuals"]["names"])
    assert [s["key"] for s in spec["nmf"]["series"]] == [k for k, _ in DeepFacto.live_charts["nmf"]["lines"]]
    net = C.live_spec(method="block-admm")
    assert {c["xtitle"] for c in net.values()} == {"epoch"} and "nmf" not in net


def test_runs_saved_before_the_renames_still_load(tmp_path):
    """train_limit, warmup_iters and finetune_iters (the names before admm_images, warmup_epochs and
    finetune_epochs) load from a saved config.json, the Train form and a link; typed anew they are refused
    with the new name."""
    from admm_core.errors import ConfigError
    from admm_core.spec.deepfacto import DeepFactoConfig, read_run_config

    old = {"rank": 4, "train_limit": 300, "warmup_iters": 5, "finetune_iters": 2, "seed": 3}
    (tmp_path / "config.json").write_text(json.dumps({"kind": "deepfacto", "deepfacto": old}))
    cfg = read_run_config(tmp_path)
    assert (cfg.admm_images, cfg.warmup_epochs, cfg.finetune_epochs, cfg.epochs) == (300, 5, 2, 7)
    assert cfg.rank == 4 and cfg.seed == 3
    values = F.deepfacto_form(old)
    assert (values["df.admm_images"], values["df.warmup_epochs"], values["df.finetune_epochs"]) == (300, 5, 2)
    values, warnings = F.from_query({"mode": "deepfacto", "df.warmup_iters": "9", "df.train_limit": "100"})
    assert not warnings and values["df.warmup_epochs"] == 9 and values["df.admm_images"] == 100
    with pytest.raises(ConfigError, match="train_limit → admm_images"):
        DeepFactoConfig.from_dict({"train_limit": 300})


def test_deepfacto_settings_are_declared_once():
    """The method and a run's config share one declaration of the algorithm's settings, the method's
    record (one base: MethodBase): the same fields, defaults and help, and a bad value is refused by
    the same check in both."""
    from admm_core.errors import ConfigError
    from admm_core.spec.deepfacto import DeepFactoConfig, field_help
    from admm_core.spec.methods.base import MethodBase

    assert DeepFacto.__bases__ == (MethodBase,) and DeepFactoConfig.__bases__ == (DeepFacto,)
    declared = {f.name: f for f in dataclasses.fields(DeepFacto)}
    assert list(declared) == [f.name for f in dataclasses.fields(DeepFactoConfig)][: len(declared)]
    assert all(field_help()[n] == f.metadata["help"] for n, f in declared.items())
    assert DeepFactoConfig().method == make_settings("deepfacto") == DeepFacto()
    assert DeepFactoConfig(rank=8, gamma=2.0).method == DeepFacto(rank=8, gamma=2.0)
    for bad in ({"gamma": -1.0}, {"s_mode": "free"}, {"nmf_dual_step": 1.5}, {"emb_dim": 0}, {"rank": 0}):
        with pytest.raises(ConfigError) as a:
            make_settings("deepfacto", bad)
        with pytest.raises(ConfigError) as b:
            DeepFactoConfig(**bad)
        assert str(a.value) == str(b.value) and f"deepfacto.{next(iter(bad))}" in str(a.value)


def test_every_deepfacto_setting_has_one_place_in_the_forms_groups():
    """The DeepFacto form places each field by what it sets; every field the form shows is in
    exactly one group (a new field must be placed), and the algorithm's group is the method's own
    declaration (its rank in the main row)."""

    members = [n for names in F.DF_GROUPS.values() for n in names]
    assert len(members) == len(set(members))
    assert sorted("df." + n for n in members) == sorted(F.DF_FIELDS)
    algorithm = ["rank", *F.DF_GROUPS["The algorithm (the method's settings)"]]
    assert sorted(algorithm) == sorted(f.name for f in dataclasses.fields(DeepFacto))
    assert all(F.DF_FIELDS["df." + n].group in ("main", "The algorithm (the method's settings)") for n in algorithm)
