"""Own code timed in the simulator is put at the calibration's speed (`calibration.pace`): the
factor follows the reference kernel's time, and a simulation multiplies its own code by it."""

import json

import pytest

from sim.run import main as sim_main
from twinsgd.calibration.pace import Pace, reference_seconds


def test_the_pace_is_the_calibrations_reference_over_the_reference_now_probed_every_interval():
    probes, clock = iter([1e-4, 2e-4, 4e-4]), iter([0.0, 0.2, 0.25, 0.3, 0.6])
    pace = Pace(2e-4, every_s=0.25, probe=probes.__next__, clock=clock.__next__)
    assert [pace() for _ in range(5)] == [2.0, 2.0, 1.0, 1.0, 0.5]
    with pytest.raises(ValueError, match="> 0"):
        Pace(0.0)


def test_the_reference_kernel_takes_a_fraction_of_a_millisecond_and_keeps_the_fastest(
    monkeypatch,
):
    assert 1e-6 < reference_seconds() < 0.05  # about 0.2 ms on these machines
    # timings of 3, 1 and 2 s (a clock read before and after each): the fastest, 1 s
    clock = iter([0.0, 3.0, 10.0, 11.0, 20.0, 22.0])
    monkeypatch.setattr("twinsgd.calibration.pace.perf_counter", clock.__next__)
    assert reference_seconds(repeats=3) == 1.0


def _compute_ms(tmp_path, name, profile):
    """A 2-rank allreduce's compute a step (ms), timed in process (``--compute measured``)."""
    out = tmp_path / name
    argv = ["--nodes", "2", "--algorithm", "allreduce", "--iterations", "30", "--batch-size"]
    argv += ["64", "--dataset", "synthetic", "--profile", str(profile), "--compute", "measured"]
    assert sim_main([*argv, "--no-progress", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    config = json.loads((out / "config.json").read_text())
    return summary["compute_s"] / summary["iterations"], config["cluster"]


def test_a_simulation_puts_what_it_times_at_the_calibrations_speed(tmp_path, monkeypatch):
    """A profile's ``[compute] reference_s``: with the reference taking 4 times less now than
    at calibration (a machine 4x as fast now), what the simulator times counts 4 times as
    much; without the key, as timed. (Timed in process, so within the machine's noise.)"""
    paced, plain = tmp_path / "paced.toml", tmp_path / "plain.toml"
    network = '[network]\nlatency = "5us"\nbandwidth = "10Gbps"\n'
    plain.write_text(network)
    paced.write_text(network + "[compute]\nreference_s = 2e-4\n")
    monkeypatch.setattr("sim.compute.Pace", lambda ref: Pace(ref, probe=lambda: ref / 4))
    as_timed, cluster = _compute_ms(tmp_path, "plain", plain)
    assert cluster["pace_reference_s"] is None
    four_times, cluster = _compute_ms(tmp_path, "paced", paced)
    assert cluster["pace_reference_s"] == 2e-4
    assert 2.5 < four_times / as_timed < 6.5, (four_times, as_timed)
