"""`real.backend.probe`: MPI's Probe as a loop of Iprobe that gives the core up between polls
(MPICH's Probe keeps it, so ranks that share cores wait a whole turn for a peer in it); and
the simulator's receive that mirrors it: a program's Recv of a message it waited for ends its
wait when its probe sees the message and is done later than a plain Recv, and a rendezvous
sender with it (``[network.in_situ.probe]``, `sim.backend.Simulator._recv`)."""

from types import SimpleNamespace

import numpy as np
import pytest

import real.backend as backend
from sim.backend import Simulator
from sim.cluster_profile import ProbeCost
from sim.compute import ComputeModel
from tests.programs import ChargeLog
from twinsgd.calibration.costfit import PiecewiseCost
from twinsgd.programs.ops import Compute, Recv, Send


class _Comm:
    """An Iprobe that finds the message on its ``after``-th poll, and records its arguments."""

    def __init__(self, after):
        self.after, self.polls, self.args = after, 0, None

    def Iprobe(self, source, tag, status):  # mpi4py's name
        self.polls += 1
        self.args = (source, tag, status)
        return self.polls >= self.after


def test_probe_yields_between_polls_until_the_message_is_there(monkeypatch):
    yields = []
    monkeypatch.setattr(backend.os, "sched_yield", lambda: yields.append(1))
    comm, status = _Comm(after=4), object()
    backend.probe(comm, 3, 9, status)
    assert comm.polls == 4 and len(yields) == 3  # a yield after each empty poll, none after
    assert comm.args == (3, 9, status)  # the source, tag and status passed on


def test_probe_of_a_message_already_there_does_not_yield(monkeypatch):
    yields = []
    monkeypatch.setattr(backend.os, "sched_yield", lambda: yields.append(1))
    comm = _Comm(after=1)
    backend.probe(comm, -1, 0, None)
    assert comm.polls == 1 and yields == []


LATENCY_S, BANDWIDTH_BPS, PROBE_S, SEEN_S = 1e-5, 1e9, 5e-6, 8e-6
MESSAGE = 1000  # float32: 4,000 bytes, past the eager limit below (a rendezvous)


def _probe_cost():
    """Done 5 us later than a plain Recv; seen 8 us after the message began to move."""
    flat = PiecewiseCost.constant
    return ProbeCost(later=flat(PROBE_S, 1e18), seen=flat(SEEN_S, 1e18))


def _send_once(sender_computes, probe_s=PROBE_S, cores=()):
    """Rank 0 sends one message to rank 1; the one of them that computes 1 ms first is late.
    Returns (when each rank's operation ended, s; each rank's log). ``cores``: the simulator's
    core groups; a third rank, with nothing to do, makes 3 ranks on 2 cores of them."""
    size = 3 if cores else 2
    ended, logs = {}, [ChargeLog() for _ in range(size)]

    def program(rank, sim):
        if rank == 2:
            return
        if (rank == 0) == sender_computes:
            yield Compute(lambda: None, samples=1)
        buf = np.zeros(MESSAGE, np.float32)
        if rank == 0:
            yield Send(dest=1, payload=buf)
        else:
            yield Recv(source=0, buf=buf)
        ended[rank] = sim.env.now

    nodes = [SimpleNamespace(rank=r, size=size, reporter=0) for r in range(size)]
    sim = Simulator(
        nodes,
        logs,
        LATENCY_S,
        BANDWIDTH_BPS,
        ComputeModel(seconds_per_sample=0.001),
        eager_bytes=1024,
        entry_barrier=True,  # wait measured: a program's Recv probes first
        probe_cost=_probe_cost() if probe_s else None,
        core_groups=cores,
    )
    sim.run([program(r, sim) for r in range(size)])
    return ended, logs


