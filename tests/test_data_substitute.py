"""The CIFAR-10-format substitute: Fashion-MNIST padded to 32x32x3, read back through the CIFAR
reader under its own name, the same bytes every time."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from twinsgd.data import load_dataset
from twinsgd.data.cifar import LAYOUTS
from twinsgd.data.substitute import (
    MARKER,
    NAME,
    is_substitute,
    to_cifar_format,
    write_substitute,
)

ROOT = Path(__file__).resolve().parents[1]
DATA = os.environ.get("TWINSGD_DATA")
needs_fashion = pytest.mark.skipif(
    not DATA or not Path(DATA, "fashion-mnist").is_dir(),
    reason="the real Fashion-MNIST (TWINSGD_DATA) is needed",
)


def test_padding_keeps_the_image_in_the_middle_of_black_on_three_equal_channels():
    rng = np.random.default_rng(0)
    images = rng.integers(1, 256, size=(3, 28, 28), dtype=np.uint8)
    out = to_cifar_format(images)
    assert out.shape == (3, 32, 32, 3) and out.dtype == np.uint8
    for c in range(3):
        np.testing.assert_array_equal(out[:, 2:30, 2:30, c], images)
    border = np.ones((32, 32), bool)
    border[2:30, 2:30] = False
    assert not out[:, border].any()


def test_padding_refuses_what_is_not_a_28x28_uint8_image():
    with pytest.raises(ValueError, match=r"\(n, 28, 28\) uint8"):
        to_cifar_format(np.zeros((2, 32, 32), np.uint8))
    with pytest.raises(ValueError, match="uint8"):
        to_cifar_format(np.zeros((2, 28, 28), np.float32))


@pytest.fixture(scope="module")
def substitute(tmp_path_factory):
    """The substitute written once from the shared Fashion-MNIST, and that data set."""
    out = write_substitute(tmp_path_factory.mktemp("sub") / "cifar10-substitute", DATA)
    return out, load_dataset("fashion-mnist", DATA, allow_download=False)


@needs_fashion
@pytest.mark.data
def test_substitute_loads_as_cifar10_format_under_its_own_name(substitute):
    out, fashion = substitute
    ds = load_dataset("cifar10", out)
    assert ds.name == NAME and "Fashion-MNIST" in ds.note and "not CIFAR-10" in ds.note
    assert (ds.input_shape, ds.n_classes, ds.n_train, ds.n_test) == ((32, 32, 3), 10, 50000, 10000)
    for split, rows in (("train", slice(0, 50000)), ("test", slice(None))):
        images, labels = ds.stored(split)
        source_images, source_labels = fashion.stored(split)
        assert images.dtype == np.uint8 and labels.dtype == np.int64
        np.testing.assert_array_equal(labels, source_labels[rows])  # the same labels, in order
        np.testing.assert_array_equal(images, to_cifar_format(source_images[rows]))


@needs_fashion
@pytest.mark.data
def test_substitute_is_the_same_bytes_every_time(substitute, tmp_path):
    out, _ = substitute
    again = write_substitute(tmp_path / "again", DATA)
    folder = Path("cifar10") / LAYOUTS["cifar10"].folder
    for member in (*LAYOUTS["cifar10"].train, *LAYOUTS["cifar10"].test, MARKER):
        first, second = (Path(root, folder, member).read_bytes() for root in (out, again))
        assert hashlib.sha256(first).digest() == hashlib.sha256(second).digest(), member
    assert is_substitute(out / folder)


def test_a_cifar_folder_without_the_marker_is_not_a_substitute(tmp_path):
    assert not is_substitute(tmp_path)
    (tmp_path / MARKER).write_text("x\n")
    assert is_substitute(tmp_path)
    assert not is_substitute(tmp_path / MARKER)  # a file (the tar.gz's place) never is


def test_command_without_fashion_mnist_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "twinsgd.data.substitute", "--out", str(tmp_path / "o"),
         "--data-dir", str(tmp_path / "nothing")],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "data directory does not exist" in done.stderr
