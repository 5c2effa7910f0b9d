"""``sim.run --engine analytic`` against the event engine's closed form and the formula."""

import csv
import json
import math
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim import run
from tests.test_sim import ENV, ROOT

GHOST = [
    "--ghost",
    "resnet50",
    "--profile",
    "lomonosov-2-like",
    "--network",
    "star",
    "--algorithm",
    "allreduce",
    "--iterations",
    "20",
    "--no-progress",
]


def _summary(folder):
    return json.loads((folder / "summary.json").read_text())


def _steps(folder):
    with open(folder / "steps.csv") as fh:
        return sorted(
            (
                int(r["rank"]),
                int(r["iteration"]),
                float(r["time_s"]),
                float(r["wait_s"]),
                float(r["compute_s"]),
            )
            for r in csv.DictReader(fh)
        )


def test_equals_the_event_engines_closed_form_at_1000_nodes(tmp_path):
    """Stragglers and lognormal speeds: the same draws, the same arithmetic, node by node."""
    argv = [*GHOST, "--nodes", "1000", "--stragglers", "0.05:3x", "--speeds", "lognormal:0.2"]
    assert run.main([*argv, "--collectives", "closed-form", "--out", str(tmp_path / "ev")]) == 0
    assert run.main([*argv, "--engine", "analytic", "--out", str(tmp_path / "an")]) == 0
    events, analytic = _summary(tmp_path / "ev"), _summary(tmp_path / "an")
    for key in ("time_s", "compute_s", "comm_s", "wait_s"):
        assert analytic[key] == pytest.approx(events[key], rel=1e-9, abs=0)
    for key in ("iterations", "nodes", "bytes_sent", "bytes_per_iteration"):
        assert analytic[key] == events[key]
    for kind in ("compute_s", "wait_s", "bytes_sent"):
        assert analytic["per_node"][kind] == pytest.approx(events["per_node"][kind], rel=1e-9)
    for a, b in zip(_steps(tmp_path / "ev"), _steps(tmp_path / "an"), strict=True):
        assert a[:2] == b[:2] and a[2:] == pytest.approx(b[2:], rel=1e-9, abs=1e-12)


def test_with_a_fixed_part_per_step_it_still_equals_the_event_engine(tmp_path):
    """A profile whose step is 2 ms + b x 1 ms: both engines charge the same compute."""
    profile = tmp_path / "p.toml"
    profile.write_text("[compute]\nseconds_per_sample = 1e-3\nseconds_per_step = 2e-3\n")
    argv = [*GHOST[:2], "--profile", str(profile), *GHOST[4:], "--nodes", "200"]
    argv += ["--stragglers", "0.05:3x", "--batch-size", "8"]
    assert run.main([*argv, "--collectives", "closed-form", "--out", str(tmp_path / "ev")]) == 0
    assert run.main([*argv, "--engine", "analytic", "--out", str(tmp_path / "an")]) == 0
    events, analytic = _summary(tmp_path / "ev"), _summary(tmp_path / "an")
    for key in ("time_s", "compute_s", "wait_s"):
        assert analytic[key] == pytest.approx(events[key], rel=1e-9, abs=0)
    slowest = max(events["per_node"]["compute_s"])  # 20 steps of 10 ms, a few 3x slower
    assert min(events["per_node"]["compute_s"]) >= 20 * (2e-3 + 8e-3) * (1 - 1e-12)
    assert slowest > 20 * 10e-3


def test_without_stragglers_a_step_is_compute_plus_the_rings_alpha_beta_time(tmp_path):
    """p nodes, N floats: each of S steps takes f + b*s + 2(p-1)(alpha + c/beta), f the step's
    fixed part, c the ring's largest chunk, ceil(N/p) floats (the slowest chunk paces every ring
    step)."""
    profile = tmp_path / "p.toml"
    profile.write_text("[compute]\nseconds_per_sample = 1e-3\nseconds_per_step = 4e-3\n")
    p, steps, b, floats = 100_000, 7, 10, 25_557_032  # ResNet-50's parameters
    n = floats * 4
    assert (
        run.main(
            [
                "--ghost",
                "resnet50",
                "--nodes",
                str(p),
                "--iterations",
                str(steps),
                "--batch-size",
                str(b),
                "--engine",
                "analytic",
                "--compute",
                "profile",
                "--profile",
                str(profile),
                "--latency",
                "5us",
                "--bandwidth",
                "10Gbps",
                "--out",
                str(tmp_path / "an"),
            ]
        )
        == 0
    )
    summary = _summary(tmp_path / "an")
    ring = 2 * (p - 1) * (5e-6 + math.ceil(floats / p) * 4 / 1.25e9)
    assert summary["time_s"] == pytest.approx(steps * (4e-3 + b * 1e-3 + ring), rel=1e-9)
    assert summary["wait_s"] == pytest.approx(0.0, abs=1e-9)
    assert summary["bytes_per_iteration"] == pytest.approx(2 * (p - 1) * n, rel=1e-12)
    assert summary["per_node_every"] == 100 and len(summary["per_node"]["wait_s"]) == 1000
    with open(tmp_path / "an" / "steps.csv") as fh:
        assert sum(1 for _ in fh) == 1 + 1000 * steps  # about 1,000 nodes sampled a step


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--algorithm", "allreduce"], "--engine analytic needs --ghost"),
        (
            ["--ghost", "resnet18", "--algorithm", "gossip"],
            "needs --algorithm allreduce, got gossip",
        ),
        (
            ["--ghost", "resnet18", "--algorithm", "allreduce", "--local-steps", "2"],
            "needs --local-steps 1, got 2",
        ),
        (["--ghost", "resnet18", "--algorithm", "allreduce", "--fail", "1@1s"], "no --faults"),
    ],
)
def test_what_it_cannot_model_is_refused_in_one_line(tmp_path, argv, message):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sim.run",
            "--engine",
            "analytic",
            "--nodes",
            "8",
            "--dataset",
            "mnist-subset",
            *argv,
            "--out",
            str(tmp_path / "r"),
        ],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and message in lines[0], done.stderr


