"""Token-bucket shaped NICs in the simulator (the emulated cluster's tc tbf), against the
bucket's arithmetic done by hand."""

from types import SimpleNamespace

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.backend import Simulator
from sim.compute import ComputeModel
from sim.fairshare import FluidStar
from sim.shaping import TCP_HEAD_START_BYTES, ShapedPattern, Shaping
from twinsgd.programs.ops import Recv, Send, SendRecv
from twinsgd.run.runlog import Charges

RATE, BURST = 125e6, 125_000.0  # 1 Gbit/s, 125 KB: what real.cluster sets up
EFF, LINE, ALPHA = 0.956, 240e6, 15e-6
PATTERN = ShapedPattern(alpha_s=ALPHA, efficiency=EFF)
SHAPING = Shaping(((RATE, BURST),), LINE, {"oneway": PATTERN, "sendrecv": PATTERN})


def _by_hand(tokens, nbytes):
    """Seconds of nbytes through one bucket holding ``tokens`` (bucket bytes) at the start:
    at the line rate while tokens last (they drain at line - rate), then at the rate."""
    line, rate = LINE, RATE * EFF
    covered = tokens * EFF * line / (line - rate)
    if nbytes <= covered:
        return nbytes / line
    return covered / line + (nbytes - covered) / rate


def _one_after_another(messages, prepare=None):
    """Send ``messages`` ((gap s, source, dest, nbytes), ...) through a `FluidStar` one after
    another, each ``gap`` after the last ended; their seconds, and the star."""
    env = simpy.Environment()
    star = FluidStar(env, SHAPING)
    if prepare:
        prepare(star)
    seconds = []

    def sender():
        for gap, source, dest, nbytes in messages:
            yield env.timeout(gap)
            start = env.now
            yield star.transfer(source, dest, nbytes, "oneway")
            seconds.append(env.now - start)

    env.process(sender())
    env.run()
    return seconds, star


def test_a_full_bucket_lets_its_burst_through_at_line_rate_then_the_rate():
    n = 335_240  # a ring step of the MLP's gradient on 2 nodes
    seconds, _ = _one_after_another([(0.0, 0, 1, n), (0.0, 0, 1, n), (1.0, 0, 1, n)])
    first, back_to_back, after_idle = seconds
    assert first == pytest.approx(_by_hand(BURST, n), rel=1e-9)
    assert back_to_back == pytest.approx(n / (RATE * EFF), rel=1e-9)  # the bucket was empty
    assert after_idle == pytest.approx(first, rel=1e-9)  # a long compute phase filled it again


def test_a_message_within_the_tokens_leaves_the_rest():
    n = 10_000
    seconds, star = _one_after_another([(0.0, 0, 1, n)])
    assert seconds == [pytest.approx(n / LINE, rel=1e-9)]
    # tokens spent n / EFF, refilled at RATE for n / LINE seconds
    assert star._nic(0)[0].tokens == pytest.approx(BURST - n / EFF + RATE * n / LINE, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 5e-3), st.integers(1, 2_000_000)), min_size=1, max_size=20))
def test_tokens_stay_within_the_bucket_and_time_never_beats_the_line(messages):
    seconds, star = _one_after_another([(gap, 0, 1, n) for gap, n in messages])
    for (_, n), s in zip(messages, seconds, strict=True):
        assert s >= n / LINE * (1 - 1e-9)
    for bucket in (*star._nic(0), *star._nic(1)):
        assert 0.0 <= bucket.tokens <= BURST


def test_in_series_the_slower_bucket_decides():
    """A full bucket out, an empty bucket in: the rate of the empty one, and the full one, which
    passes no more than it refills, stays full."""
    n = 200_000

    def empty_receiver(star):
        star._nic(1)[1].tokens = 0.0

    seconds, star = _one_after_another([(0.0, 0, 1, n)], empty_receiver)
    assert seconds == [pytest.approx(n / (RATE * EFF), rel=1e-9)]
    assert star._nic(1)[1].tokens == 0.0 and star._nic(0)[0].tokens == BURST


# ---------------------------------------------------------------------------- in the simulator
class _Log(Charges):
    def charge(self, kind, seconds, bytes_sent=0, bytes_recv=0):
        pass


def _simulate(size, program):
    nodes = [SimpleNamespace(rank=r, size=size, reporter=0) for r in range(size)]
    sim = Simulator(
        nodes,
        [_Log() for _ in nodes],
        1e-6,
        1e9,
        ComputeModel(seconds_per_sample=0.0),
        shaping=SHAPING,
    )
    sim.run([program(r) for r in range(size)])
    return sim.env.now


