"""`python -m real.calibrate`: the alpha-beta fit against formulas, and the profile it writes."""

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from models import build_model
from real.calibrate import batch_sizes, fit_step_cost
from real.calibrate_text import rounded
from real.machine_bench import busy_counts, measure_switch_s
from twinsgd.data import load_dataset
from twinsgd.run.units import parse_bandwidth_Bps, parse_seconds

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = str(Path(sys.executable).parent / "mpiexec")
ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "TWINSGD_OFFLINE": "1", "PYTHONPATH": str(ROOT)}


def calibrate(n, *argv):
    """Run ``python -m real.calibrate argv`` on n ranks; return the CompletedProcess."""
    cmd = [MPIEXEC, "-n", str(n), sys.executable, "-m", "real.calibrate", *argv]
    return subprocess.run(cmd, cwd=ROOT, env=ENV, timeout=120, capture_output=True, text=True)


@pytest.mark.parametrize("x", [100.0, 1e10, 1.2345e-5, 0.5, 27690000000.0])
def test_numbers_are_rounded_to_four_digits(x):
    assert isinstance(rounded(x), float)
    assert rounded(x) == pytest.approx(x, rel=1e-3)


@given(
    st.floats(0.0, 1e-2),
    st.floats(1e-7, 1e-3),
    st.lists(st.integers(1, 512), min_size=2, max_size=5, unique=True),
)
def test_the_step_cost_fit_recovers_a_line(per_step, per_sample, sizes):
    step, sample = fit_step_cost(sizes, [per_step + b * per_sample for b in sizes])
    assert sample == pytest.approx(per_sample, rel=2e-3)
    assert step == pytest.approx(per_step, rel=2e-3, abs=1e-9 + 2e-3 * per_sample * max(sizes))


def test_a_fit_with_a_negative_intercept_goes_through_the_origin():
    step, sample = fit_step_cost([10, 20, 40], [0.5e-3, 1.5e-3, 3.5e-3])  # intercept -0.5 ms
    assert step == 0.0 and sample == pytest.approx(
        np.dot([10, 20, 40], [0.5e-3, 1.5e-3, 3.5e-3]) / np.dot([10, 20, 40], [10, 20, 40]),
        rel=1e-3,
    )
    assert fit_step_cost([32], [1e-3]) == (0.0, pytest.approx(1e-3 / 32, rel=1e-3))


def test_a_step_is_timed_at_a_quarter_a_half_and_the_whole_batch():
    assert batch_sizes(100) == [25, 50, 100] and batch_sizes(2) == [1, 2] and batch_sizes(1) == [1]


