"""Cluster profiles: presets parse and say they are uncalibrated; flags override a profile."""

import json
from pathlib import Path

import numpy as np
import pytest

from models import profile as network_profile
from sim import compute, run
from sim.cluster_profile import PRESETS, load_profile

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["polus-like", "lomonosov-2-like"])
def test_presets_parse_and_are_marked_uncalibrated(name):
    p = load_profile(name)
    assert p.calibrated is False and p.network and p.latency_s > 0 and p.bandwidth_Bps > 1e9
    flops = network_profile("resnet50").flops_per_sample
    assert p.compute_seconds_per_sample("resnet50", flops) == pytest.approx(
        3 * flops / p.flops_per_s
    )
    assert (PRESETS / f"{name}.toml").exists()


def test_a_measured_model_comes_before_the_flop_rate(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(
        '[network]\nlatency = "2us"\n[compute]\nflops_per_s = 1e9\n'
        "seconds_per_sample = { mlp = 1e-5 }\n"
    )
    p = load_profile(str(path))
    assert p.compute_seconds_per_sample("mlp", 10**6) == 1e-5
    assert p.compute_seconds_per_sample("cnn", 10**6) == pytest.approx(3e-3)
    assert (p.latency_s, p.bandwidth_Bps, p.network) == (2e-6, None, None)
    assert p.compute_seconds_per_step("mlp") == 0.0  # an older profile: per sample alone


def test_a_steps_fixed_part_goes_with_its_measured_per_sample_figure(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(
        "[compute]\nflops_per_s = 1e9\n"
        "seconds_per_sample = { mlp = 1e-5 }\nseconds_per_step = { mlp = 6e-4 }\n"
    )
    p = load_profile(str(path))
    assert p.compute_seconds_per_step("mlp") == 6e-4
    assert p.compute_seconds_per_step("cnn") == 0.0  # from the FLOP rate: per sample alone
    assert p.gradient_fit("mlp") == (6e-4, 1e-5) and p.gradient_fit("cnn") == (0.0, 0.0)


def test_the_gradients_fit_leaves_the_update_out(tmp_path):
    """Step times of gradients alone move by the gradient's fit: the update's part is off it."""
    path = tmp_path / "c.toml"
    path.write_text(
        "[compute]\nseconds_per_sample = { mlp = 1e-5 }\nseconds_per_step = { mlp = 6e-4 }\n"
        "seconds_per_update = { mlp = 3.5e-4 }\n"
    )
    p = load_profile(str(path))
    fixed, per_sample = p.gradient_fit("mlp", whole_step=False)
    assert fixed == pytest.approx(2.5e-4, rel=1e-12) and per_sample == 1e-5
    assert p.gradient_fit("mlp", whole_step=True) == (6e-4, 1e-5)
    path.write_text("[compute]\nseconds_per_sample = 1e-5\nseconds_per_step = 6e-4\n")
    assert load_profile(str(path)).gradient_fit("cnn") == (6e-4, 1e-5)  # one figure for all


def test_a_switch_is_read_per_model_and_a_negative_one_is_refused(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[compute]\nswitch_s = { mlp = 7e-5 }\n")
    p = load_profile(str(path))
    assert (p.switch_seconds("mlp"), p.switch_seconds("cnn")) == (7e-5, 0.0)
    path.write_text("[compute]\nswitch_s = 1e-4\n")
    assert load_profile(str(path)).switch_seconds("cnn") == 1e-4  # one figure for all
    path.write_text("[compute]\nswitch_s = { mlp = -1e-5 }\n")
    with pytest.raises(ValueError, match="switch_s"):
        load_profile(str(path))


def test_the_kernels_cpu_a_byte_is_read_and_a_negative_or_missing_one_refused(tmp_path):
    path = tmp_path / "c.toml"
    assert load_profile(_write(path, "")).stack_cpu is None
    text = "[network.stack]\nsend_s_per_byte = 1.1e-9\nrecv_s_per_byte = 0.0\nbytes = 7\n"
    assert load_profile(_write(path, text)).stack_cpu == (1.1e-9, 0.0)
    with pytest.raises(ValueError, match=r"\[network.stack\] recv_s_per_byte must be"):
        load_profile(_write(path, text.replace("0.0", "-1e-9")))
    with pytest.raises(ValueError, match="needs send_s_per_byte and recv_s_per_byte"):
        load_profile(_write(path, "[network.stack]\nsend_s_per_byte = 1e-9\n"))


def test_the_adds_call_from_python_is_read_and_a_negative_one_refused(tmp_path):
    """``[compute.reduction] call_s``: MPI's adds are charged the table less it; a profile
    without it charges them the table (as before it was measured)."""
    path = tmp_path / "c.toml"
    table = (
        "[compute.reduction]\nmin_bytes = [1024.0]\nmax_bytes = [16777216.0]\n"
        "latency_s = [1.4e-6]\nbandwidth_Bps = [2.5e10]\n"
    )
    assert load_profile(_write(path, table)).reduction_call_s == 0.0
    p = load_profile(_write(path, table + "call_s = 1.1e-6\n"))
    assert p.reduction_call_s == 1.1e-6
    assert p.reduction.seconds(1024) == pytest.approx(1.4e-6 + 1024 / 2.5e10, rel=1e-12)
    with pytest.raises(ValueError, match=r"\[compute.reduction\] call_s must be"):
        load_profile(_write(path, table + "call_s = -1e-6\n"))
    path.write_text(table + "call_s = 1.1e-6\n")
    assert _cluster(tmp_path, ["--profile", str(path)])["reduction_call_s"] == 1.1e-6


def _write(path, text):
    path.write_text(text)
    return str(path)


def _cluster(tmp_path, argv):
    out = tmp_path / "run"
    assert (
        run.main(
            [
                "--nodes",
                "2",
                "--algorithm",
                "allreduce",
                "--ghost",
                "1000",
                "--iterations",
                "1",
                *argv,
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return json.loads((out / "config.json").read_text())["cluster"]


def test_the_profile_gives_the_network_and_flags_override_it(tmp_path):
    cluster = _cluster(tmp_path / "a", ["--profile", "lomonosov-2-like"])
    assert (cluster["network"], cluster["latency_s"], cluster["bandwidth_Bps"]) == (
        "fat-tree:36",
        5e-7,
        6.8e9,
    )
    cluster = _cluster(
        tmp_path / "b", ["--profile", "lomonosov-2-like", "--latency", "3us", "--network", "ring"]
    )
    assert (cluster["network"], cluster["latency_s"], cluster["bandwidth_Bps"]) == (
        "ring",
        3e-6,
        6.8e9,
    )
    cluster = _cluster(tmp_path / "c", [])
    assert (cluster["network"], cluster["latency_s"], cluster["bandwidth_Bps"]) == (
        "star",
        5e-6,
        1.25e9,
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "no such file or preset"),
        ("[network\n", "p.toml: not valid TOML (Expected ']' at the end of a table declaration"),
        ('[network]\nlatency = "fast"\n', "p.toml: [network] latency: time: cannot read 'fast'"),
        (
            "[compute]\nflops_per_s = nan\n",
            "[compute] flops_per_s must be a finite number > 0, got nan",
        ),
        ("[cluster]\ncores = 0\n", "[cluster] cores must be a finite number > 0, got 0"),
        ("[compute]\n", "no seconds_per_sample"),
    ],
)
def test_a_bad_profile_is_one_line_and_exit_2(tmp_path, capsys, text, message):
    path = tmp_path / "p.toml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(SystemExit) as stop:
        run.main(
            [
                "--nodes",
                "2",
                "--algorithm",
                "allreduce",
                "--compute",
                "profile",
                "--profile",
                str(path),
                "--dataset",
                "synthetic",
                "--out",
                str(tmp_path / "run"),
            ]
        )
    assert stop.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


def test_oversubscribed_ranks_share_the_cores_of_their_host(tmp_path):
    (tmp_path / "p.toml").write_text("[cluster]\ncores = 2\n[compute]\nseconds_per_sample = 1e-3\n")
    summaries = {}
    for ranks in (1, 2, 4):
        out = tmp_path / f"r{ranks}"
        assert (
            run.main(
                [
                    "--nodes",
                    "4",
                    "--algorithm",
                    "allreduce",
                    "--dataset",
                    "synthetic",
                    "--batch-size",
                    "10",
                    "--iterations",
                    "2",
                    "--compute",
                    "profile",
                    "--profile",
                    str(tmp_path / "p.toml"),
                    "--ranks-per-host",
                    str(ranks),
                    "--out",
                    str(out),
                ]
            )
            == 0
        )
        summaries[ranks] = json.loads((out / "summary.json").read_text())
    compute = {r: s["compute_s"] for r, s in summaries.items()}
    assert compute[1] == compute[2] == pytest.approx(2 * 10 * 1e-3)  # a core each
    # 4 ranks on 2 cores take turns: the cores do 4 x 20 ms of work in no less than 40 ms, and
    # a rank's compute (its own 20 ms and the turns it waits for inside it) is at most twice
    assert summaries[4]["time_s"] >= 4 * compute[1] / 2 - 1e-12
    assert compute[1] < compute[4] <= 2 * compute[1] + 1e-12


def test_speeds_come_from_a_list_a_file_or_a_seeded_distribution(tmp_path):
    assert compute.node_speeds("1x,0.5x", 4, seed=0) == (1.0, 0.5)
    (tmp_path / "speeds.txt").write_text("1\n0.25x\n2\n")
    assert compute.node_speeds(str(tmp_path / "speeds.txt"), 3, seed=0) == (1.0, 0.25, 2.0)
    drawn = compute.node_speeds("lognormal:0.3", 20_000, seed=1)
    assert (
        drawn
        == compute.node_speeds("lognormal:0.3", 20_000, seed=1)
        != compute.node_speeds("lognormal:0.3", 20_000, seed=2)
    )
    assert np.median(drawn) == pytest.approx(1.0, rel=0.02)
    assert np.std(np.log(drawn)) == pytest.approx(0.3, rel=0.03)
    uniform = compute.node_speeds("uniform:0.5:1.5", 20_000, seed=1)
    assert min(uniform) >= 0.5 and max(uniform) <= 1.5
    assert np.mean(uniform) == pytest.approx(1.0, rel=0.01)
    for bad in ("lognormal:-1", "uniform:2:1", "uniform:1", "lognormal:x", "0x", "fast"):
        with pytest.raises(ValueError):
            compute.node_speeds(bad, 4, seed=0)


def test_a_ghost_on_a_profile_without_compute_is_communication_alone_and_says_so(tmp_path):
    """An OSU table's profile (sim.calibrate --from-osu) times no compute (its [compute] holds
    gamma at most): a ghost run on it charges no compute, and says so in one line."""
    import subprocess
    import sys

    profile = tmp_path / "osu.toml"
    profile.write_text('[network]\nlatency = "1us"\nbandwidth = "10Gbps"\n')
    cmd = [sys.executable, "-m", "sim.run", "--profile", str(profile), "--nodes", "4"]
    cmd += ["--ghost", "resnet50", "--iterations", "2", "--out", str(tmp_path / "r")]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        f"python -m sim.run: --profile {profile} times no compute (no rate or step times in "
        f"[compute]): the ghost's compute is free (communication alone)"
    ]
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["compute_s"] == 0 and summary["comm_s"] > 0


def test_a_wire_cost_of_zero_seconds_is_read_and_a_negative_or_missing_one_is_not(tmp_path):
    """``[network.in_situ.wire]``: real.calibrate writes write_s and write_s_per_byte floored
    at 0, so 0 must load; a negative or missing key names itself in one line."""

    def profile(wire):
        path = tmp_path / "p.toml"
        rows = "".join(f"{k} = {v}\n" for k, v in wire.items())
        path.write_text(f'[cluster]\nname = "t"\n\n[network.in_situ.wire]\n{rows}')
        return str(path)

    loaded = load_profile(profile({"write_s": 0.0, "write_s_per_byte": 0.0, "read_s": 1e-5}))
    assert loaded.wire.write(1000) == 0.0 and loaded.wire.read() == 1e-5
    with pytest.raises(ValueError, match="write_s must be a finite number >= 0"):
        load_profile(profile({"write_s": -1.0, "write_s_per_byte": 0.0, "read_s": 1e-5}))
    with pytest.raises(ValueError, match="needs read_s"):
        load_profile(profile({"write_s": 0.0, "write_s_per_byte": 0.0}))
    assert loaded.wire.allgather_extra() == 0.0  # not measured: nothing past the messages
    wire = {"write_s": 0.0, "write_s_per_byte": 0.0, "read_s": 1e-5, "allgather_extra_s": 6e-5}
    assert load_profile(profile(wire)).wire.allgather_extra() == 6e-5
    with pytest.raises(ValueError, match="allgather_extra_s must be a finite number >= 0"):
        load_profile(profile({**wire, "allgather_extra_s": -1e-6}))
