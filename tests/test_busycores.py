"""Busy cores: a step while k processes compute on one host, measured, read from a profile, and
charged to each rank of a simulated host (`twinsgd.calibration.busycores`)."""

import csv
import os
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from real.machine_bench import busy_counts, measure_busy_cores
from sim import run
from sim.cluster_profile import load_profile
from sim.compute import _busy_factors, compute_model
from twinsgd.calibration.busycores import GRID, BusyCores, busy_cores_from_windows
from twinsgd.calibration.steptimes import StepTimes
from twinsgd.data import load_dataset

FLAT = (1.0,) * len(GRID)


def _row(low, high):
    """11 quantiles spread evenly from ``low`` to ``high``."""
    return tuple(round(low + (high - low) * p, 12) for p in GRID)


def test_the_quantiles_are_linear_in_k_between_the_measured_counts_and_flat_outside():
    busy = BusyCores((1, 4, 16), (FLAT, _row(1.0, 1.4), _row(1.2, 2.0)))
    np.testing.assert_allclose(busy.quantiles_at(10), np.array(_row(1.1, 1.7)), rtol=1e-12)
    np.testing.assert_allclose(busy.quantiles_at(32), np.array(_row(1.2, 2.0)), rtol=1e-12)
    assert busy.mean_at(1) == 1.0 and busy.mean_at(4) == pytest.approx(1.2)


@settings(max_examples=50, deadline=None)
@given(
    st.integers(1, 64),
    st.floats(0.5, 2.0),
    st.floats(0.0, 1.5),
    st.integers(0, 2**31),
)
def test_a_hosts_ranks_take_the_distribution_evenly_in_a_seeded_order(ranks, low, width, seed):
    busy = BusyCores((1, 8), (FLAT, _row(low, low + width)))
    factors = busy.rank_factors(ranks, 8, np.random.default_rng(seed))
    expected = low + width * (np.arange(ranks) + 0.5) / ranks  # linear: the quantile itself
    np.testing.assert_allclose(sorted(factors), expected, rtol=1e-12)
    assert factors == busy.rank_factors(ranks, 8, np.random.default_rng(seed))  # repeatable
    assert np.mean(factors) == pytest.approx(busy.mean_at(8), rel=1e-9)


def test_windows_make_factors_of_the_median_ratio_times_the_spread():
    busy = busy_cores_from_windows(
        {1: [1.0], 4: [1.5, 1.4, 9.0]},  # one window's drift: the median ignores it
        {1: [1.0], 4: [0.8, 1.2, 1.0, 1.0]},
    )
    assert busy.processes == (1, 4) and busy.factors[0] == FLAT
    assert (busy.factors[1][0], busy.factors[1][-1]) == pytest.approx((1.2, 1.8))
    assert busy.mean_at(4) == pytest.approx(1.5)


def test_a_profile_round_trips_and_a_bad_table_is_one_line(tmp_path):
    busy = BusyCores((1, 2, 4), (FLAT, _row(1.0, 1.1), _row(1.1, 1.6)))
    path = tmp_path / "p.toml"
    rows = ", ".join("[" + ", ".join(repr(x) for x in r) + "]" for r in busy.factors)
    path.write_text(f"[compute.busy.mlp]\nprocesses = [1, 2, 4]\nfactors = [{rows}]\n")
    assert load_profile(str(path)).busy["mlp"] == busy
    assert BusyCores.from_dict(busy.to_dict()) == busy
    for table, match in [
        ("processes = [1, 2]\nfactors = [[1.0]]", "one row of factors per count"),
        ("processes = [2, 1]\nfactors = [[1.0], [1.0]]", "must increase from >= 1"),
        (f"processes = [1]\nfactors = [[{', '.join(['1.0'] * 10)}, 0.5]]", "non-decreasing"),
        ("factors = []", "needs 'processes'"),
    ]:
        path.write_text(f"[compute.busy.mlp]\n{table}\n")
        with pytest.raises(ValueError, match=match):
            load_profile(str(path))


def test_the_counts_measured_are_powers_of_two_and_the_cores():
    assert busy_counts(1) == [1]
    assert busy_counts(2) == [1, 2]
    assert busy_counts(12) == [1, 2, 4, 8, 12]
    assert busy_counts(16) == [1, 2, 4, 8, 16]