# ---------------------------------------------------------------------------- under mpiexec
@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    """One --quick calibration on 2 ranks, shared by the tests that read its file."""
    out = tmp_path_factory.mktemp("calibrate") / "p.toml"
    done = calibrate(2, "--quick", "--train-steps", "12", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "network one way" in done.stdout and "compute (hot loop): mlp" in done.stdout
    assert "compute (the real program): mlp" in done.stdout
    assert f"wrote {out} in " in done.stdout  # (a count of jitter's left-out once stood there)
    with open(out, "rb") as fh:
        return out, tomllib.load(fh)


@pytest.mark.mpi
def test_a_calibration_again_to_the_same_file_renews_it_and_its_run(tmp_path):
    """`make demo` calibrates to runs/this-machine.toml every time it runs."""
    out = tmp_path / "p.toml"
    for _ in range(2):
        done = calibrate(2, "--quick", "--models", "mlp", "--train-steps", "4", "--out", str(out))
        assert done.returncode == 0, done.stderr
    run = tmp_path / "p.steps-mlp"  # the last of three windows, of 3 steps each (2 dropped)
    rows = (run / "steps.csv").read_text().splitlines()
    assert (run / "summary.json").is_file() and len(rows) == 1 + 2 * 3  # the second run's alone
    assert all((tmp_path / f"p.steps{k}-mlp" / "summary.json").is_file() for k in (1, 2))


@pytest.mark.mpi
def test_the_profile_has_every_key_of_the_contract(profile):
    _, p = profile
    assert p["cluster"]["calibrated"] is True
    assert p["cluster"]["name"].startswith("measured from ")
    assert "MPICH" in p["cluster"]["source"] or "MPI" in p["cluster"]["source"]
    assert p["cluster"]["mpi"] == ("mpich" if "MPICH" in p["cluster"]["source"] else "openmpi-4.1")
    assert p["cluster"]["cores"] == os.cpu_count()
    assert p["cluster"]["one_machine"] is True and len(p["cluster"]["hosts"]) == 2
    assert (
        p["cluster"]["memory_copies"] == 2.0
        if os.cpu_count() <= 2
        else p["cluster"]["memory_copies"] >= 2.0
    )
    assert p["network"]["topology"] == "star"
    for pattern in ("oneway", "sendrecv"):
        assert {"min_bytes", "latency_s", "bandwidth_Bps", "sizes"} <= set(p["network"][pattern])
    for pattern in ("oneway", "sendrecv"):  # the same, in situ, to 16 MiB
        assert max(p["network"]["in_situ"][pattern]["sizes"]) == 2**21  # --quick's largest
    assert p["compute"]["gamma_s_per_byte"] >= 0
    for key in ("reduction", "copy"):  # the add and the copy by size, 1 KiB to 16 MiB
        local = p["compute"][key]
        assert (local["sizes"][0], local["sizes"][-1]) == (1024, 2**24)
        assert local["seconds"][-1] > 100 * local["seconds"][0]  # 16,384x the bytes
    # of the add from Python, the call on empty buffers: a microsecond or so (timed apart from
    # the 1 KiB add, so on this machine's moving speed either may come out the larger)
    assert 0 < p["compute"]["reduction"]["call_s"] < 2e-5
    # own code right after the first model's gradient (mlp: 167,560 float32) over warm
    assert p["compute"]["cold_own_bytes"] == 4 * 167_560
    assert 0 <= p["compute"]["cold_own_s"] < 1e-3
    assert 0 < p["compute"]["cold_own_code_s"] < 1e-3  # the stand-in: about 25 us warm
    # the pace's reference kernel at the calibration's speed: about 0.2 ms on these machines
    assert 2e-5 < p["compute"]["reference_s"] < 5e-3
    assert min(p["compute"]["finish"]["sizes"]) == 131072  # --quick's from 64 KiB
    assert min(p["compute"]["finish"]["seconds"]) >= 1e-7  # a residual, floored
    # the ring's step right after another, at the half's size, less its add: floored, growing
    following = p["network"]["in_situ"]["written"]["sendrecv"]
    assert following["sizes"] == [n // 2 for n in p["compute"]["finish"]["sizes"]]
    assert min(following["seconds"]) >= 1e-7 and np.all(np.diff(following["seconds"]) > 0)
    wire = p["network"]["in_situ"]["wire"]  # a compressed message's bytes written and read
    assert wire["write_s"] >= 0 and wire["write_s_per_byte"] >= 0 and wire["read_s"] > 0
    assert len(wire["nbytes"]) == len(wire["write_samples_s"]) == len(wire["read_samples_s"]) == 3
    assert wire["source"] == "program" and wire["read_s"] == wire["program"]["read_s"]  # 2 ranks
    # MPI's Allgather in the program, and what of it the in-situ Sendrecv of its bytes misses
    assert wire["program"]["allgather_s"] > 0
    assert 0 <= wire["allgather_extra_s"] < wire["program"]["allgather_s"]
    assert "incast" not in p["network"]  # 2 ranks: no incast
    send = p["network"]["in_situ"]["send"]  # an eager Send in its sender, by size, in situ
    assert send["sizes"] and max(send["sizes"]) <= p["network"]["eager_bytes"]
    assert all(t > 0 for t in send["seconds"]) and min(send["latency_s"]) >= 0
    assert p["network"]["overhead_s"] > 0
    assert 0 <= p["network"]["call_overhead_s"] < 1e-3  # a step inside MPI under the hot loop
    # shared memory: MPI's first copy in OSU's loop, into bytes the other rank has just read,
    # at the warm copy's sizes; a copy of 16 MiB takes at least a memory pass at 100 GB/s
    read = p["compute"]["copy_read_by_peer"]
    assert read["sizes"] == p["compute"]["copy"]["sizes"]
    assert min(read["seconds"]) >= 1e-9 and read["seconds"][-1] > 2**24 / 100e9
    for key in ("later", "seen"):  # a program's Recv, probe first: done later, its wait's end
        probe = p["network"]["in_situ"]["probe"][key]  # one line, a + n / b, a, b >= 0
        assert len(probe["latency_s"]) == 1 and 0 <= probe["latency_s"][0] < 1e-3
        assert probe["bandwidth_Bps"][0] > 0
    assert p["compute"]["batch_size"] == 100
    assert set(p["compute"]["seconds_per_sample"]) == {"mlp", "cnn"}
    assert set(p["compute"]["seconds_per_step"]) == {"mlp", "cnn"}
    assert all(s >= 0 for s in p["compute"]["seconds_per_step"].values())
    for model, update in p["compute"]["seconds_per_update"].items():  # Adam's part of the step
        assert 0 < update <= p["compute"]["seconds_per_step"][model]
    assert set(p["compute"]["switch_s"]) == {"mlp", "cnn"}  # a gradient's refill, each model
    for model, switch_s in p["compute"]["switch_s"].items():  # less than a whole warm step
        step_s = p["compute"]["seconds_per_step"][model]
        assert 0 <= switch_s < step_s + 100 * p["compute"]["seconds_per_sample"][model]
    for busy in p["compute"]["busy"].values():  # k processes computing at once, each model
        assert busy["processes"] == busy_counts(os.cpu_count() or 1)
        assert busy["factors"][0] == [1.0] * 11  # one process over one alone
    assert set(p["compute"]["busy"]) == {"mlp", "cnn"}
    assert set(p["compute"]["steps"]) == {"mlp", "cnn"}
    assert p["compute"]["steps"]["mlp"]["steps"] == 2 * 3 * (4 - 2)  # 2 ranks, 3 windows of 4 steps


@pytest.mark.mpi
def test_the_measured_network_and_compute_are_plausible(profile):
    _, p = profile
    assert 0 < parse_seconds(p["network"]["latency"]) < 1e-3
    assert parse_bandwidth_Bps(p["network"]["bandwidth"]) > 1e7
    assert p["compute"]["seconds_per_sample"]["mlp"] > 0
    assert p["compute"]["flops_per_s"] > 0
    # the machine's phase around its tables of messages (2 ranks of one machine: shared memory)
    phases = p["cluster"]["phase_us"]
    assert len(phases) == 3 and all(2 * 512 * 1024 / 100e9 * 1e6 < t < 1e6 for t in phases)


@pytest.mark.mpi
def test_flops_per_s_is_three_forward_passes_of_the_median_model(profile):
    _, p = profile
    compute = p["compute"]
    for name, flops in compute["flops_per_sample"].items():
        assert flops == build_model(name, (28, 28, 1), 10).flops_per_sample
    rates = sorted(
        3 * compute["flops_per_sample"][m] / s for m, s in compute["seconds_per_sample"].items()
    )
    assert compute["flops_per_s"] == pytest.approx(rates[(len(rates) - 1) // 2], rel=1e-3)


@pytest.mark.mpi
def test_the_fitted_models_reproduce_their_points_as_they_say(profile):
    """Each model's recorded residuals are its own predictions against the measured points."""
    from twinsgd.calibration.costfit import PiecewiseCost

    _, p = profile
    tables = [p["network"][pattern] for pattern in ("oneway", "sendrecv")]
    tables += [p["network"]["in_situ"][pattern] for pattern in ("oneway", "sendrecv")]
    tables += [p["network"]["written"][pattern] for pattern in ("oneway", "sendrecv")]
    reduction = {k: v for k, v in p["compute"]["reduction"].items() if k != "call_s"}
    following = p["network"]["in_situ"]["written"]["sendrecv"]  # from 32 KiB, the halves
    for table in [*tables, p["compute"]["finish"], following, reduction, p["compute"]["copy"]]:
        cost = PiecewiseCost.from_dict(table)
        n, t = np.array(table["sizes"]), np.array(table["seconds"])
        assert n.max() >= 2**20 and len(n) == len(t)
        np.testing.assert_allclose(cost.seconds(n) / t - 1, table["rel_residuals"], atol=1e-6)
        assert np.abs(table["rel_residuals"]).max() == pytest.approx(
            max(table["max_rel_residual"]), abs=1e-9
        )  # the worst point is the one the fit says
    assert all(table["sizes"][0] == 8 for table in tables)


@pytest.mark.mpi
def test_programs_pay_the_in_situ_costs_and_osu_the_hot_ones(profile):
    """sim.run's messages are charged the in-situ models, sim.osu's the hot loop's."""
    from sim.cluster import network_costs
    from sim.cluster_profile import load_profile
    from sim.run import build_parser

    path, p = profile
    loaded = load_profile(str(path))
    options = build_parser().parse_known_args(["--nodes", "2", "--profile", str(path)])[0]
    assert network_costs(options, loaded, programs=True) is loaded.in_situ
    assert network_costs(options, loaded, programs=False) is loaded.costs
    # and gossip's exchange, in situ (shared memory here: no token buckets), and a step of a
    # program's collective right after another
    assert set(loaded.in_situ) == {"oneway", "sendrecv", "exchange", "sendrecv-written"}
    assert set(loaded.in_situ_jitter) == {"oneway", "sendrecv", "exchange"}
    assert loaded.finish is not None
    # the hot loop's with the bytes written before each (MPI's own steps, `LibraryCall`)
    assert set(loaded.costs) == {"oneway", "sendrecv", "oneway-written", "sendrecv-written"}
    assert loaded.reduction is not None and loaded.copy is not None
    assert loaded.reduction_call_s == p["compute"]["reduction"]["call_s"]  # MPI's adds less it
    assert loaded.wire.read() == p["network"]["in_situ"]["wire"]["read_s"]
    seen = p["network"]["in_situ"]["probe"]["seen"]
    assert loaded.probe.seen.seconds(8) == pytest.approx(
        seen["latency_s"][0] + 8 / seen["bandwidth_Bps"][0]
    )


@pytest.mark.mpi
def test_step_times_come_from_the_real_program_beside_the_profile(profile):
    path, p = profile
    runs = [path.with_name(f"{path.stem}.{kind}-mlp") for kind in ("steps1", "steps2", "steps")]
    assert all((run / "steps.csv").exists() for run in runs)  # three windows, spread
    from twinsgd.calibration.steptimes import step_times_from_run, step_times_from_runs

    times = step_times_from_runs(runs)
    steps = p["compute"]["steps"]["mlp"]
    assert steps["median_s"] == pytest.approx(times.median_s, rel=1e-5)
    assert steps["steps"] == sum(step_times_from_run(run).steps for run in runs)
    assert steps["own_code"] is False  # the gradients alone, from the run's timeline
    # the update and the next batch, in the run and alone: alone, 0.3-0.4 ms an MLP step
    assert steps["own_s"] > 0 and 1e-4 < steps["own_alone_s"] < 2e-3


@pytest.mark.mpi
def test_the_simulator_reads_the_profile(profile):
    from sim.cluster_profile import load_profile

    path, p = profile
    loaded = load_profile(str(path))
    assert loaded.calibrated and loaded.network == "star"
    assert loaded.latency_s == parse_seconds(p["network"]["latency"])
    assert loaded.compute_seconds_per_sample("mlp", 1) == p["compute"]["seconds_per_sample"]["mlp"]
    assert {"oneway", "sendrecv"} <= set(loaded.costs) and set(loaded.step_times) == {"mlp", "cnn"}


@pytest.mark.mpi
def test_one_rank_is_bad_input_in_one_line(tmp_path):
    done = calibrate(1, "--quick", "--out", str(tmp_path / "p.toml"))
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert "2 MPI ranks" in done.stderr
    assert not (tmp_path / "p.toml").exists()


@pytest.mark.mpi
@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--models", "mlp,resnet"], "--models"),
        (["--batch-size", "0"], "--batch-size"),
        (["--dataset", "imagenet"], "dataset"),
    ],
)
def test_bad_flags_stop_every_rank_with_one_line(tmp_path, argv, flag):
    done = calibrate(2, "--quick", "--out", str(tmp_path / "p.toml"), *argv)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and flag in done.stderr
    assert not (tmp_path / "p.toml").exists()


def test_from_run_writes_step_times_into_a_new_or_existing_profile(tmp_path):
    """One process, no MPI: the step times of a run folder go into --out, which keeps the rest."""
    run = tmp_path / "run"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "real.train",
            "--dataset",
            "synthetic",
            "--iterations",
            "8",
            "--no-progress",
            "--out",
            str(run),
        ],
        cwd=ROOT,
        env=ENV,
        timeout=120,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    out = tmp_path / "p.toml"
    out.write_text('[cluster]\nname = "kept"\n[network]\nlatency = "3us"\n')
    done = subprocess.run(
        [sys.executable, "-m", "real.calibrate", "--from-run", str(run), "--out", str(out)],
        cwd=ROOT,
        env=ENV,
        timeout=60,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    with open(out, "rb") as fh:
        p = tomllib.load(fh)
    assert p["cluster"]["name"] == "kept" and p["network"]["latency"] == "3us"
    steps = p["compute"]["steps"]["mlp"]
    assert steps["steps"] == 8 - 2 and steps["batch_size"] == 100 and steps["ranks"] == 1


def test_from_run_of_a_folder_that_is_no_run_is_one_line(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "real.calibrate",
            "--from-run",
            str(tmp_path),
            "--out",
            str(tmp_path / "p.toml"),
        ],
        cwd=ROOT,
        env=ENV,
        timeout=60,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "--from-run" in done.stderr


def test_on_token_buckets_every_batch_starts_after_they_have_filled(monkeypatch):
    """Interleaved sizes on an emulated cluster: before each batch (warm-up or timed) both
    ranks meet and let the buckets fill (1.5 x burst / rate), so a batch of small messages does
    not start on the buckets the last size emptied; elsewhere, no pause at all."""
    import real.calibrate as calibrate
    import real.netbench as netbench

    class Pair:
        rank, barriers = 0, 0

        def Barrier(self):
            self.barriers += 1

    events = []
    monkeypatch.setattr(netbench.time, "sleep", lambda s: events.append(("sleep", s)))

    def batch(j, count, warmup=False):
        events.append(("batch", j, warmup))
        return 1.0

    shaper = {"rates_Bps": [125e6, 12.5e6], "bursts_bytes": [125_000.0, 12_500.0]}
    refill = calibrate._refill_s(shaper)
    assert refill == pytest.approx(1.5e-3) and calibrate._refill_s(None) == 0.0
    plan = lambda n, quick: (2, 3, 1)  # noqa: E731  passes, repetitions, warm-up
    assert netbench._interleaved(Pair(), [8, 4096], False, batch, plan, refill) == [1.0, 1.0]
    batches = [e for e in events if e[0] == "batch"]
    assert len(batches) == 2 * 2 * 2  # passes x sizes x (warm-up, timed)
    assert events == [x for b in batches for x in (("sleep", refill), b)]
    events.clear()
    netbench._interleaved(Pair(), [8, 4096], False, batch, plan)
    assert not [e for e in events if e[0] == "sleep"]


def test_a_switch_is_measured_where_processes_can_be_pinned_and_none_where_not(monkeypatch):
    """The MLP's refill after another process on its core: a number of seconds, less than a
    step; a core that does not exist cannot be pinned to: None (the profile then charges 0)."""
    dataset = load_dataset("mnist-subset", None, allow_download=False)
    switch_s = measure_switch_s("mlp", dataset, 32, quick=True)
    assert switch_s is not None and 0 <= switch_s < 0.01
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {10**6})
    assert measure_switch_s("mlp", dataset, 32, quick=True) is None