def test_two_sendrecvs_back_to_back_pay_the_burst_once():
    """The two steps of a 2-node ring allreduce: the first finds full buckets, the second
    finds what refilled while the first one's last bytes travelled (alpha)."""
    n = 335_240

    def program(rank):
        buf = np.zeros(n // 4, np.float32)
        for _ in range(2):
            yield SendRecv(payload=buf, dest=1 - rank, source=1 - rank, buf=np.empty_like(buf))

    expected = _by_hand(BURST, n) + ALPHA + _by_hand(ALPHA * RATE, n) + ALPHA
    assert _simulate(2, program) == pytest.approx(expected, rel=1e-12)


def test_three_pushes_into_one_share_its_bucket():
    """Each sender's bucket is full, the receiver's is spent by the first push: the others go
    at the rate, one after the other (FIFO at its NIC)."""
    n = 670_240

    def program(rank):
        buf = np.zeros(n // 4, np.float32)
        if rank == 0:
            for _ in range(3):
                yield Recv(source=-1, buf=buf)
        else:
            yield Send(dest=0, payload=buf)

    expected = _by_hand(BURST, n) + 2 * n / (RATE * EFF) + ALPHA
    assert _simulate(4, program) == pytest.approx(expected, rel=1e-12)


def test_a_profile_of_an_emulated_cluster_gives_its_buckets_and_patterns(tmp_path):
    """The line rate is the one-way model's within half a burst; each pattern's efficiency the
    median rate of its sizes past twice the burst over the configured rate (a last segment
    that sags does not set it); its alpha a small message's time."""
    import tomllib

    import tomli_w

    from sim.cluster_profile import load_profile
    from twinsgd.calibration.costfit import PiecewiseCost

    def cost(alpha_s, line_Bps, rate_Bps, sag_Bps):  # sag_Bps from 2**23 B to 2**26
        nan = (float("nan"), float("nan"))
        return PiecewiseCost(
            min_bytes=(0.0, 1e5, 2.0**23),
            max_bytes=(1e5, 2.0**23, 2.0**26),
            latency_s=(alpha_s, -2e-4, -2e-4),
            bandwidth_Bps=(line_Bps, rate_Bps, sag_Bps),
            latency_ci_s=(nan, nan, nan),
            bandwidth_ci_Bps=(nan, nan, nan),
            max_rel_residual=(0.0, 0.0, 0.0),
        ).to_dict()

    path = tmp_path / "p.toml"
    path.write_text(
        tomli_w.dumps(
            {
                "cluster": {"name": "emulated", "one_machine": True, "cores": 2},
                "network": {
                    "topology": "star",
                    "latency": "12us",
                    "bandwidth": "119MB/s",
                    "oneway": cost(12e-6, 240e6, 119.5e6, 119.5e6),
                    "sendrecv": cost(18e-6, 120e6, 116e6, 90e6),
                    "shaper": {"rates_Bps": [RATE, RATE / 10], "bursts_bytes": [BURST, 12500]},
                },
            }
        )
    )
    shaping = load_profile(str(path)).shaping()
    assert shaping.hosts == ((RATE, BURST), (RATE / 10, 12500.0))
    oneway, sendrecv = shaping.patterns["oneway"], shaping.patterns["sendrecv"]
    assert shaping.line_Bps == 240e6  # the one-way model's, for every pattern
    assert (oneway.alpha_s, sendrecv.alpha_s) == (12e-6, 18e-6)
    # the median of the two configured rates (upper median of an even count): RATE; of the
    # 9 sizes past twice the burst (2**18 .. 2**26) 5 keep the Sendrecv's 116 MB/s, 4 sag
    assert oneway.efficiency == pytest.approx(119.5e6 / RATE)
    assert sendrecv.efficiency == pytest.approx(116e6 / RATE)
    assert shaping.head_start_bytes == TCP_HEAD_START_BYTES  # none given: TCP's, measured

    document = tomllib.loads(path.read_text())
    document["network"]["shaper"]["head_start_bytes"] = 0
    path.write_text(tomli_w.dumps(document))
    assert load_profile(str(path)).shaping().head_start_bytes == 0.0  # max-min fair
    document["network"]["shaper"]["head_start_bytes"] = -1.0
    path.write_text(tomli_w.dumps(document))
    with pytest.raises(ValueError, match=r"\[network.shaper\] head_start_bytes must be"):
        load_profile(str(path))


def test_a_message_within_a_burst_moves_as_the_one_way_measurement_moved_its_size():
    """The one-way model below: 4 GB/s up to 8 KiB, 240 MB/s (the line) above. Through a full
    bucket a 4 KiB message takes what that model adds to an empty message's time (the line
    would take 17 us); one larger than the burst keeps the line; an empty bucket still holds
    a small one to the shaped rate."""
    from twinsgd.calibration.costfit import PiecewiseCost

    nan = (float("nan"), float("nan"))
    oneway = PiecewiseCost(
        min_bytes=(0.0, 8192.0),
        max_bytes=(8192.0, 2.0**24),
        latency_s=(ALPHA, ALPHA + 8192 / 4e9 - 8192 / LINE),  # continuous at 8 KiB
        bandwidth_Bps=(4e9, LINE),
        latency_ci_s=(nan, nan),
        bandwidth_ci_Bps=(nan, nan),
        max_rel_residual=(0.0, 0.0),
    )
    shaping = Shaping(((RATE, BURST),), LINE, {"oneway": PATTERN}, burst_cost=oneway)
    assert shaping.payload_Bps(4096) == pytest.approx(4e9, rel=1e-9)
    assert shaping.payload_Bps(65536) == pytest.approx(
        65536 / (oneway.seconds(65536.0) - ALPHA), rel=1e-9
    )
    assert shaping.payload_Bps(200_000) == LINE  # beyond the burst: the line

    def through(nbytes, empty=False):
        env = simpy.Environment()
        star = FluidStar(env, shaping)
        if empty:
            for bucket in star._nic(0) + star._nic(1):
                bucket.tokens = 0.0
        star.transfer(0, 1, nbytes, "oneway")
        env.run()  # (until its end: nothing else is scheduled)
        return env.now

    assert through(4096) == pytest.approx(4096 / 4e9, rel=1e-9)
    assert through(200_000) == pytest.approx(_by_hand(BURST, 200_000), rel=1e-9)
    assert through(4096, empty=True) == pytest.approx(4096 / (RATE * EFF), rel=1e-6)


_LATE_CLOCK = """
import simpy
from sim.fairshare import FluidStar
from sim.shaping import ShapedPattern, Shaping
from twinsgd.calibration.costfit import PiecewiseCost

fast = PiecewiseCost.constant(15e-6, 4e9)  # within a burst: 4 GB/s
plain = ShapedPattern(alpha_s=15e-6, efficiency=0.956)
shaping = Shaping(((125e6, 125000.0),), 240e6, {"oneway": plain}, burst_cost=fast)
for start in (0.0, 1000.0):
    env = simpy.Environment(initial_time=start)
    star, took = FluidStar(env, shaping), []

    def sender():
        for n in [8, 4096, 65536, 100000, 670240] * 20:
            t0 = env.now
            yield star.transfer(0, 1, n, "oneway")
            took.append(env.now - t0)

    env.process(sender())
    env.run()
    print(start, sum(took))
"""


def test_a_late_clock_does_not_stand_still_on_a_bucket_draining_at_gigabytes():
    """A message within a burst drains a bucket at its own rate (GB/s): its last crumbs of
    tokens go in less time than a clock at 1,000 s can add (a resumed run's), which once stood
    the simulation still. The same messages take the same time at 0 s and at 1,000 s."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _LATE_CLOCK], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    (_, early), (_, late) = (line.split() for line in done.stdout.splitlines())
    assert float(late) == pytest.approx(float(early), rel=1e-6)


def test_messages_in_flight_share_a_nic_and_finish_together():
    """Two eager sends out of one NIC at once: side by side, each at half the rate, both done
    when the bytes of both have passed (FIFO would finish one at about half that time and the
    other at the same end)."""
    n = 1_000_000
    arrivals = {}

    def program(rank):
        buf = np.zeros(n // 4, np.float32)
        if rank == 0:
            yield Send(dest=1, payload=buf, buffered=True)
            yield Send(dest=2, payload=buf, buffered=True)
        else:
            yield Recv(source=0, buf=buf)
            arrivals[rank] = True

    nodes = [SimpleNamespace(rank=r, size=3, reporter=0) for r in range(3)]
    sim = Simulator(
        nodes,
        [_Log() for _ in nodes],
        1e-6,
        1e9,
        ComputeModel(seconds_per_sample=0.0),
        shaping=SHAPING,
        eager_bytes=2**20,
    )  # eager sends: both messages leave at once
    times = {}
    original = sim.network._deliver

    def deliver(arrival):
        _, _, dest, _ = arrival.value  # (its pair's order, its place in it, dest, message)
        times[dest] = sim.env.now
        original(arrival)

    sim.network._deliver = deliver
    sim.run([program(r) for r in range(3)])
    assert set(times) == {1, 2}
    both = 2 * n / EFF  # bucket bytes through the sender's bucket out
    line, rate = LINE / EFF, RATE
    covered = BURST * line / (line - rate)  # bucket bytes at line rate before the tokens run out
    expected = covered / line + (both - covered) / rate + ALPHA
    assert times[1] == pytest.approx(expected, rel=1e-9)
    assert times[2] == pytest.approx(expected, rel=1e-9)


# A fan-out from one NIC, head start on: 100 B/s buckets (no burst to speak of), 60 B ahead.
FAN = Shaping(((100.0, 1e-9),), 100.0, {"oneway": ShapedPattern(0.0, 1.0)}, head_start_bytes=60.0)


def _fan_out(flows, shaping=FAN):
    """Start ``flows`` ((source, dest, bytes), ...) at time 0 in order; for each, (the time
    it began to move, the time it ended)."""
    env = simpy.Environment()
    star, times = FluidStar(env, shaping), {}

    def one(source, dest, nbytes):
        began = yield star.transfer(source, dest, nbytes, "oneway")
        times[source, dest] = (began, env.now)

    for flow in flows:
        env.process(one(*flow))
    env.run()
    return times


def test_a_flow_on_an_idle_nic_goes_first_for_its_head_start_then_all_share():
    """Three 100 B messages out of one NIC at once (a server's replies): the first moves alone
    until its 60 B head start has passed (0.6 s), then the three share 100 B/s (the first's 40
    B left take 1.2 s more), then the two left share it (their 60 B each, 1.2 s): by hand."""
    times = _fan_out([(0, 1, 100.0), (0, 2, 100.0), (0, 3, 100.0)])
    assert times[0, 1] == pytest.approx((0.0, 1.8), rel=1e-9)
    assert times[0, 2] == pytest.approx((0.6, 3.0), rel=1e-9)
    assert times[0, 3] == pytest.approx((0.6, 3.0), rel=1e-9)
    fair = _fan_out([(0, 1, 100.0), (0, 2, 100.0)], Shaping(FAN.hosts, 100.0, FAN.patterns))
    assert fair == {(0, 1): (0.0, 2.0), (0, 2): (0.0, 2.0)}  # head start 0: max-min fair


def test_flows_behind_a_head_take_what_it_leaves_of_their_nic():
    """Work-conserving: 0 -> 1 and 2 -> 1 each go first out of their own NIC but share 1's way
    in at 50 B/s; 0 -> 3, behind 0's head, moves at once with the 50 B/s it leaves (a gossip
    node's two exchanges, each neighbour's NIC busy with its own head)."""
    times = _fan_out([(0, 1, 100.0), (2, 1, 100.0), (0, 3, 100.0)])
    assert times[0, 3][0] == 0.0  # it began at once, not after the 60 B
    assert times[0, 1] == pytest.approx((0.0, 2.0), rel=1e-9)
    assert times[0, 3] == pytest.approx((0.0, 2.0), rel=1e-9)


def test_a_receiver_waits_for_a_message_behind_a_head_until_it_begins_to_move():
    """Through the simulator: rank 0's eager sends of 100 B to 1 and 2 at once; rank 2's
    receive waits until its message begins to move behind the first's head start (0.6 s), then
    communicates until it lands (2.0 s, the bytes of both through 100 B/s)."""
    charged = {1: {}, 2: {}}

    class Log(_Log):
        def __init__(self, rank):
            self.rank = rank

        def charge_collective(self, wait, comm, bytes_sent, bytes_recv):
            if self.rank in charged and bytes_recv:
                charged[self.rank].update(wait=wait, comm=comm)

    def program(rank):
        buf = np.zeros(25, np.float32)  # 100 B
        if rank == 0:
            yield Send(dest=1, payload=buf, buffered=True)
            yield Send(dest=2, payload=buf, buffered=True)
        else:
            yield Recv(source=0, buf=buf)

    nodes = [SimpleNamespace(rank=r, size=3, reporter=0) for r in range(3)]
    sim = Simulator(
        nodes, [Log(r) for r in range(3)], 0.0, 1e9, ComputeModel(0.0), shaping=FAN, eager_bytes=200
    )
    sim.run([program(r) for r in range(3)])
    assert charged[2]["wait"] == pytest.approx(0.6, rel=1e-9)
    assert charged[2]["wait"] + charged[2]["comm"] == pytest.approx(2.0, rel=1e-9)
    assert charged[1]["wait"] == 0.0
    assert charged[1]["wait"] + charged[1]["comm"] == pytest.approx(1.4, rel=1e-9)
