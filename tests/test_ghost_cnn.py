"""The ghost of our numpy cnn (``--ghost cnn-cifar``) times exactly what the real cnn does.

Notebook 3 times the Lomonosov-2 study's configurations at 16-210 simulated ranks with the ghost
instead of computing every rank's real gradients; this is the proof that the substitution
changes no simulated number: on a preset that charges compute from FLOPs, a run of the real cnn
and a run of its ghost write the same steps.csv (times, compute, communication, waiting, bytes),
step for step and rank for rank. Only the loss column differs (the ghost has no values).
"""

import csv
import json

import numpy as np
import pytest

from models import build_model, profile
from sim import run
from twinsgd.data.cifar import LAYOUTS, encode_records

TIMED = ("time_s", "compute_s", "comm_s", "wait_s", "bytes_sent", "bytes_recv", "staleness")
CIFAR10_RECORDS = 10_000  # per file: 5 training files and one test file, as published


@pytest.fixture(scope="module")
def cifar_format(tmp_path_factory):
    """A --data-dir holding CIFAR-10's binary files of random images and labels, of the
    published sizes (the reader checks them): the timing must not depend on the values."""
    root = tmp_path_factory.mktemp("cifar-format")
    folder = root / "cifar10" / LAYOUTS["cifar10"].folder
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    n = CIFAR10_RECORDS
    images = rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
    raw = encode_records(images, rng.integers(0, 10, size=n), "cifar10")
    for member in (*LAYOUTS["cifar10"].train, *LAYOUTS["cifar10"].test):
        (folder / member).write_bytes(raw)
    return root


def _steps(tmp_path, name, argv):
    """Run sim.run in this process; (steps.csv rows, summary)."""
    out = tmp_path / name
    assert run.main([*argv, "--out", str(out)]) == 0
    with open(out / "steps.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return rows, json.loads((out / "summary.json").read_text())


def test_the_ghost_has_the_cnns_parameters_and_flops():
    cnn = build_model("cnn", (32, 32, 3), 10)
    ghost = profile("cnn-cifar")
    assert ghost.params == cnn.n_params == 34_538
    assert ghost.flops_per_sample == cnn.flops_per_sample == 2 * 4_526_080
    assert (ghost.input_shape, ghost.n_classes) == (cnn.input_shape, cnn.n_classes)


@pytest.mark.parametrize(
    ("preset", "configuration"),
    [
        ("polus-like", ["--algorithm", "allreduce"]),
        ("polus-like", ["--algorithm", "allreduce", "--collectives", "closed-form"]),
        ("lomonosov-2-like", ["--algorithm", "gossip", "--topology", "rotating"]),
        ("lomonosov-2-like", ["--algorithm", "gossip", "--topology", "rotating",
                              "--local-steps", "2", "--collectives", "closed-form"]),
    ],
)  # fmt: skip
def test_a_ghost_cnn_run_times_what_the_real_cnn_run_does(
    tmp_path, cifar_format, preset, configuration
):
    """6 ranks on hosts of 3 (memory and network both carry traffic), 4 steps of batch 100."""
    common = [
        *("--nodes", "6", "--ranks-per-host", "3", "--profile", preset, "--compute", "profile"),
        *("--batch-size", "100", "--iterations", "4", "--seed", "0", "--dataset", "cifar10"),
        *("--optimizer", "adam", "--lr", "0.0001", *configuration),
    ]
    real, real_summary = _steps(
        tmp_path, "real", [*common, "--model", "cnn", "--data-dir", str(cifar_format)]
    )
    ghost, ghost_summary = _steps(tmp_path, "ghost", [*common, "--ghost", "cnn-cifar"])
    assert len(real) == len(ghost) == 6 * 4
    key = ("rank", "epoch", "iteration")
    for r, g in zip(real, ghost, strict=True):
        assert [r[k] for k in key + TIMED] == [g[k] for k in key + TIMED], (r, g)
    for k in ("time_s", "compute_s", "comm_s", "wait_s", "bytes_sent"):
        assert real_summary[k] == ghost_summary[k], k
    assert float(real[0]["compute_s"]) > 0  # compute was charged, from the FLOPs
