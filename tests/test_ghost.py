"""Ghost mode: size-only payloads that cost what real ones cost on the wire, and nothing else."""

import csv
import json

import numpy as np
import pytest

from models import profile
from sim import run
from twinsgd.programs.ghost import GhostArray, ghost_model

ALPHA, BETA = 5e-6, 1.25e9  # 5 us, 10 Gb/s
NETWORK = ["--latency", "5us", "--bandwidth", "10Gbps"]


def _run(tmp_path, argv):
    """Run sim.run in this process; return (summary, steps rows, config)."""
    out = tmp_path / "run"
    assert run.main([*argv, "--out", str(out)]) == 0
    with open(out / "steps.csv") as fh:
        steps = list(csv.DictReader(fh))
    return (
        json.loads((out / "summary.json").read_text()),
        steps,
        json.loads((out / "config.json").read_text()),
    )


def test_a_ghost_has_the_size_of_the_array_it_stands_for():
    g = GhostArray(1001)
    assert (g.nbytes, g.itemsize, g.size, len(g)) == (4004, 4, 1001, 1001)
    assert g[10:500].nbytes == 4 * 490 and g[990:2000].size == 11
    assert (g * 0.5).shape == (1001,) and np.add(g, g, out=g) is g
    assert np.empty_like(g).shape == (1001,) and np.copyto(g, g) is None
    g += 1.0
    g[:3] = 7.0
    assert isinstance(g, GhostArray) and np.isnan(np.linalg.norm(g))


@pytest.mark.parametrize("nodes", [2, 6])
def test_a_timed_entry_costs_what_the_real_backends_barrier_does(tmp_path, nodes):
    """With --measure-wait (the default) the real backend enters each collective through a
    barrier; the simulator pays MPICH's dissemination barrier, ceil(log2 p) rounds of empty
    messages, alpha each, and charges it to wait."""
    import math

    n_params, iterations = 600_000, 2
    summary, _, _ = _run(
        tmp_path,
        [
            "--nodes",
            str(nodes),
            "--algorithm",
            "allreduce",
            "--ghost",
            str(n_params),
            "--iterations",
            str(iterations),
            *NETWORK,
        ],
    )
    rounds = math.ceil(math.log2(nodes))
    step = 2 * (nodes - 1) * (ALPHA + 4 * n_params / nodes / BETA) + rounds * ALPHA
    assert summary["time_s"] == pytest.approx(iterations * step, rel=1e-9)
    assert summary["wait_s"] == pytest.approx(iterations * rounds * ALPHA, rel=1e-9)


def test_ghost_models_have_their_published_size():
    model, data = ghost_model("resnet50")
    assert model.n_params == 25_557_032 == profile("resnet50").params
    assert model.params.nbytes == 4 * 25_557_032
    assert (data.n_train, data.input_shape) == (1_281_167, (224, 224, 3))
    bare, none = ghost_model("11689512")
    assert (bare.n_params, bare.flops_per_sample, none) == (11_689_512, 0, None)
    with pytest.raises(ValueError, match="--ghost"):
        ghost_model("resnet7")


