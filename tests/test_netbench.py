"""The calibration's message patterns (`real.netbench`), on a stand-in pair and clock."""

from types import SimpleNamespace

import numpy as np
import pytest

import real.netbench as netbench


class _Machine:
    """A clock, and a pair of ranks on a machine whose speed changes between repetitions (this
    machine's moves 1.4-1.6x within seconds): a Sendrecv takes 1 ns a byte times the speed of
    the repetition it is in; a repetition is three compute steps (`allreduce_in_situ`'s with
    ``paired``: the pattern's, the Sendrecv's and the allreduce's)."""

    rank, size = 0, 2

    def __init__(self):
        self.now, self.steps, self.buffer = 0.0, 0, np.ones(1 << 16, np.float32)

    def speed(self):
        return (1.0, 1.5, 1.2)[((self.steps - 1) // 3) % 3]  # steps 1-3: the first repetition

    def step(self):
        self.steps += 1
        return self.buffer

    def Sendrecv(self, sendbuf, dest, sendtag, recvbuf, source, recvtag):
        self.now += 1e-9 * sendbuf.nbytes * self.speed()
        np.copyto(recvbuf, sendbuf)

    def Split(self, color, key):
        return self

    def Barrier(self):
        """Alone: nothing to wait for."""

    def Free(self):
        """Nothing held."""

    def Ibarrier(self):
        return SimpleNamespace(Test=lambda: True)


def test_the_allreduce_less_its_two_sendrecvs_is_taken_within_each_repetition(monkeypatch):
    """The allreduce of 2 ranks is two Sendrecvs of n/2 here and nothing else: timed in the
    same repetition, its remainder past them is 0 at whatever speed the machine ran, while the
    allreduce alone moves with the speed (1.0x, 1.5x, 1.2x from repetition to repetition).
    Against a Sendrecv timed in another phase the remainder took the speeds' difference (59
    and 431 us for 1 MiB in two calibrations of one day, 2026-12-02). Its second step, from
    the end of the first, is its own Sendrecv's time at that repetition's speed."""
    machine = _Machine()
    monkeypatch.setattr(netbench.time, "perf_counter", lambda: machine.now)
    sizes = [65536, 262144]
    outside, paired, second = {}, {}, {}
    medians = netbench.allreduce_in_situ(
        machine, sizes, machine.step, True, outside, paired, second
    )
    for nbytes, median in zip(sizes, medians, strict=True):
        assert paired[nbytes] == pytest.approx([0.0] * len(paired[nbytes]), abs=1e-15)
        assert outside[nbytes] == pytest.approx([0.0] * len(outside[nbytes]), abs=1e-15)
        assert median == pytest.approx(1.2e-9 * nbytes, rel=1e-12)  # the middle speed's
        speeds = {round(s / (0.5e-9 * nbytes), 9) for s in second[nbytes]}
        assert speeds == {1.0, 1.5, 1.2}  # each repetition's half at its own speed
    assert len(paired[65536]) > 3
    with pytest.raises(ValueError, match="paired needs second"):
        netbench.allreduce_in_situ(machine, sizes, machine.step, True, None, {})


@pytest.mark.mpi
def test_the_exchange_probe_times_one_to_three_messages_on_two_ranks_and_a_ring_on_more(
    tmp_path,
):
    """scripts/exchange_probe.py as a user runs it: with 2 ranks, 1, 2 and 3 messages each way
    with the one partner; with 3, the ring's two neighbours; every rank's median exchange, in
    the printed line (us) as in the JSON line appended per job; a bad count, one line, exit 2."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    script = str(root / "scripts" / "exchange_probe.py")
    out = tmp_path / "x.jsonl"
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    printed = []
    for ranks in (2, 3):
        argv = [mpiexec, "-n", str(ranks), sys.executable, script, "--bytes", "4096"]
        done = subprocess.run(
            [*argv, "--reps", "3", "--out", str(out)],
            capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        printed += done.stdout.splitlines()
    jobs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [job["ranks"] for job in jobs] == [2, 3]
    assert list(jobs[0]["cases"]) == [f"{k} message(s) each way, one partner" for k in (1, 2, 3)]
    assert list(jobs[1]["cases"]) == ["ring: left and right neighbour"]
    lines = iter(printed)
    for job in jobs:
        assert job["bytes"] == 4096 and job["reps"] == 3
        for name, every in job["cases"].items():
            assert len(every) == job["ranks"] and all(0 < s < 1 for s in every)
            assert next(lines) == (
                f"{job['ranks']} ranks, {name}: median {1e6 * float(np.median(every)):.1f} us; "
                "by rank " + " ".join(f"{1e6 * s:.0f}" for s in every)
            )
    bad = subprocess.run(
        [sys.executable, script, "--reps", "0"], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--reps >= 1" in bad.stderr
