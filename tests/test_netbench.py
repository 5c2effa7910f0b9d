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