@pytest.mark.parametrize("collectives", ["closed-form", "message"])
def test_ghost_allreduce_takes_the_ring_time_and_moves_the_ring_bytes(tmp_path, collectives):
    n_params, nodes, iterations = 1_000_002, 6, 3  # equal chunks: the formula is exact
    summary, steps, config = _run(
        tmp_path,
        [
            "--nodes",
            str(nodes),
            "--algorithm",
            "allreduce",
            "--ghost",
            str(n_params),
            "--iterations",
            str(iterations),
            "--collectives",
            collectives,
            "--no-measure-wait",
            *NETWORK,
        ],
    )
    chunk = -(-n_params // nodes)
    step = 2 * (nodes - 1) * (ALPHA + 4 * chunk / BETA)  # compute is free without a profile
    assert summary["time_s"] == pytest.approx(iterations * step, rel=1e-9)
    assert summary["compute_s"] == 0.0 and summary["final_test_accuracy"] is None
    sent = sum(int(row["bytes_sent"]) for row in steps)
    assert sent == iterations * 2 * (nodes - 1) * 4 * n_params  # every chunk but one, twice
    assert config["params"] == n_params and config["cluster"]["ghost"] == str(n_params)


def test_ghost_parameter_server_pushes_and_pulls_the_whole_model(tmp_path):
    workers, iterations = 3, 2
    summary, steps, _ = _run(
        tmp_path,
        [
            "--nodes",
            str(workers + 1),
            "--algorithm",
            "ps",
            "--ghost",
            "resnet18",
            "--iterations",
            str(iterations),
            *NETWORK,
        ],
    )
    grad = profile("resnet18").grad_nbytes
    server = [row for row in steps if row["rank"] == "0"]
    assert sum(int(r["bytes_recv"]) for r in server) == iterations * workers * grad
    assert sum(int(r["bytes_sent"]) for r in server) == iterations * workers * grad
    # Step 1: the pushes queue into the server's NIC (the last is in at 3g/beta + alpha), then
    # the replies leave it one after another: worker k has its weights at (3 + k)g/beta + 2 alpha.
    for k in range(1, workers + 1):
        first = next(r for r in steps if r["rank"] == str(k) and r["iteration"] == "1")
        assert float(first["time_s"]) == pytest.approx(
            (workers + k) * grad / BETA + 2 * ALPHA, rel=1e-12
        )
    assert summary["time_s"] > iterations * (workers + 1) * grad / BETA


def test_ghost_compute_comes_from_the_profiles_flops(tmp_path):
    cluster = tmp_path / "cluster.toml"
    cluster.write_text("[compute]\nflops_per_s = 1.0e12\n")
    summary, _, _ = _run(
        tmp_path,
        [
            "--nodes",
            "2",
            "--algorithm",
            "allreduce",
            "--ghost",
            "resnet50",
            "--batch-size",
            "32",
            "--iterations",
            "2",
            "--profile",
            str(cluster),
            *NETWORK,
        ],
    )
    per_step = 32 * 3 * profile("resnet50").flops_per_sample / 1.0e12  # forward + backward
    assert summary["compute_s"] == pytest.approx(2 * per_step, rel=1e-12)


def test_steps_sample_keeps_every_kth_nodes_rows_and_all_totals(tmp_path):
    summary, steps, _ = _run(
        tmp_path,
        [
            "--nodes",
            "10",
            "--algorithm",
            "allreduce",
            "--ghost",
            "1000",
            "--iterations",
            "4",
            "--steps-sample",
            "4",
            "--collectives",
            "closed-form",
            *NETWORK,
        ],
    )
    assert sorted({int(row["rank"]) for row in steps}) == [0, 4, 8]
    assert len(steps) == 3 * 4
    assert len(summary["per_node"]["bytes_sent"]) == 3 and summary["per_node_every"] == 4
    assert summary["nodes"] == 10
    assert summary["bytes_sent"] == 4 * 2 * 9 * 4 * 1000  # over all nodes


def test_thousands_of_nodes_are_sampled_by_default_and_all_keeps_every_row(tmp_path):
    """Above 1,000 nodes steps.csv and per_node keep about 1,000 nodes; the means, the bytes and
    the time are those of every node, as with --steps-sample all."""
    argv = ["--nodes", "1500", "--algorithm", "allreduce", "--ghost", "1000"]
    argv += ["--iterations", "2", "--collectives", "closed-form", *NETWORK]
    sampled, steps, _ = _run(tmp_path / "sampled", argv)
    every, all_rows, _ = _run(tmp_path / "all", [*argv, "--steps-sample", "all"])
    assert sampled["per_node_every"] == 2 and len(sampled["per_node"]["comm_s"]) == 750
    assert len({row["rank"] for row in steps}) == 750 and len(all_rows) == 2 * 1500
    assert len(every["per_node"]["comm_s"]) == 1500 and "per_node_every" not in every
    for key in ("time_s", "compute_s", "comm_s", "wait_s", "bytes_sent", "nodes"):
        assert sampled[key] == pytest.approx(every[key], rel=1e-12), key


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--ghost", "resnet7"], "--ghost: expected resnet18"),
        (["--ghost", "1000", "--compress", "topk:0.01"], "--ghost carries sizes"),
        (["--steps-sample", "0"], "--steps-sample: expects an integer >= 1 or all"),
    ],
)
def test_bad_ghost_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as stop:
        run.main(
            ["--nodes", "2", "--algorithm", "allreduce", *argv, "--out", str(tmp_path / "run")]
        )
    assert stop.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


def test_compute_profile_given_is_the_ghosts_default(tmp_path):
    argv = ["--nodes", "4", "--algorithm", "allreduce", "--ghost", "1000", "--iterations", "3"]
    default, _, _ = _run(tmp_path / "default", [*argv, *NETWORK])
    given, _, _ = _run(tmp_path / "given", [*argv, *NETWORK, "--compute", "profile"])
    assert given["time_s"] == default["time_s"] and given["compute_s"] == 0.0