def test_this_machine_measures_one_row_per_count_and_one_process_alone_is_one():
    dataset = load_dataset("mnist-subset", None, allow_download=False)
    busy = measure_busy_cores("mlp", dataset, 32, quick=True)
    assert busy.processes == tuple(busy_counts(os.cpu_count() or 1))
    assert busy.factors[0] == FLAT
    assert all(0.3 < f < 5.0 for row in busy.factors for f in row)


def _profile(tmp_path, busy_rows, one_machine=True, cores=16):
    """A one-machine profile of ``cores`` cores with a hot-loop MLP step and a busy table."""
    path = tmp_path / "busy.toml"
    processes = [k for k, _ in busy_rows]
    rows = ", ".join("[" + ", ".join(repr(x) for x in row) + "]" for _, row in busy_rows)
    path.write_text(
        f"[cluster]\ncores = {cores}\none_machine = {'true' if one_machine else 'false'}\n"
        '[network]\nlatency = "2us"\nbandwidth = "5GB/s"\n'
        "[compute]\nseconds_per_sample = { mlp = 1e-5 }\nseconds_per_step = { mlp = 5e-4 }\n"
        f"[compute.busy.mlp]\nprocesses = {processes}\nfactors = [{rows}]\n"
    )
    return load_profile(str(path))


def _options(nodes, **extra):
    return SimpleNamespace(
        ghost=None, compute="profile", speeds="1x", stragglers=None, nodes=nodes,
        cores_per_host=None, **extra,
    )  # fmt: skip


def test_each_rank_of_a_busy_host_computes_slower_by_its_own_factor(tmp_path):
    """16 ranks on a 16-core machine whose hot loop timed one process alone: each rank's speed
    is one over its factor at 16; ranks on hosts of their own are left alone."""
    profile = _profile(tmp_path, [(1, FLAT), (16, _row(1.2, 2.0))])
    model = compute_model(_options(16), profile, 7, "mlp")
    expected = BusyCores((1, 16), (FLAT, _row(1.2, 2.0))).rank_factors(
        16, 16, np.random.default_rng([7, 3])
    )
    np.testing.assert_allclose(model.speeds, [1 / f for f in expected], rtol=1e-12)
    assert model.busy == {"busy": 16, "reference": 1, "mean": pytest.approx(1.6, abs=1e-4)}
    apart = _profile(tmp_path, [(1, FLAT), (16, _row(1.2, 2.0))], one_machine=False)
    assert compute_model(_options(16), apart, 7, "mlp").speeds == (1.0,)  # a rank a host


def test_step_times_measured_at_two_busy_ranks_are_the_reference():
    """Step times of a 2-rank run on one machine already carry 2 busy ranks: at 2 ranks nothing
    changes on average, at 4 the ratio of the means."""
    profile = SimpleNamespace(
        busy={"mlp": BusyCores((1, 2, 4), (FLAT, _row(1.1, 1.1), _row(1.65, 1.65)))},
        cores=4,
        one_machine=True,
        step_times={},
    )
    steps = StepTimes(tuple(1e-3 for _ in range(101)), 100, 50, ranks=2, cores=4)
    options = SimpleNamespace(nodes=4, cores_per_host=None)
    factors, record = _busy_factors(options, profile, "mlp", 1, steps, 0)
    assert record["reference"] == 2 and factors == pytest.approx([1.5] * 4)
    options.nodes = 2
    assert _busy_factors(options, profile, "mlp", 1, steps, 0)[0] == pytest.approx([1, 1])


