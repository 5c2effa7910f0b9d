"""`python -m real.calibrate`: the alpha-beta fit against formulas, and the profile it writes."""

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from algorithms.units import parse_bandwidth_Bps, parse_seconds
from models import build_model
from real.calibrate import SIZES, _float, fit_alpha_beta

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = str(Path(sys.executable).parent / "mpiexec")
ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "TWINSGD_OFFLINE": "1", "PYTHONPATH": str(ROOT)}


def calibrate(n, *argv):
    """Run ``python -m real.calibrate argv`` on n ranks; return the CompletedProcess."""
    cmd = [MPIEXEC, "-n", str(n), sys.executable, "-m", "real.calibrate", *argv]
    return subprocess.run(cmd, cwd=ROOT, env=ENV, timeout=120, capture_output=True, text=True)


# ---------------------------------------------------------------------------- the fit, no MPI
@pytest.mark.parametrize(("alpha_s", "beta_Bps"), [(2e-6, 5e9), (0.3e-6, 25e9), (50e-6, 1.25e8)])
def test_fit_recovers_the_alpha_and_beta_that_made_the_times(alpha_s, beta_Bps):
    n = np.array(SIZES)
    alpha, beta, r2 = fit_alpha_beta(n, alpha_s + n / beta_Bps)
    assert alpha == pytest.approx(alpha_s, rel=1e-2)
    assert beta == pytest.approx(beta_Bps, rel=1e-2)
    assert r2 == pytest.approx(1.0, abs=1e-9)


def test_fit_lets_small_messages_set_alpha_despite_noise_on_large_ones():
    """A 10% error on each large message moves an unweighted fit's alpha by far more than alpha
    itself; the relative fit keeps it within a few percent."""
    n = np.array(SIZES, dtype=float)
    noise = np.where(np.arange(len(n)) % 2, 1.1, 0.9)  # +-10%, alternating
    t = (1e-6 + n / 4e9) * np.where(n >= 2**16, noise, 1.0)
    alpha, beta, r2 = fit_alpha_beta(n, t)
    assert alpha == pytest.approx(1e-6, rel=0.05)
    assert beta == pytest.approx(4e9, rel=0.1)
    assert 0.99 < r2 < 1
    _, ols_alpha = np.polyfit(n, t, 1)
    assert abs(ols_alpha - 1e-6) > 10e-6  # what unweighted least squares would have said


@pytest.mark.parametrize(("nbytes", "seconds", "rule"), [
    ([8, 8, 8], [1e-6, 1e-6, 1e-6], "2 distinct"),
    ([8, 1024], [1e-6], "one length"),
    ([8, 1024], [1e-6, -1.0], "times must be"),
    ([0, 1024], [1e-6, 2e-6], "sizes must be"),
    ([8, 1024, 2**20], [3e-3, 2e-3, 1e-3], "do not grow"),
])
def test_fit_refuses_what_no_line_fits(nbytes, seconds, rule):
    with pytest.raises(ValueError, match=rule):
        fit_alpha_beta(nbytes, seconds)


@pytest.mark.parametrize("x", [100.0, 1e10, 1.2345e-5, 0.5, 27690000000.0])
def test_numbers_are_written_as_toml_floats(x):
    value = tomllib.loads(f"x = {_float(x)}")["x"]
    assert isinstance(value, float)
    assert value == pytest.approx(x, rel=1e-3)


# ---------------------------------------------------------------------------- under mpiexec
@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    """One --quick calibration on 2 ranks, shared by the tests that read its file."""
    out = tmp_path_factory.mktemp("calibrate") / "p.toml"
    done = calibrate(2, "--quick", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "network: alpha" in done.stdout and "compute: mlp" in done.stdout
    with open(out, "rb") as fh:
        return out, tomllib.load(fh)


@pytest.mark.mpi
def test_the_profile_has_every_key_of_the_contract(profile):
    _, p = profile
    assert p["cluster"]["calibrated"] is True
    assert p["cluster"]["name"].startswith("this machine (")
    assert "MPICH" in p["cluster"]["source"] or "MPI" in p["cluster"]["source"]
    assert p["cluster"]["cores"] == os.cpu_count()
    assert p["network"]["topology"] == "star"
    assert set(p["network"]["fit"]) == {"sizes", "seconds", "r2"}
    assert p["compute"]["batch_size"] == 100
    assert set(p["compute"]["seconds_per_sample"]) == {"mlp", "cnn"}


@pytest.mark.mpi
def test_the_measured_network_and_compute_are_plausible(profile):
    _, p = profile
    assert 0 < parse_seconds(p["network"]["latency"]) < 1e-3
    assert parse_bandwidth_Bps(p["network"]["bandwidth"]) > 1e7
    assert p["network"]["fit"]["r2"] >= 0.9
    assert p["compute"]["seconds_per_sample"]["mlp"] > 0
    assert p["compute"]["flops_per_s"] > 0


@pytest.mark.mpi
def test_flops_per_s_is_three_forward_passes_of_the_median_model(profile):
    _, p = profile
    compute = p["compute"]
    for name, flops in compute["flops_per_sample"].items():
        assert flops == build_model(name, (28, 28, 1), 10).flops_per_sample
    rates = sorted(3 * compute["flops_per_sample"][m] / s
                   for m, s in compute["seconds_per_sample"].items())
    assert compute["flops_per_s"] == pytest.approx(rates[(len(rates) - 1) // 2], rel=1e-3)


@pytest.mark.mpi
def test_the_fitted_line_predicts_large_messages_within_a_factor_of_2(profile):
    _, p = profile
    alpha_s = parse_seconds(p["network"]["latency"])
    beta_Bps = parse_bandwidth_Bps(p["network"]["bandwidth"])
    n, t = np.array(p["network"]["fit"]["sizes"]), np.array(p["network"]["fit"]["seconds"])
    assert n.min() == 8 and n.max() >= 2**22 and len(n) == len(t)
    ratio = (alpha_s + n / beta_Bps) / t
    large = n >= 64 * 1024
    assert large.sum() >= 3
    assert np.all((ratio[large] > 0.5) & (ratio[large] < 2)), dict(zip(n, ratio, strict=True))


@pytest.mark.mpi
def test_the_simulator_reads_the_profile(profile):
    from sim.cluster_profile import load_profile

    path, p = profile
    loaded = load_profile(str(path))
    assert loaded.calibrated and loaded.network == "star"
    assert loaded.latency_s == parse_seconds(p["network"]["latency"])
    assert loaded.compute_seconds_per_sample("mlp", 1) == p["compute"]["seconds_per_sample"]["mlp"]


@pytest.mark.mpi
def test_one_rank_is_bad_input_in_one_line(tmp_path):
    done = calibrate(1, "--quick", "--out", str(tmp_path / "p.toml"))
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert "2 MPI ranks" in done.stderr
    assert not (tmp_path / "p.toml").exists()


@pytest.mark.mpi
@pytest.mark.parametrize(("argv", "flag"), [(["--models", "mlp,resnet"], "--models"),
                                            (["--batch-size", "0"], "--batch-size"),
                                            (["--dataset", "imagenet"], "dataset")])
def test_bad_flags_stop_every_rank_with_one_line(tmp_path, argv, flag):
    done = calibrate(2, "--quick", "--out", str(tmp_path / "p.toml"), *argv)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and flag in done.stderr
    assert not (tmp_path / "p.toml").exists()
