"""Own code of a machine's ranks at once (`sim.memshare`): processor sharing by the measured
slowdown, checked against the arithmetic by hand."""

import json
from types import SimpleNamespace

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import run
from sim.backend import Simulator
from sim.cluster_profile import load_profile
from sim.compute import ComputeModel, compute_model
from sim.memshare import MemoryShare, memory_shares, slowdown
from twinsgd.calibration.busycores import BusyCores
from twinsgd.run.runlog import Charges


def _run(jobs, factor):
    """Run ``jobs`` ((rank, start s, seconds alone)) on one `MemoryShare`; their end times."""
    env = simpy.Environment()
    share, ends = MemoryShare(env, factor), {}

    def job(rank, start, seconds):
        yield env.timeout(start)
        yield from share.run(rank, seconds)
        ends[rank] = env.now

    for rank, start, seconds in jobs:
        env.process(job(rank, start, seconds))
    env.run()
    return ends


def test_two_together_each_take_the_factor_and_one_alone_its_own_time():
    ends = _run([(0, 0.0, 1e-3), (1, 0.0, 1e-3), (2, 5e-3, 2e-3)], lambda k: 1.45 ** (k - 1))
    assert ends[0] == pytest.approx(1.45e-3) and ends[1] == pytest.approx(1.45e-3)
    assert ends[2] == pytest.approx(7e-3)  # alone: 2 ms


def test_an_overlap_shares_only_while_it_lasts():
    """Rank 0 runs 1 ms from 0, rank 1 1 ms from 0.5 ms, two at once at 2x: rank 0 does 0.5 ms
    alone, then 0.5 ms at half speed (1 ms), ending at 1.5 ms; rank 1 has done 0.5 ms by then
    and ends alone at 2.0 ms."""
    ends = _run([(0, 0.0, 1e-3), (1, 0.5e-3, 1e-3)], lambda k: float(k))
    assert ends[0] == pytest.approx(1.5e-3)
    assert ends[1] == pytest.approx(2.0e-3)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0, 5e-3), st.floats(1e-6, 2e-3)),
        min_size=1,
        max_size=5,
    ),
    st.floats(1.0, 3.0),
)
def test_no_one_ends_sooner_than_alone_nor_later_than_all_shared_all_along(jobs, f2):
    """With factor(k) = 1 + (f2 - 1)(k - 1): each ends no sooner than its own seconds after its
    start, and no later than if every job had run beside all the others the whole time."""
    ends = _run([(r, s, w) for r, (s, w) in enumerate(jobs)], lambda k: 1 + (f2 - 1) * (k - 1))
    worst = 1 + (f2 - 1) * (len(jobs) - 1)
    for rank, (start, seconds) in enumerate(jobs):
        assert ends[rank] >= start + seconds * (1 - 1e-9)
        assert ends[rank] <= start + seconds * worst * (1 + 1e-9)


def test_an_interrupted_rank_leaves_the_others_share():
    env = simpy.Environment()
    share, ends = MemoryShare(env, lambda k: float(k)), {}

    def job(rank):
        try:
            yield from share.run(rank, 1e-3)
            ends[rank] = env.now
        except simpy.Interrupt:
            ends[rank] = None

    first, second = env.process(job(0)), env.process(job(1))

    def killer():
        yield env.timeout(0.5e-3)
        second.interrupt()

    env.process(killer())
    env.run()
    assert first.ok and ends[1] is None
    # rank 0: 0.25 ms done by 0.5 ms (two at once at 2x), the other 0.75 ms alone: 1.25 ms
    assert ends[0] == pytest.approx(1.25e-3)


def test_shares_are_per_machine_and_none_without_a_measurement():
    update = BusyCores((1, 2), ((1.0,) * 11, (1.4,) * 11))
    env = simpy.Environment()
    shares = memory_shares(env, update, 2, 5)  # machines: ranks 0-1, 2-3, 4
    assert shares[0] is shares[1] and shares[2] is shares[3] and shares[0] is not shares[2]
    assert shares[4] is not shares[2]
    assert memory_shares(env, None, 2, 4) == [None] * 4
    assert memory_shares(env, update, 1, 3) == [None] * 3  # a rank a machine: alone
    assert slowdown(update, 2) == pytest.approx(1.4) and slowdown(update, 1) == 1.0
    assert slowdown(BusyCores((1, 2), ((1.0,) * 11, (0.9,) * 11)), 2) == 1.0  # noise: none


class _Log(Charges):
    def __init__(self):
        self.compute = 0.0

    def charge(self, kind, seconds, bytes_sent=0, bytes_recv=0):
        self.compute += seconds if kind == "compute" else 0.0


def test_the_simulator_waits_own_code_out_beside_its_machines_and_charges_the_longer():
    """Two ranks of one machine run 1 ms of own code at once where two take 1.4x: both end at
    1.4 ms, each charged the 0.4 ms more as compute (the 1 ms itself is charged when timed); a
    third rank, on a machine of its own, takes its 1 ms."""
    update = BusyCores((1, 2), ((1.0,) * 11, (1.4,) * 11))
    nodes = [SimpleNamespace(rank=r, size=3, reporter=0) for r in range(3)]
    logs = [_Log() for _ in nodes]
    sim = Simulator(nodes, logs, 1e-6, 1e9, ComputeModel(own_at_once=(update, 2)))
    ends = {}

    def own(rank):
        yield from sim._own_time(None, rank, 1e-3)
        ends[rank] = sim.env.now

    for rank in range(3):
        sim.env.process(own(rank))
    sim.env.run()
    assert ends[0] == pytest.approx(1.4e-3) and ends[1] == pytest.approx(1.4e-3)
    assert ends[2] == pytest.approx(1e-3)
    assert [log.compute for log in logs] == pytest.approx([0.4e-3, 0.4e-3, 0.0])


def test_a_profiles_update_at_once_reaches_the_compute_model_and_config(tmp_path):
    """``[compute.busy_update.mlp]`` of a profile emulated on one machine: every node of the run
    shares it; the run's config.json records the slowdown by k."""
    path = tmp_path / "p.toml"
    path.write_text(
        "[cluster]\ncores = 2\none_machine = true\n"
        '[network]\nlatency = "2us"\nbandwidth = "5GB/s"\n'
        "[compute]\nseconds_per_sample = { mlp = 1e-5 }\nseconds_per_step = { mlp = 5e-4 }\n"
        "[compute.busy_update.mlp]\nprocesses = [1, 2]\n"
        f"factors = [[{', '.join(['1.0'] * 11)}], [{', '.join(['1.3'] * 11)}]]\n"
    )
    profile = load_profile(str(path))
    options = SimpleNamespace(
        ghost=None, compute="profile", speeds="1x", stragglers=None, nodes=2, cores_per_host=None
    )
    update, per_machine = compute_model(options, profile, 0, "mlp").own_at_once
    assert update == profile.busy_update["mlp"] and per_machine == 2
    out = tmp_path / "run"
    argv = ["--nodes", "2", "--algorithm", "allreduce", "--iterations", "2", "--seed", "0"]
    argv += ["--profile", str(path), "--compute", "profile", "--out", str(out), "-q"]
    assert run.main(argv) == 0
    record = json.loads((out / "config.json").read_text())["cluster"]["own_at_once"]
    assert record == {"factors": {"1": 1.0, "2": 1.3}, "ranks_per_machine": 2}
    path.write_text(path.read_text().replace("processes = [1, 2]", "processes = [2, 1]"))
    with pytest.raises(ValueError, match=r"\[compute.busy_update.mlp\]|must increase"):
        load_profile(str(path))