def test_a_simulated_run_charges_each_ranks_compute_its_factor(tmp_path):
    """4 ranks on a 4-core machine where 4 processes at once take 1.5x one alone: every step's
    compute is 1.5x the same run's on a profile without the table, to rounding."""

    def compute_per_rank(rows, name):
        path = tmp_path / f"{name}.toml"
        busy = ""
        if rows:
            text = ", ".join("[" + ", ".join(repr(x) for x in r) + "]" for r in rows)
            busy = f"[compute.busy.mlp]\nprocesses = [1, 4]\nfactors = [{text}]\n"
        path.write_text(
            "[cluster]\ncores = 4\none_machine = true\n"
            '[network]\nlatency = "2us"\nbandwidth = "5GB/s"\n'
            "[compute]\nseconds_per_sample = { mlp = 1e-5 }\nseconds_per_step = { mlp = 5e-4 }\n"
            + busy
        )
        out = tmp_path / name
        argv = ["--nodes", "4", "--algorithm", "allreduce", "--iterations", "3", "--seed", "0"]
        argv += ["--profile", str(path), "--compute", "profile", "--out", str(out), "-q"]
        assert run.main(argv) == 0
        with open(out / "steps.csv") as fh:
            return np.array([float(r["compute_s"]) for r in csv.DictReader(fh)])

    plain = compute_per_rank(None, "plain")
    busy = compute_per_rank([FLAT, (1.5,) * len(GRID)], "busy")
    np.testing.assert_allclose(busy, 1.5 * plain, rtol=1e-9)


def test_the_core_speed_probe_times_every_core_alone_in_pairs_and_all_at_once(tmp_path):
    """scripts/core_speed_probe.py as a user runs it: a window's median step per core, each
    pass over every core of the process's affinity; the pairs it names; unpinned pairs on those
    cores; the printed report the JSON's numbers in ms."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "probe.json"
    script = Path(__file__).resolve().parent.parent / "scripts" / "core_speed_probe.py"
    argv = [sys.executable, str(script), "--window", "0.05", "--trials", "1"]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "TWINSGD_OFFLINE": "1"}
    done = subprocess.run(
        [*argv, "--out", out], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    probe = json.loads(out.read_text())
    cores = sorted(os.sched_getaffinity(0))
    n = len(cores)
    assert probe["cores"] == cores and probe["window_s"] == 0.05
    for row in [*probe["alone"], probe["alone_after"], *probe["all"]]:
        assert len(row) == n and all(0 < s < 1 for s in row)
    assert list(probe["pairs_half"]) == [f"{cores[i]},{cores[i + n // 2]}" for i in range(n // 2)]
    assert list(probe["pairs_next"]) == [
        f"{cores[2 * i]},{cores[2 * i + 1]}" for i in range(n // 2)
    ]
    assert all(len(times) == 2 and min(times) > 0 for times in probe["pairs_next"].values())
    ((a, core_a), (b, core_b)) = probe["unpinned"][0]
    assert 0 < a < 1 and 0 < b < 1 and {core_a, core_b} <= set(cores)
    lines = done.stdout.splitlines()
    for i, alone in enumerate(probe["alone"]):
        assert lines[1 + i] == f"alone, pass {i + 1}: " + " ".join(f"{1e3 * s:.2f}" for s in alone)
    assert lines[-1] == f"unpinned pairs (ms@core): {1e3 * a:.2f}@{core_a} {1e3 * b:.2f}@{core_b}"
    bad = subprocess.run([*argv[:2], "--window", "0"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_the_load_memory_probe_times_one_core_through_the_others_load(tmp_path):
    """scripts/load_memory_probe.py as a user runs it: the watcher's median step for every
    bin of every phase, the others' own while busy, printed in ms as the JSON has them; a bad
    bin count, one line, exit 2."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "probe.json"
    script = Path(__file__).resolve().parent.parent / "scripts" / "load_memory_probe.py"
    argv = [sys.executable, str(script), "--bin", "0.03", "--before", "2", "--busy", "2"]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "TWINSGD_OFFLINE": "1"}
    done = subprocess.run(
        [*argv, "--after", "3", "--out", out], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    probe = json.loads(out.read_text())
    cores = sorted(os.sched_getaffinity(0))
    assert probe["cores"] == cores and probe["bin_s"] == 0.03
    assert probe["phases"] == {"before": 2, "busy": 2, "after": 3}
    assert len(probe["watcher_s"]) == 7 and all(0 < s < 1 for s in probe["watcher_s"])
    assert len(probe["others_s"]) == len(cores) - 1
    lines = done.stdout.splitlines()
    bins = [f"{1e3 * s:.2f}" for s in probe["watcher_s"]]
    assert lines[1:4] == [
        "before: " + " ".join(bins[:2]),
        "busy: " + " ".join(bins[2:4]),
        "after: " + " ".join(bins[4:]),
    ]
    bad = subprocess.run([*argv[:2], "--busy", "0"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
