"""twinsgd.analysis.schedtrace: the scheduler's trace read back (a made-up trace whose answer is
known), and, as root with tracefs, a real run traced end to end."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from twinsgd.analysis.schedtrace import breakdown, parse, report

ROOT = Path(__file__).resolve().parents[1]


def _switch(t, cpu, prev, nxt):
    return (
        f"  python-{prev}  [{cpu:03d}] d..2.  {t:.6f}: sched_switch: prev_comm=python "
        f"prev_pid={prev} prev_prio=120 prev_state=R ==> next_comm=python next_pid={nxt} "
        f"next_prio=120"
    )


def _mark(t, pid, text):
    return f"  python-{pid}  [000] .....  {t:.6f}: tracing_mark_write: {text}"


def test_two_ranks_on_one_core_beside_another_process_and_idle_time():
    """Core 0: rank 0 (pid 100) computes 0-3 ms but is off its core 1-2 ms, when rank 1 (pid
    101, not computing) runs; core 1: pid 55 (not a rank) 0-1 ms, then idle. Rank 1 computes
    3-4 ms on core 0. Over 0-4 ms (8 ms of the cores): computing 3, not computing 1, other 1,
    idle 3; rank 0's kernel 3 ms on the wall, 2 on its core."""
    lines = [
        _switch(10.000, 0, 0, 100),
        _switch(10.000, 1, 0, 55),
        _mark(10.000, 100, "C+ 0"),
        _switch(10.001, 0, 100, 101),
        _switch(10.001, 1, 55, 0),
        "  <idle>-0  [001] d..2.  10.0015: some_other_event: x=1",
        _switch(10.002, 0, 101, 100),
        _mark(10.003, 100, "C- 0"),
        _switch(10.003, 0, 100, 101),
        _mark(10.003, 101, "C+ 1"),
        _mark(10.003, 101, "S+ 1 0"),  # another kind of mark: not a Compute
        _mark(10.004, 101, "C- 1"),
        _switch(10.004, 0, 101, 0),
        _switch(10.004, 1, 0, 0),
    ]
    result = breakdown(*parse(lines))
    assert result["span_s"] == pytest.approx(0.004)
    expected = {"computing": 3e-3, "not computing": 1e-3, "idle": 3e-3, "other": 1e-3}
    assert result["cores"] == pytest.approx(expected, abs=1e-9)
    assert result["ranks"][0]["wall_s"] == pytest.approx([3e-3])
    assert result["ranks"][0]["on_core_s"] == pytest.approx([2e-3])
    assert result["ranks"][0]["off_share"] == pytest.approx(1 / 3)
    assert result["ranks"][1]["off_share"] == pytest.approx(0.0, abs=1e-9)
    assert report(result)[0].startswith("over 0.004 s: computing 37.5 %, not computing 12.5 %")


def test_a_trace_without_compute_marks_is_refused():
    with pytest.raises(ValueError, match="TWINSGD_TRACE_MARKS"):
        breakdown(*parse([_switch(1.0, 0, 0, 7)]))


def test_no_command_is_one_line_and_status_2():
    done = subprocess.run(
        [sys.executable, "-m", "twinsgd.analysis.schedtrace", "--out", "x", "--"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="the kernel's trace needs root")
def test_a_command_that_does_not_exist_is_one_line_and_status_2(tmp_path):
    module = [sys.executable, "-m", "twinsgd.analysis.schedtrace"]
    done = subprocess.run(
        [*module, "--out", str(tmp_path), "--", "no-such-command-here"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if "cannot mount" in done.stderr:
        pytest.skip("no tracefs here")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "no-such-command-here" in done.stderr


@pytest.mark.mpi
@pytest.mark.skipif(
    os.geteuid() != 0 or not Path("/sys/kernel").exists(), reason="the kernel's trace needs root"
)
def test_a_real_run_of_three_ranks_is_traced_with_every_compute_marked(tmp_path):
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    _traced_ranks(tmp_path, [mpiexec, "-n", "3"], ["0", "1", "2"])


@pytest.mark.mpi
@pytest.mark.slow
def test_a_run_on_the_emulated_cluster_is_traced_with_every_compute_marked(tmp_path):
    """Through `real.cluster run`: ``ip netns exec`` mounts a /sys without tracefs, so
    `real.cluster` opens the trace marker before it and hands it on."""
    from tests.test_cluster import WHY_NOT

    if WHY_NOT is not None:
        pytest.skip(WHY_NOT)
    cluster = [sys.executable, "-m", "real.cluster", "run", "--hosts", "2", "-n", "2", "--"]
    _traced_ranks(tmp_path, cluster, ["0", "1"])


def _traced_ranks(tmp_path, launcher, ranks):
    """`schedtrace` over ``launcher`` + 10 steps of `real.train`: its table has a row for each
    of ``ranks`` with every Compute marked, and the cores' shares."""
    train = [sys.executable, "-m", "real.train", "--dataset", "synthetic", "--no-progress"]
    command = [*launcher, *train, "--iterations", "10", "--out", str(tmp_path / "run")]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "twinsgd.analysis.schedtrace",
            "--out",
            str(tmp_path),
            "--",
            *command,
        ],
        cwd=ROOT,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode == 2 and "cannot mount" in done.stderr:
        pytest.skip("no tracefs here")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    rows = [line for line in lines if line.startswith("| ") and "|---" not in line]
    assert [row.split("|")[1].strip() for row in rows[1:]] == ranks
    assert all(row.split("|")[2].strip() == "10" for row in rows[1:])  # every Compute marked
    (shares,) = [line for line in lines if line.startswith("over ")]
    assert "computing" in shares and "not computing" in shares
