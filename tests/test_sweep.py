"""``python -m sim.sweep``: grid expansion, one run folder and one CSV row per point, failures.

The runs are tiny (synthetic data, 3 steps of batch 8) and their compute time comes from a
profile, so simulated times are exact functions of the grid values.
"""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sim import sweep

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = str(Path(sys.executable).parent / "mpiexec")
ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "TWINSGD_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
P_MLP = 167_560  # parameters of the 784-200-50-10 MLP, float32 on the wire
TINY = [
    "--dataset",
    "synthetic",
    "--iterations",
    "3",
    "--batch-size",
    "8",
    "--model",
    "mlp",
    "--algorithm",
    "allreduce",
]


@pytest.fixture(autouse=True)
def _one_blas_thread(monkeypatch):
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    monkeypatch.setenv("TWINSGD_OFFLINE", "1")


def tiny_run_flags(tmp_path):
    """TINY with compute charged from a profile (1e-4 s per sample), so times are deterministic."""
    profile = tmp_path / "profile.toml"
    profile.write_text("[compute]\nseconds_per_sample = 1e-4\n")
    return [*TINY, "--compute", "profile", "--profile", str(profile)]


def read_csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_grid_expands_in_order_given_first_axis_slowest_with_readable_names():
    grid = [
        ("nodes", ["4", "8"]),
        ("latency", ["5us", "50us"]),
        ("algorithm", ["allreduce", "gossip"]),
    ]
    names = [sweep.point_name(p) for p in sweep.expand_grid(grid)]
    assert names == [
        "nodes=4_latency=5us_algorithm=allreduce",
        "nodes=4_latency=5us_algorithm=gossip",
        "nodes=4_latency=50us_algorithm=allreduce",
        "nodes=4_latency=50us_algorithm=gossip",
        "nodes=8_latency=5us_algorithm=allreduce",
        "nodes=8_latency=5us_algorithm=gossip",
        "nodes=8_latency=50us_algorithm=allreduce",
        "nodes=8_latency=50us_algorithm=gossip",
    ]
    assert sweep.point_name({"topology": "graphs/my ring.txt"}) == "topology=graphs_my_ring.txt"


def test_point_argv_puts_grid_flags_then_shared_flags_then_its_own_out():
    flags = sweep.sim_run_flags()
    point = {"nodes": "4", "error-feedback": "true", "lr": "-1"}
    assert sweep.point_argv(point, ["--iterations", "3"], "o/p", flags) == [
        "--nodes=4",
        "--error-feedback",
        "--lr=-1",
        "--iterations",
        "3",
        "--out",
        "o/p",
    ]
    assert sweep.point_argv({"error-feedback": "false"}, [], "o", flags) == [
        "--no-error-feedback",
        "--out",
        "o",
    ]


@pytest.mark.parametrize(
    ("specs", "shared", "message"),
    [
        (["nodes"], [], "expected NAME=V1,V2,..."),
        (["nodes="], [], "empty value"),
        (["nodes=4,,8"], [], "empty value"),
        (["bogus=1"], [], "sim.run has no flag --bogus"),
        (["--nodes=4"], [], "without dashes"),
        (["nodes=4", "nodes=8"], [], "already gridded"),
        (["out=a,b"], [], "the sweep sets --out"),
        (["error-feedback=yes"], [], "true,false"),
        (["topology=a/b,a_b"], [], "same folder name"),
        (["nodes=4"], ["--iterations", "3", "--nodes", "8"], "both in --grid and after --"),
        (["error-feedback=true"], ["--no-error-feedback"], "both in --grid and after --"),
        (["nodes=4"], ["--out", "x"], "the sweep sets --out"),
        (["nodes=4"], ["--iter=3"], "sim.run has no flag --iter"),
    ],
)
def test_bad_grid_or_shared_flags_raise_one_line(specs, shared, message):
    flags = sweep.sim_run_flags()
    with pytest.raises(ValueError, match=message.replace(".", r"\.")) as err:
        sweep.check_shared_flags(shared, sweep.parse_grid(specs, flags), flags)
    assert "\n" not in str(err.value)


def test_a_point_that_raises_gets_a_one_line_failure_and_the_caller_state_back(
    monkeypatch, tmp_path
):
    def broken_run(prepared):
        print("some output")
        raise RuntimeError("a bug\non two lines")

    monkeypatch.setattr("sim.run.run_simulation", broken_run)
    argv_before, stdout_before = list(sys.argv), sys.stdout
    outcome = sweep.run_point(["--nodes=2", "--out", str(tmp_path / "point")])
    assert outcome == {"status": "failed: RuntimeError: a bug on two lines", "summary": None}
    assert sys.argv == argv_before and sys.stdout is stdout_before


@pytest.fixture(scope="module")
def two_by_two(tmp_path_factory):
    """nodes=2,4 x latency=5us,50us on 2 local workers: (exit status, sweep folder)."""
    out = tmp_path_factory.mktemp("sweep")
    flags = tiny_run_flags(tmp_path_factory.mktemp("profile"))
    argv = [
        "--out",
        str(out),
        "--grid",
        "nodes=2,4",
        "--grid",
        "latency=5us,50us",
        "--workers",
        "2",
        "--executor",
        "process",
        "--",
        *flags,
    ]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENBLAS_NUM_THREADS", "1")
        patch.setenv("TWINSGD_OFFLINE", "1")
        code = sweep.main(argv)
    return code, out