def _folder_bytes(folder):
    """Every file of a run folder but config.json, by name: its bytes."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.name != "config.json"}


def _config_but_the_engine(folder):
    """config.json without what names the engine or the folder, or says when it started."""
    config = json.loads((folder / "config.json").read_text())
    engine = config["cluster"].pop("engine")
    for key in ("argv", "started"):
        config.pop(key, None)
    config["config"].pop("out", None)
    return engine, config


def _auto_and_events(tmp_path, argv):
    """Run ``argv`` with ``--engine auto`` and ``--engine events``; (auto's, events') folders."""
    auto, events = tmp_path / "auto", tmp_path / "events"
    assert run.main([*argv, "--out", str(auto)]) == 0
    assert run.main([*argv, "--engine", "events", "--out", str(events)]) == 0
    return auto, events


CLOSED_FORM = [
    "--ghost",
    "resnet50",
    "--algorithm",
    "allreduce",
    "--allreduce",
    "ring",
    "--collectives",
    "closed-form",
    "--no-progress",
]


@pytest.mark.parametrize(
    "cluster",
    [
        ["--nodes", "1500", "--iterations", "6", "--latency", "2us", "--bandwidth", "100Gbps"],
        ["--nodes", "130", "--iterations", "5", "--profile", "lomonosov-2-like"],
        [
            *("--nodes", "97", "--iterations", "9", "--ranks-per-host", "4", "--latency", "5us"),
            *("--stragglers", "0.1:4x", "--speeds", "lognormal:0.3", "--network", "fat-tree:6"),
        ],
        ["--nodes", "40", "--iterations", "3", "--steps-sample", "3"],  # free compute: no wait
    ],
    ids=["10 Gbit star, sampled", "lomonosov-2-like", "stragglers on a fat-tree", "free compute"],
)
def test_auto_runs_the_analytic_engine_and_writes_the_event_engines_folder(tmp_path, cluster):
    """Byte for byte: steps.csv, metrics.csv, summary.json (means over all nodes, the sampled
    ones listed), timeline.json (the drawn nodes' compute, wait and comm), model.npz; and
    config.json but the engine's name."""
    auto, events = _auto_and_events(tmp_path, [*CLOSED_FORM, *cluster])
    assert _folder_bytes(auto) == _folder_bytes(events)
    assert {"steps.csv", "summary.json", "timeline.json", "model.npz"} <= set(_folder_bytes(auto))
    (auto_engine, auto_config), (events_engine, events_config) = map(
        _config_but_the_engine, (auto, events)
    )
    assert (auto_engine, events_engine) == ("analytic", "events")
    assert auto_config == events_config


@pytest.mark.parametrize(
    ("argv", "why", "status"),
    [
        (["--collectives", "message"], "the ring's messages", 0),
        (["--local-steps", "2"], "Local-SGD", 0),
        (["--fail", "3@1ms"], "a fault (a synchronous run stops: exit 3)", 3),
    ],
)
def test_auto_runs_the_events_where_the_analytic_engine_does_not_apply(tmp_path, argv, why, status):
    flags = [*CLOSED_FORM, "--nodes", "8", "--iterations", "2", *argv]
    assert run.main([*flags, "--out", str(tmp_path / "r")]) == status, why
    engine, _ = _config_but_the_engine(tmp_path / "r")
    assert engine == "events", why


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    nodes=st.integers(1, 48),
    iterations=st.integers(1, 5),
    latency_us=st.floats(0.1, 50.0),
    straggle=st.sampled_from(["", "0.2:3x", "0.5:1.7x"]),
    sigma=st.sampled_from(["", "0.1", "0.4"]),
    per_host=st.sampled_from(["1", "3"]),
    allreduce=st.sampled_from(
        ["ring", "recursive-doubling", "rabenseifner", "reduce-bcast", "mpi", "mpi openmpi"]
    ),
)
def test_the_analytic_folder_is_the_event_engines_whatever_the_draws(
    tmp_path_factory, nodes, iterations, latency_us, straggle, sigma, per_host, allreduce
):
    """Any run within the analytic engine's reach: the clock's sums as SimPy makes them, waits
    that rounding leaves below 0 clamped, every algorithm's time and bytes: the same bytes."""
    tmp_path = tmp_path_factory.mktemp("draws")
    algorithm, _, library = allreduce.partition(" ")
    argv = [*CLOSED_FORM, "--profile", "lomonosov-2-like", "--network", "star"]
    argv += ["--allreduce", algorithm] + (["--mpi", library] if library else [])
    argv += ["--nodes", str(nodes), "--iterations", str(iterations)]
    argv += ["--latency", f"{latency_us}us", "--ranks-per-host", per_host]
    argv += ["--stragglers", straggle] if straggle else []
    argv += ["--speeds", f"lognormal:{sigma}"] if sigma else []
    auto, events = _auto_and_events(tmp_path, argv)
    assert _folder_bytes(auto) == _folder_bytes(events)
