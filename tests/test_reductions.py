"""MPICH's reduce to one root (`programs.reductions`): the root ends with the sum, in every
rank count and from every root, bytes and times against the alpha-beta formulas (the lockstep
driver's synchronous sends), and which one MPICH picks; `sim.osu osu_reduce` runs it."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twinsgd.programs import lockstep
from twinsgd.programs.mpi_choices import reduce_algorithm
from twinsgd.programs.reductions import REDUCES, binomial_reduce, reduce_scatter_gather

ROOT = Path(__file__).resolve().parents[1]
ALPHA, BETA = 3.0, 8.0  # seconds per message, bytes per second


def _reduce(program, n, root, size):
    """Run ``program`` to ``root`` on ``size`` ranks in lockstep on integer-valued floats
    (every order of adding gives the same bits); the run, after checking the root's sum."""
    rng = np.random.default_rng([n, root, size])
    bufs = [rng.integers(-50, 50, n).astype(np.float32) for _ in range(size)]
    total = np.sum(bufs, axis=0, dtype=np.float32)
    programs = [program(b, root, r, size) for r, b in enumerate(bufs)]
    run = lockstep.run_lockstep(programs, ALPHA, BETA)
    assert bufs[root].tobytes() == total.tobytes()
    return run


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 13), st.data())
def test_the_root_gets_the_sum_from_any_root_and_rank_count(size, data):
    root = data.draw(st.integers(0, size - 1))
    pof2 = 1 << (size.bit_length() - 1)
    n = data.draw(st.integers(pof2, 4 * pof2 + 3))
    _reduce(binomial_reduce, data.draw(st.integers(1, 40)), root, size)
    _reduce(reduce_scatter_gather, n, root, size)


@pytest.mark.parametrize("size", [2, 4, 8, 16])
def test_times_and_bytes_are_thakurs(size):
    """A power of two p, n = 64 p floats: the binomial tree log2 p (alpha + n/beta), the root
    receiving log2 p n bytes; the reduce-scatter and gather 2 log2 p alpha + 2 (p-1)/p n/beta,
    the root receiving (p-1)/p n in each half, every rank sending as much in all as it gets."""
    n = 64 * size
    nbytes, rounds = 4 * n, size.bit_length() - 1
    tree = _reduce(binomial_reduce, n, 0, size)
    assert max(tree.finished) == pytest.approx(rounds * (ALPHA + nbytes / BETA), rel=1e-12)
    assert tree.received[0] == rounds * nbytes
    halving = _reduce(reduce_scatter_gather, n, 0, size)
    expected = 2 * rounds * ALPHA + 2 * (size - 1) / size * nbytes / BETA
    assert max(halving.finished) == pytest.approx(expected, rel=1e-12)
    assert halving.received[0] == 2 * (size - 1) * nbytes // size
    assert sum(halving.sent) == sum(halving.received)


def test_reduce_scatter_gather_refuses_fewer_elements_than_the_power_of_two():
    with pytest.raises(ValueError, match=">= 4 elements"):
        next(reduce_scatter_gather(np.zeros(3, np.float32), 0, 0, 5))


@pytest.mark.parametrize(
    "count, size, expected",
    [(512, 8, "binomial"), (513, 8, "reduce-scatter-gather"), (600, 1024, "binomial")],
)
def test_mpich_picks_as_its_built_in_selection(count, size, expected):
    """Binomial up to 2,048 bytes (inclusive) or with fewer elements than p', else the
    reduce-scatter and gather; Open MPI's rules are refused, not guessed."""
    assert reduce_algorithm("mpich", count, 4, size) == expected
    assert expected in REDUCES
    with pytest.raises(ValueError, match="not modelled"):
        reduce_algorithm("openmpi", count, 4, size)


def test_sim_osu_reduce_prints_a_table_and_refuses_open_mpi_in_one_line():
    run = [sys.executable, "-m", "sim.osu", "osu_reduce", "--ranks", "6", "--sizes", "4:8192"]
    done = subprocess.run(run, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if not line.startswith("#")]
    assert [int(r[0]) for r in rows] == [2**k for k in range(2, 14)]
    assert all(float(r[1]) > 0 for r in rows)
    refused = subprocess.run(
        [*run, "--mpi", "openmpi"], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "reduce rules are not modelled" in refused.stderr