def test_two_by_two_sweep_writes_a_run_folder_and_a_done_row_per_point(two_by_two):
    code, out = two_by_two
    assert code == 0
    rows = read_csv(out / "sweep.csv")
    assert [(r["nodes"], r["latency"]) for r in rows] == [
        ("2", "5us"),
        ("2", "50us"),
        ("4", "5us"),
        ("4", "50us"),
    ]
    assert list(rows[0])[:3] == ["nodes", "latency", "status"]
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == sorted(r["run"] for r in rows)
    assert not list(out.glob(".sweep.csv.*"))  # no temporary file left behind
    for row in rows:
        summary = json.loads((out / row["run"] / "summary.json").read_text())
        config = json.loads((out / row["run"] / "config.json").read_text())
        assert row["status"] == summary["status"] == "done"
        assert float(row["time_s"]) == summary["time_s"]
        assert int(row["bytes_sent"]) == summary["bytes_sent"]
        assert summary["nodes"] == int(row["nodes"])
        assert config["command"][3:5] == [f"--nodes={row['nodes']}", f"--latency={row['latency']}"]


def test_two_by_two_sweep_columns_follow_the_cluster(two_by_two):
    _, out = two_by_two
    rows = {(int(r["nodes"]), r["latency"]): r for r in read_csv(out / "sweep.csv")}
    for (p, _), row in rows.items():
        # ring allreduce: every node sends 2(p-1)/p of the gradient per step
        assert float(row["bytes_per_iteration"]) == 2 * (p - 1) * 4 * P_MLP
        assert int(row["iterations"]) == 3
    for p in (2, 4):
        assert float(rows[p, "50us"]["time_s"]) > float(rows[p, "5us"]["time_s"])
        assert float(rows[p, "50us"]["comm_s"]) > float(rows[p, "5us"]["comm_s"])
        assert rows[p, "50us"]["bytes_sent"] == rows[p, "5us"]["bytes_sent"]
    assert int(rows[4, "5us"]["bytes_sent"]) > int(rows[2, "5us"]["bytes_sent"])


def test_a_point_with_bad_input_fails_alone_and_the_sweep_exits_3(tmp_path, capsys):
    argv = [
        "--out",
        str(tmp_path),
        "--grid",
        "nodes=0,2",
        "--workers",
        "2",
        "--executor",
        "process",
        "--",
        *tiny_run_flags(tmp_path),
    ]
    assert sweep.main(argv) == 3
    bad, good = read_csv(tmp_path / "sweep.csv")
    assert bad["nodes"] == "0"
    assert bad["status"] == "failed: --nodes must be >= 1, got 0"
    assert bad["time_s"] == ""
    assert good["status"] == "done"
    assert float(good["time_s"]) > 0
    progress = capsys.readouterr().err.splitlines()
    assert "[1/2] " in progress[1] and "[2/2] " in progress[2]
    assert any(line.endswith("nodes=0: failed: --nodes must be >= 1, got 0") for line in progress)


@pytest.mark.parametrize(
    "argv",
    [
        ["--grid", "nodes"],
        ["--grid", "bogus=1"],
        ["--grid", "nodes=2,4", "--", "--nodes", "8"],
        ["--grid", "nodes=2", "--iterations", "3"],
    ],
)
def test_bad_sweep_input_exits_2_with_one_line_and_no_traceback(tmp_path, argv):
    done = subprocess.run(
        [sys.executable, "-m", "sim.sweep", "--out", str(tmp_path / "s"), *argv],
        cwd=ROOT,
        env=ENV,
        timeout=60,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("python -m sim.sweep: error: ")
    assert not (tmp_path / "s").exists()


@pytest.mark.mpi
def test_sweep_under_mpi4py_futures_runs_the_points_on_the_other_ranks(tmp_path):
    out = tmp_path / "s"
    cmd = [
        MPIEXEC,
        "-n",
        "3",
        sys.executable,
        "-m",
        "mpi4py.futures",
        "-m",
        "sim.sweep",
        "--out",
        str(out),
        "--grid",
        "nodes=2,4",
        "--",
        *tiny_run_flags(tmp_path),
    ]
    done = subprocess.run(cmd, cwd=ROOT, env=ENV, timeout=120, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "on 2 MPI rank(s) (mpi4py.futures)" in done.stderr.splitlines()[0]
    rows = read_csv(out / "sweep.csv")
    assert [(r["nodes"], r["status"]) for r in rows] == [("2", "done"), ("4", "done")]
    for row in rows:
        summary = json.loads((out / row["run"] / "summary.json").read_text())
        assert float(row["time_s"]) == summary["time_s"]


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        ("nodes=2,x", "point nodes=x: argument --nodes: invalid int value: 'x'"),
        ("latency=5us,5", "point latency=5: argument --latency: '5' needs a unit"),
        (
            "mode=sync,ssp",
            "point mode=ssp: --mode ssp needs --algorithm ps, got --algorithm allreduce",
        ),
    ],
)
def test_a_bad_grid_value_is_the_sweeps_bad_input_exit_2_before_any_point_runs(
    tmp_path, capsys, grid, message
):
    with pytest.raises(SystemExit) as stop:
        sweep.main(
            [
                "--out",
                str(tmp_path / "s"),
                "--grid",
                grid,
                "--",
                "--algorithm",
                "allreduce",
                "--iterations",
                "2",
                "--dataset",
                "mnist-subset",
            ]
        )
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"python -m sim.sweep: error: {message}"), err
    assert not any((tmp_path / "s").glob("*/config.json"))  # no point ran
