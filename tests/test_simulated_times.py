"""The simulator's times stay what they were unless a change means them to move: the ten
configurations of the Lomonosov-2 study (the seven whose bytes do not depend on the gradients'
values), cluster variants, and the validation matrix's configurations (`analysis.validate`, those
without compression) at 2 and 4 hosts on an emulated 1 Gbit/s cluster's own profile
(``tests/profiles/emulated-1gbit.toml``, written by ``real.calibrate --quick --models mlp`` on
``real.cluster up --hosts 2 --bandwidth 1Gbit``: token-bucket NICs, measured jitter, eager and
rendezvous sends, probe loops, the kernel's TCP stack, shared cores), simulated with compute from
a profile, hashed column by column
(every time and byte count of steps.csv and metrics.csv, summary.json's totals, and the whole
timeline.json, times alone) against
``tests/simulated_times.json``.

Losses, accuracies and weights are left out: they go through BLAS, whose last bits may differ
from one CPU to another; times and bytes are plain Python arithmetic. A change that moves them
on purpose regenerates the file (``python tests/test_simulated_times.py --update``) and says so
in its commit.
"""

import csv
import hashlib
import json
import sys
from pathlib import Path

import pytest

from sim.run import build_parser, simulate
from twinsgd.analysis.study import LOMONOSOV_CONFIGURATIONS
from twinsgd.analysis.validate import CONFIGS as VALIDATION_CONFIGURATIONS
from twinsgd.run.config import parse_command

EXPECTED = Path(__file__).with_name("simulated_times.json")
EMULATED = Path(__file__).with_name("profiles") / "emulated-1gbit.toml"
STEPS_COLUMNS = ("rank", "iteration", "time_s", "compute_s", "comm_s", "wait_s")
STEPS_COLUMNS += ("bytes_sent", "bytes_recv", "staleness")
METRICS_COLUMNS = ("epoch", "iteration", "time_s", "bytes")
SUMMARY_KEYS = ("time_s", "compute_s", "comm_s", "wait_s", "bytes_sent", "iterations")
COMMON = ["--nodes", "4", "--iterations", "40", "--batch-size", "32", "--seed", "1"]
COMMON += ["--dataset", "synthetic", "--profile", "polus-like", "--compute", "profile"]
COMMON += ["--ranks-per-host", "1", "--no-progress"]
CASES = {
    **{name: flags for name, flags in LOMONOSOV_CONFIGURATIONS if "--compress" not in flags},
    "sync PS on a fat tree": ["--algorithm", "ps", "--nodes", "8", "--network", "fat-tree:4"],
    "ring, 2 ranks a host": ["--algorithm", "allreduce", "--nodes", "8", "--ranks-per-host", "2"],
    "async PS with stragglers": [
        "--algorithm",
        "ps",
        "--mode",
        "async",
        "--nodes",
        "5",
        "--stragglers",
        "0.1:3x",
    ],
    "stale-synchronous PS (2)": ["--algorithm", "ps", "--mode", "ssp", "--staleness", "2"],
    "ghost ResNet-50, closed form, Lomonosov-2-like": [
        "--algorithm",
        "allreduce",
        "--ghost",
        "resnet50",
        "--nodes",
        "64",
        "--collectives",
        "closed-form",
        "--profile",
        "lomonosov-2-like",
        "--ranks-per-host",
        "14",
    ],
    "Local-SGD(4), closed form, stragglers, two speeds": [
        "--algorithm",
        "allreduce",
        "--local-steps",
        "4",
        "--nodes",
        "16",
        "--collectives",
        "closed-form",
        "--stragglers",
        "0.2:3x",
        "--speeds",
        "1x,2x",
    ],
    "ghost ResNet-18, 2,000 nodes, Local-SGD(3), closed form": [
        "--algorithm",
        "allreduce",
        "--local-steps",
        "3",
        "--ghost",
        "resnet18",
        "--nodes",
        "2000",
        "--collectives",
        "closed-form",
        "--iterations",
        "10",
        "--batch-size",
        "8",
    ],
    "ring with gamma, MPI's allreduce as Open MPI": [
        "--algorithm",
        "allreduce",
        "--allreduce",
        "mpi",
        "--mpi",
        "openmpi",
        "--gamma",
        "1e-10",
        "--nodes",
        "6",
    ],
}

CASES.update(
    {
        f"validation {name}, {hosts} hosts": [
            *flags,
            "--nodes",
            str(hosts),
            "--profile",
            str(EMULATED),
        ]
        for name, flags in VALIDATION_CONFIGURATIONS.items()
        if "--compress" not in flags
        for hosts in (2, 4)
    }
)


def fingerprint(folder):
    """{file: sha256 of its time and byte columns} of a run folder."""

    def columns(name, keep):
        with open(folder / name, newline="") as fh:
            rows = [[row.get(k, "") for k in keep] for row in csv.DictReader(fh)]
        return hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:16]

    summary = json.loads((folder / "summary.json").read_text())
    kept = {k: summary[k] for k in SUMMARY_KEYS}
    return {
        "steps.csv": columns("steps.csv", STEPS_COLUMNS),
        "metrics.csv": columns("metrics.csv", METRICS_COLUMNS),
        "summary.json": hashlib.sha256(json.dumps(kept).encode()).hexdigest()[:16],
        "timeline.json": hashlib.sha256((folder / "timeline.json").read_bytes()).hexdigest()[:16],
    }


def simulated(name, out):
    """Simulate case ``name`` into ``out``; its fingerprint."""
    argv = [*COMMON, *CASES[name], "--out", str(out)]
    if "--ghost" in argv:
        argv.remove("--dataset"), argv.remove("synthetic")
    simulate(*parse_command(argv, build_parser()), say=lambda _: None)
    return fingerprint(out)


@pytest.mark.parametrize("name", sorted(CASES))
def test_simulated_times_are_as_they_were(tmp_path, name):
    expected = json.loads(EXPECTED.read_text())
    assert simulated(name, tmp_path / "run") == expected[name], (
        f"{name}: simulated times or bytes moved; if on purpose, regenerate "
        f"{EXPECTED.name} with python tests/test_simulated_times.py --update"
    )


if __name__ == "__main__" and sys.argv[1:] == ["--update"]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        table = {name: simulated(name, Path(tmp) / str(i)) for i, name in enumerate(CASES)}
    EXPECTED.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"wrote {EXPECTED}")