@pytest.mark.parametrize("cores", [(), ((range(3), 2),)])
def test_a_receive_that_waited_sees_its_message_later_and_its_rendezvous_sender_waits_for_it(
    cores,
):
    """The receiver waited: the message moves from 1 ms (the sender's compute) and lands 14 us
    later; the receiver's probe sees it 8 us after it began to move (its wait ends) and the
    receive is done 5 us after it landed, and the sender's rendezvous Send then. Without the
    cost, both end when it lands. Also where ranks share cores (the receive's other path)."""
    transfer = LATENCY_S + 4 * MESSAGE / BANDWIDTH_BPS
    (plain, _), (probed, logs) = _send_once(True, 0.0, cores), _send_once(True, cores=cores)
    assert plain[0] == plain[1] == pytest.approx(0.001 + transfer, abs=1e-12)
    assert probed[0] == probed[1] == pytest.approx(0.001 + transfer + PROBE_S, abs=1e-12)
    assert logs[1].seconds["wait"] == pytest.approx(0.001 + SEEN_S, abs=1e-12)
    assert logs[1].seconds["comm"] == pytest.approx(transfer + PROBE_S - SEEN_S, abs=1e-12)
    assert logs[0].seconds["comm"] == pytest.approx(transfer + PROBE_S, abs=1e-12)


def test_a_receive_that_finds_its_message_already_moving_takes_it_at_once():
    """The receiver computes first: the sender's request waits for it, the message moves
    once it is posted, and it takes it as it lands (the probe finds the request there)."""
    transfer = LATENCY_S + 4 * MESSAGE / BANDWIDTH_BPS
    ended, logs = _send_once(False)
    assert ended[0] == ended[1] == pytest.approx(0.001 + transfer, abs=1e-12)
    assert logs[1].seconds.get("wait", 0.0) == 0.0


def test_a_collectives_own_receives_do_not_probe():
    """MPI's receives inside a collective are the library's, not the program's probe loop."""
    nodes = [SimpleNamespace(rank=r, size=2, reporter=0) for r in range(2)]
    sim = Simulator(
        nodes,
        [ChargeLog(), ChargeLog()],
        LATENCY_S,
        BANDWIDTH_BPS,
        entry_barrier=True,
        probe_cost=_probe_cost(),
    )
    recv = Recv(source=1, buf=np.zeros(1, np.float32))
    assert sim._probes(0, recv)
    sim._in_collective[0] = True
    assert not sim._probes(0, recv)
    sim._in_collective[0], sim.entry_barrier = False, False  # wait not measured: a plain Recv
    assert not sim._probes(0, recv) and sim._probes(0, Recv(source=1, buf=None))


def test_a_profiles_probe_reaches_a_programs_simulation_and_a_broken_one_is_refused(tmp_path):
    """``[network.in_situ.probe]`` is read (both costs needed) and reaches the simulator of a
    training run on the profile's in-situ costs; not sim.osu's hot loop (no cfg), whose
    receives are OSU's plain ones."""
    import tomli_w

    from sim.cluster import build_cluster
    from sim.cluster_profile import load_profile
    from sim.run import build_parser
    from twinsgd.run.config import parse_config

    oneway = PiecewiseCost.constant(1e-5, 1e9).to_dict()
    later, seen = PiecewiseCost.constant(3e-6, 1e18), PiecewiseCost.constant(8e-6, 1e18)
    probe = {"later": later.to_dict(), "seen": seen.to_dict()}
    document = {
        "cluster": {"name": "t", "calibrated": True},
        "network": {"oneway": oneway, "in_situ": {"oneway": oneway, "probe": probe}},
    }
    path = tmp_path / "p.toml"
    path.write_text(tomli_w.dumps(document))
    profile = load_profile(str(path))
    assert profile.probe.later.seconds(0) == 3e-6 and profile.probe.seen.seconds(0) == 8e-6
    options = build_parser().parse_known_args(["--nodes", "2", "--profile", str(path)])[0]
    cluster = build_cluster(options, profile, parse_config([]), "mlp")
    assert cluster.probe_cost.later.seconds(8) == pytest.approx(3e-6)
    assert cluster.probe_cost.seen.seconds(8) == pytest.approx(8e-6)
    assert build_cluster(options, profile, None, "mlp").probe_cost is None  # sim.osu
    del document["network"]["in_situ"]["probe"]["seen"]
    path.write_text(tomli_w.dumps(document))
    with pytest.raises(ValueError, match="probe"):
        load_profile(str(path))
