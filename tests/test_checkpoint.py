"""Checkpoint and resume: a run killed and resumed ends with the uninterrupted run's weights, bit
for bit (simulated here; under mpiexec in tests/test_mpi), and what cannot be resumed is refused."""

import csv
import json
from collections import Counter

import numpy as np
import pytest

from sim import run
from tests.programs import faults_file

BASE = [
    "--dataset",
    "mnist-subset",
    "--iterations",
    "20",
    "--batch-size",
    "32",
    "--eval-every",
    "4",
    "--no-progress",
    "--compute",
    "profile",
    "--latency",
    "1us",
]


def _sim(tmp_path, argv):
    profile = tmp_path / "p.toml"
    profile.write_text("[compute]\nseconds_per_sample = 1e-4\n")
    return run.main([*BASE, "--profile", str(profile), *argv])


def _weights(folder):
    with np.load(folder / "model.npz") as npz:
        return {k: npz[k] for k in npz.files}


@pytest.mark.parametrize(
    "argv",
    [
        ["--nodes", "4", "--algorithm", "allreduce", "--compress", "topk:0.1", "--error-feedback"],
        [
            "--nodes",
            "4",
            "--algorithm",
            "allreduce",
            "--local-steps",
            "5",
            "--optimizer",
            "momentum",
        ],
        ["--nodes", "4", "--algorithm", "gossip", "--topology", "rotating"],
        ["--nodes", "3", "--algorithm", "ps"],
        ["--nodes", "1", "--algorithm", "serial"],
    ],
    ids=["allreduce-topk-ef-adam", "local-sgd-5", "gossip-rotating", "sync-ps", "serial"],
)
def test_a_killed_run_resumed_ends_with_the_uninterrupted_weights_bit_for_bit(tmp_path, argv):
    assert _sim(tmp_path, [*argv, "--out", str(tmp_path / "whole")]) == 0
    rank = int(argv[1]) - 1  # the last rank (a worker, but for serial)
    kill = faults_file(tmp_path, {"rank": rank, "step": 13, "kind": "kill"})
    cut = tmp_path / "cut"
    status = _sim(tmp_path, [*argv, "--checkpoint-every", "5", "--faults", kill, "--out", str(cut)])
    assert status == 3
    assert sorted(p.name for p in (cut / "checkpoint").iterdir())[:2] == [
        "rank0-step10.npz",
        "rank0-step5.npz",
    ]
    assert _sim(tmp_path, [*argv, "--checkpoint-every", "5", "--resume", str(cut)]) == 0
    whole, resumed = _weights(tmp_path / "whole"), _weights(cut)
    assert whole.keys() == resumed.keys()
    assert all(np.array_equal(whole[k], resumed[k]) for k in whole)
    summary = json.loads((cut / "summary.json").read_text())
    assert summary["status"] == "done" and summary["iterations"] == 20
    with open(cut / "steps.csv") as fh:
        rows = Counter((r["rank"], int(r["iteration"])) for r in csv.DictReader(fh))
    assert set(rows.values()) == {1} and len(rows) == 20 * int(argv[1])  # each step once
    with open(cut / "metrics.csv") as fh:
        assert [int(r["iteration"]) for r in csv.DictReader(fh)] == [4, 8, 12, 16, 20]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--algorithm", "ps", "--mode", "async", "--checkpoint-every", "5"],
            "--checkpoint-every needs a synchronous run: --mode async has messages in flight",
        ),
        (
            ["--algorithm", "allreduce", "--local-steps", "4", "--checkpoint-every", "6"],
            "--checkpoint-every 6 must be a multiple of --local-steps 4",
        ),
        (
            ["--algorithm", "gossip", "--compress", "topk:0.1", "--checkpoint-every", "5"],
            "CHOCO gossip",
        ),
        (
            ["--algorithm", "allreduce", "--checkpoint-every", "0"],
            "--checkpoint-every must be >= 1",
        ),
        (["--ghost", "resnet18", "--checkpoint-every", "5"], "--ghost carries no weights"),
    ],
)
def test_what_cannot_be_checkpointed_is_refused(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as stop:
        _sim(tmp_path, ["--nodes", "4", *argv, "--out", str(tmp_path / "r")])
    assert stop.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


def test_a_resume_with_other_options_or_no_checkpoint_is_refused(tmp_path, capsys):
    argv = ["--nodes", "2", "--algorithm", "allreduce"]
    assert _sim(tmp_path, [*argv, "--out", str(tmp_path / "plain")]) == 0
    assert _sim(tmp_path, [*argv, "--checkpoint-every", "5", "--out", str(tmp_path / "ck")]) == 0
    for extra, message in (
        (["--resume", str(tmp_path / "plain")], "no checkpoint that every rank has"),
        (
            ["--resume", str(tmp_path / "ck"), "--lr", "0.1"],
            "--resume: --lr is 0.1 here but 0.003 in the run resumed",
        ),
        (["--resume", str(tmp_path / "nowhere")], "not a run folder"),
    ):
        capsys.readouterr()
        with pytest.raises(SystemExit) as stop:
            _sim(tmp_path, [*argv, *extra])
        assert stop.value.code == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], lines
    assert not (tmp_path / "nowhere").exists()
    checkpoint = tmp_path / "ck" / "checkpoint"
    assert sorted(p.name for p in checkpoint.iterdir()) == [  # the two newest, no temp file
        "rank0-step10.npz",
        "rank0-step15.npz",
        "rank1-step10.npz",
        "rank1-step15.npz",
    ]
