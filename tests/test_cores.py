"""More ranks than cores: ranks take turns on their host's cores (`sim.cores`), hold a core to
work, give it up to wait for a message, and copy a rendezvous message through shared memory only
while sender and receiver are both on a core."""

from types import SimpleNamespace

import numpy as np
import pytest
import simpy
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sim.backend import Simulator
from sim.compute import ComputeModel
from sim.cores import Fairness, HostCores, eevdf_slice, shared_cores
from tests.programs import ChargeLog
from twinsgd.programs.ops import Compute, Exchange, Recv, Send, SendRecv


@settings(max_examples=60, deadline=None)
@given(
    cores=st.integers(1, 3),
    plans=st.lists(
        st.lists(st.tuples(st.floats(0.0, 0.01), st.floats(0.0, 0.01)), min_size=1, max_size=4),
        min_size=1,
        max_size=6,
    ),
    slice_s=st.sampled_from([0.001, 0.004]),
)
def test_turns_share_the_cores_and_lose_no_work(cores, plans, slice_s):
    """Each rank alternates work and a wait off its core: at no time do more ranks hold a
    core than there are cores, each rank's work takes at least its seconds, and the cores
    cannot have done the work faster than all of them busy."""
    env = simpy.Environment()
    host = HostCores(env, cores, slice_s)
    worked, peak = {}, [0]

    def rank(r, plan):
        yield from host.acquire(r)
        total = 0.0
        for work, wait in plan:
            t0 = env.now
            yield from host.run(r, work)
            assert env.now - t0 >= work - 1e-12
            total += work
            peak[0] = max(peak[0], len(host.turn_ends))
            host.release(r)
            yield env.timeout(wait)
            yield from host.acquire(r)
            peak[0] = max(peak[0], len(host.turn_ends))
        host.release(r)
        worked[r] = total

    for r, plan in enumerate(plans):
        env.process(rank(r, plan))
    env.run()
    assert len(worked) == len(plans) and peak[0] <= cores
    assert host.free == cores and not host.ready and not host.turn_ends
    assert env.now >= sum(worked.values()) / cores - 1e-12


@pytest.mark.parametrize("pair_leaves, end_s", [(True, 0.011), (False, 0.018)])
def test_two_ranks_wait_until_the_computing_ranks_turns_end(pair_leaves, end_s):
    """Two ranks compute 10 ms on 2 cores, their turns ending on the first 4 ms tick after half
    an EEVDF slice (0.75 ms); two more ranks ask for a core at 1 ms (placed at the mean
    runtime, 1 ms) and get them when both turns have ended (4 ms). The computing ranks are
    then 3 ms ahead of the mean of 4 ranks, (4 + 4 + 1 + 1) / 4: not eligible.

    The two end after their 1 ms (5 ms): two ranks are left for 2 cores, and they end their
    last 6 ms at 11 ms. Or the two stay, waiting (polling): they take the free cores until the
    others are eligible (7 ms), the computing ranks run to the 12 ms tick, are 2.5 ms ahead
    again and wait out 5 ms (the pollers on both cores) for their last 1 ms: 18 ms, the cores
    shared fairly by 4 runnable ranks."""
    env = simpy.Environment()
    host = HostCores(env, 2, 0.004)
    got = []

    def computing(r):
        yield from host.acquire(r)
        yield from host.run(r, 0.010)
        host.release(r)

    def late(r):
        yield env.timeout(0.001)
        yield from host.acquire(r)
        got.append(env.now)
        yield from host.run(r, 0.001)
        host.release(r)
        if pair_leaves:
            host.leave(r)

    for r in (0, 1):
        env.process(computing(r))
    for r in (7, 8):
        env.process(late(r))
    env.run()
    assert got == [pytest.approx(0.004)] * 2
    assert env.now == pytest.approx(end_s)


def test_a_rendezvous_copy_moves_on_its_senders_core():
    """Three ranks: rank 2 computes 10 ms; rank 0 sends 1 MB to rank 1, which waits in its
    receive. The copy moves while the sender is on a core and the receiver is eligible (MPICH's
    copy alternates between the two; one core does it): on 2 or 3 cores at once, in the link's
    time; on 1 core, once rank 2's turn ends on the 4 ms tick."""
    hold_s = 1e6 / 1e9

    def program(rank):
        if rank == 0:
            yield Send(dest=1, payload=np.zeros(250_000, np.float32))
        elif rank == 1:
            yield Recv(source=0, buf=np.zeros(250_000, np.float32))
        else:
            yield Compute(lambda: None, samples=1)

    def received(cores):
        nodes = [SimpleNamespace(rank=r, size=3, reporter=0) for r in range(3)]
        logs = [ChargeLog() for _ in range(3)]
        sim = Simulator(
            nodes,
            logs,
            0.0,
            1e9,
            ComputeModel(seconds_per_sample=0.010),
            eager_bytes=4096,
            core_groups=((range(3), cores),),
            time_slice_s=0.004,
        )
        sim.run([program(r) for r in range(3)])
        return logs[1].seconds.get("comm", 0.0) + logs[1].seconds.get("wait", 0.0)

    assert received(1) == pytest.approx(0.004 + hold_s)
    assert received(2) == pytest.approx(hold_s)
    assert received(3) == pytest.approx(hold_s)


def test_two_rendezvous_sends_to_one_receive_from_anyone_take_turns():
    """A server takes two pushes from any source on 3 ranks of 2 cores: both senders see its
    receive posted, one copy takes it, and the other waits for the next; every core comes
    back."""

    def program(rank):
        buf = np.zeros(250_000, np.float32)
        if rank == 0:
            for _ in range(2):
                yield Recv(source=-1, buf=buf)
        else:
            yield Send(dest=0, payload=buf)

    nodes = [SimpleNamespace(rank=r, size=3, reporter=0) for r in range(3)]
    sim = Simulator(
        nodes,
        [ChargeLog() for _ in range(3)],
        0.0,
        1e9,
        ComputeModel(seconds_per_sample=0.0),
        eager_bytes=4096,
        core_groups=((range(3), 2),),
    )
    sim.run([program(r) for r in range(3)])
    host = sim.cores[0]
    assert host.free == 2 and not host.turn_ends and not host.ready
    assert sim.env.now == pytest.approx(2 * 1e6 / 1e9)  # the two copies one after the other


@pytest.mark.parametrize(
    ("cores", "floats", "end_s"),
    [(1, 250_000, 0.008), (2, 250_000, 0.004), (4, 250_000, 0.002), (2, 500, 4e-6)],
)
def test_an_exchanges_copies_take_turns_on_their_receivers_cores(cores, floats, end_s):
    """Gossip's exchange on a ring of 4 ranks, 1 MB to each neighbour, 1 GB/s, no latency:
    every receiver copies its two messages on its own core, one after the other, so the eight
    copies take 8 ms on 1 core and 4 on 2; with a core each (no sharing) they move at once, and
    a host's link carries its two (2 ms). Messages within the eager limit move on their own.
    Every rank gets its neighbours' bytes."""
    size = 4

    def program(rank):
        peers = [(rank - 1) % size, (rank + 1) % size]
        bufs = {p: np.zeros(floats, np.float32) for p in peers}
        got = yield Exchange({p: np.full(floats, rank, np.float32) for p in peers}, bufs)
        assert all((got[p] == p).all() for p in peers)
        received[rank] = sorted(got)

    received = {}
    sim = _on_shared_cores(size, cores, ComputeModel(seconds_per_sample=0.0))
    sim.run([program(r) for r in range(size)])
    assert sim.env.now == pytest.approx(end_s)
    assert received == {r: sorted({(r - 1) % size, (r + 1) % size}) for r in range(size)}
    for host in {id(h): h for h in sim.cores.values()}.values():
        assert host.free == host.cores and not host.turn_ends


@pytest.mark.parametrize(("cores", "end_s"), [(1, 0.005), (2, 0.0025), (4, 0.00125)])
def test_a_rings_sendrecv_step_copies_on_its_receivers_core(cores, end_s):
    """A ring's step on 4 ranks, 1 MB to the next from the previous, at 1 GB/s and 0.25 ms a
    message: each receiver copies its message on its own core, the whole 1.25 ms of it (its
    fixed cost too: through shared memory nothing is in flight), so the four copies take 5 ms
    on 1 core, 2.5 on 2, and 1.25 with a core each. Every rank gets its left neighbour's
    bytes."""
    size = 4

    def program(rank):
        buf = np.zeros(250_000, np.float32)
        right, left = (rank + 1) % size, (rank - 1) % size
        yield SendRecv(right, np.full(250_000, rank, np.float32), left, buf)
        assert (buf == left).all()
        done.append(rank)

    done = []
    sim = _on_shared_cores(size, cores, ComputeModel(seconds_per_sample=0.0), latency_s=0.25e-3)
    sim.run([program(r) for r in range(size)])
    assert sim.env.now == pytest.approx(end_s)
    assert sorted(done) == list(range(size))


def test_a_rank_on_a_core_that_asks_again_keeps_its_own():
    """A rank already on a core (it got another sender's message first) asks for one again:
    it keeps its own, takes no second, and everything comes back on release (a second core for
    that rank once hung an asynchronous server of 4 workers on 2 cores)."""
    env = simpy.Environment()
    host = HostCores(env, 2, 0.004)

    def rank():
        yield from host.acquire(0)
        yield from host.acquire(0)
        assert host.free == 1 and set(host.turn_ends) == {0}
        yield env.timeout(0.001)
        host.release(0)

    env.process(rank())
    env.run()
    assert host.free == 2 and not host.turn_ends and env.now == pytest.approx(0.001)


def test_a_rank_back_from_a_wait_takes_a_core_on_the_next_tick():
    """Two cores, ranks 0 and 1 computing 6 ms from 0, rank 2 back from a wait at 1 ms for 0.5
    ms of work: it waits for the 4 ms tick, takes rank 0's core and ends at 4.5 ms; rank 0,
    1.5 ms ahead of the mean then, takes the other core at once (no rank polls: nobody else
    would run there) and ends at 6 ms, and rank 1 goes on once rank 2 has ended (4.5 ms)."""

    def ends():
        env = simpy.Environment()
        host, done = HostCores(env, 2, 0.004), {}

        def rank(r, start, work):
            if start:
                yield env.timeout(start)
            yield from host.acquire(r)
            yield from host.run(r, work)
            host.release(r)
            host.leave(r)
            done[r] = round(env.now, 9)

        for r, start, work in ((0, 0.0, 0.006), (1, 0.0, 0.006), (2, 0.001, 0.0005)):
            env.process(rank(r, start, work))
        env.run()
        assert host.free == 2 and not host.turn_ends and not host.ready
        return done

    assert ends() == {2: 0.0045, 0: 0.006, 1: 0.0065}


def test_pinned_ranks_share_their_own_core_only():
    """Over TCP each core is a run queue of its own for a block of the host's ranks: 4 ranks
    on 2 cores, 0 and 1 on one and 2 and 3 on the other (5 ranks: 2 and 3). Ranks 0 and 1
    computing 2 ms each take turns on their core (the first ends at 2 ms, the second at 4),
    while rank 2 computes 2 ms on the other core, where rank 3 runs nothing: it ends at 2 ms."""
    env = simpy.Environment()
    by_rank = shared_cores(env, [(range(4), 2)], 0.004, pinned=True)
    assert by_rank[0] is by_rank[1] and by_rank[2] is by_rank[3] and by_rank[0] is not by_rank[2]
    assert by_rank[0].cores == 1 and by_rank[0].eevdf_slice_s == eevdf_slice(2)
    five = shared_cores(env, [(range(5), 2)], 0.004, pinned=True)
    assert five[0] is five[1] is not five[2] and five[2] is five[3] is five[4]
    done = {}

    def rank(r):
        host = by_rank[r]
        yield from host.acquire(r)
        yield from host.run(r, 0.002)
        host.release(r)
        done[r] = round(env.now, 9)

    for r in (0, 1, 2):
        env.process(rank(r))
    env.run()
    assert done == {0: 0.002, 2: 0.002, 1: 0.004}


def test_over_tcp_the_wait_for_the_core_after_a_call_is_the_calls_comm():
    """Over TCP a rank holds no core in a call and needs its own back to return: ranks 0 and 1
    share core 0; rank 0 computes 10 ms; rank 1 gets the core when rank 0's turn ends on the
    4 ms tick and enters its receive, polling; rank 0, 4 ms ahead, is eligible again at 8 ms
    (rank 1 polled meanwhile) and takes the core to the 12 ms tick. The message (rank 2, on
    core 1, after 9 ms of its own work) lands at 9 ms while rank 0 holds the core, so rank 1's
    call returns at 12 ms: 5 ms waiting for its peer, then 3 ms comm, as the real clock has
    them inside the call (they were charged to nothing once, and an emulated cluster's
    communication came out short)."""
    back = {}

    def program(rank, sim):
        if rank == 0:
            yield Compute(lambda: None, samples=10)  # 10 ms on core 0
        elif rank == 1:
            yield Recv(source=2, buf=np.zeros(8, np.float32))
            back[1] = sim.env.now
        elif rank == 2:
            yield Compute(lambda: None, samples=9)
            yield Send(dest=1, payload=np.zeros(8, np.float32))

    nodes = [SimpleNamespace(rank=r, size=4, reporter=0) for r in range(4)]
    logs = [ChargeLog() for _ in range(4)]
    sim = Simulator(
        nodes,
        logs,
        1e-5,
        1e9,
        ComputeModel(seconds_per_sample=0.001),
        eager_bytes=4096,
        core_groups=((range(4), 2),),
        over_tcp=True,
        time_slice_s=0.004,
    )
    sim.run([program(r, sim) for r in range(4)])
    assert back[1] == pytest.approx(0.012)
    assert logs[1].seconds["wait"] == pytest.approx(0.005)  # 4 ms to 9: its peer computed
    assert logs[1].seconds["comm"] == pytest.approx(0.003)  # 9 ms to 12: its core was taken


def test_ranks_take_turns_on_shared_cores_and_on_an_emulated_clusters_machine(tmp_path):
    """Turns for a one-machine profile's shared memory, and for hosts of more ranks than cores;
    for an emulated cluster's profile too (MPI over TCP: `over_tcp`), whose hosts of several
    ranks are all on its one machine; none for the closed forms, nor within the cores."""
    import tomli_w

    from sim.cluster import core_groups, over_tcp
    from sim.cluster_profile import load_profile
    from sim.run import build_parser

    def groups(argv, shaper=False):
        document = {"cluster": {"name": "t", "cores": 2, "one_machine": True}}
        if shaper:
            document["network"] = {"shaper": {"rates_Bps": [1e8], "bursts_bytes": [1e5]}}
        (tmp_path / "p.toml").write_text(tomli_w.dumps(document))
        options = build_parser().parse_known_args([*argv, "--profile", str(tmp_path / "p.toml")])
        return core_groups(options[0], load_profile(str(tmp_path / "p.toml")), 4, per_host)

    per_host = 1
    assert groups(["--nodes", "4"]) == ((range(4), 2),)
    assert groups(["--nodes", "4", "--collectives", "closed-form"]) == ()
    assert groups(["--nodes", "4"], shaper=True) == ((range(4), 2),)
    assert over_tcp(load_profile(str(tmp_path / "p.toml")))  # the last: the shaper's
    assert not over_tcp(None)
    per_host = 2  # 2 emulated hosts of 2 ranks: one machine's 2 cores; real hosts: 2 each
    assert groups(["--nodes", "4"], shaper=True) == ((range(4), 2),)
    assert groups(["--nodes", "4"]) == ()
    options = build_parser().parse_known_args(["--nodes", "6", "--cores-per-host", "2"])[0]
    assert core_groups(options, None, 6, 3) == ((range(0, 3), 2), (range(3, 6), 2))
    assert core_groups(options, None, 6, 2) == ()  # as many cores as ranks a host


@settings(max_examples=40, deadline=None)
@given(
    workers=st.integers(2, 5),
    cores=st.integers(1, 3),
    straggle=st.floats(0.0, 0.9),
    seed=st.integers(0, 1000),
    rounds=st.integers(1, 4),
)
def test_a_server_and_workers_on_shared_cores_always_finish(workers, cores, straggle, seed, rounds):
    """A synchronous server (pushes from any source, rendezvous replies) and workers whose
    steps straggle at random, on fewer cores than ranks: every run ends, every rank is off its
    core at the end and the cores all come back, whatever the order the pushes arrive in."""
    size = workers + 1

    def program(rank):
        buf = np.zeros(50_000, np.float32)
        for _ in range(rounds):
            if rank == 0:
                for _ in range(workers):
                    yield Recv(source=-1, buf=buf)
                for worker in range(1, size):
                    yield Send(dest=worker, payload=buf)
            else:
                yield Compute(lambda: None, samples=1)
                yield Send(dest=0, payload=buf)
                yield Recv(source=0, buf=buf)

    _run_to_the_end_on_shared_cores(program, size, cores, straggle, seed)


def test_a_rank_woken_while_the_cores_are_busy_waits_in_line_for_one():
    """A rank off its core in a receive wakes when its message comes (1 ms), then waits its
    turn for a core while both are busy computing (the 4 ms tick)."""
    seen = {}

    def program(rank):
        buf = np.zeros(2, np.float32)
        if rank == 0:
            yield Recv(source=2, buf=buf)
            yield Compute(lambda: None, samples=1)
        elif rank == 1:
            yield Compute(lambda: None, samples=10)
        else:
            yield Compute(lambda: None, samples=1)
            yield Send(dest=0, payload=buf)  # eager: rank 0 wakes with both cores busy
            yield Compute(lambda: None, samples=10)

    sim = _on_shared_cores(3, 2, ComputeModel(seconds_per_sample=0.001), latency_s=1e-6)

    def probe():
        yield sim.env.timeout(0.002)  # rank 0's message came at 1 ms; both cores are busy
        host = sim.cores[0]
        seen.update(on_core=host.holds(0), waiting=bool(host.ready))

    sim.env.process(probe())
    sim.run([program(r) for r in range(3)])
    assert seen == {"on_core": False, "waiting": True}


@settings(max_examples=60, deadline=None)
@given(
    workers=st.integers(2, 5),
    cores=st.integers(2, 3),
    straggle=st.floats(0.0, 0.9),
    seed=st.integers(0, 1000),
    update_s=st.floats(0.0, 0.006),
    nbytes=st.sampled_from([2_000, 200_000]),
)
@example(  # ran forever: late in the run a rank's wait to be eligible (1.8e-12 s at 16,580 s)
    workers=5, cores=2, straggle=0.12568600656349802, seed=805, update_s=0.0, nbytes=200_000
)  # was below the clock's resolution, and the wait came back unchanged
def test_an_asynchronous_server_on_shared_cores_finishes_with_every_core_back(
    workers, cores, straggle, seed, update_s, nbytes
):
    """An asynchronous server (each push from any source, an update on its core, a rendezvous
    reply to that worker) and straggling workers on fewer cores than ranks, with eager and
    rendezvous message sizes: every run ends and every core comes back."""
    size, rounds = workers + 1, 6

    def program(rank):
        buf = np.zeros(nbytes // 4, np.float32)
        for _ in range(rounds):
            if rank == 0:
                for _ in range(workers):
                    got = yield Recv(source=-1, buf=buf)
                    yield Compute(lambda: None, samples=update_s / 0.003)
                    yield Send(dest=int(got[0]), payload=buf)
            else:
                yield Compute(lambda: None, samples=1)
                buf[0] = rank
                yield Send(dest=0, payload=buf)
                yield Recv(source=0, buf=buf)

    _run_to_the_end_on_shared_cores(program, size, cores, straggle, seed)


def _on_shared_cores(size, cores, compute, latency_s=0.0):
    """A simulator of ``size`` bare nodes sharing ``cores`` cores, in turns of 4 ms, on a star
    of 1 GB/s; 4 KiB eager limit."""
    nodes = [SimpleNamespace(rank=r, size=size, reporter=0) for r in range(size)]
    return Simulator(
        nodes,
        [ChargeLog() for _ in range(size)],
        latency_s,
        1e9,
        compute,
        eager_bytes=4096,
        core_groups=((range(size), cores),),
        time_slice_s=0.004,
    )


def _run_to_the_end_on_shared_cores(program, size, cores, straggle, seed):
    """Run ``program(rank)`` on every rank, with steps of 3 ms that straggle 3x at random;
    every core must come back at the end."""
    compute = ComputeModel(
        seconds_per_sample=0.003, straggle_probability=straggle, slowdown=3.0, seed=seed
    )
    sim = _on_shared_cores(size, cores, compute)
    sim.run([program(r) for r in range(size)])
    host = sim.cores[0]
    assert host.free == cores and not host.turn_ends and not host.ready


def test_a_rank_told_its_peer_failed_in_a_call_goes_on_on_a_core_over_tcp():
    """Emulated hosts hold no core in a call: rank 0, waiting for rank 1 when rank 1 is killed,
    is told (`PeerFailed`), gets a core back and computes on (it raised KeyError before)."""
    from twinsgd.programs.ops import PeerFailed
    from twinsgd.run.faults import parse_fail_spec

    nodes = [SimpleNamespace(rank=r, size=3, reporter=0) for r in range(3)]

    def program(rank):
        if rank == 0:
            told = False
            try:
                yield Recv(source=1, tag=0)
            except PeerFailed:
                told = True
            yield Compute(lambda: None, (), samples=1)
            return "told, went on" if told else "not told"
        yield Compute(lambda: None, (), samples=1)
        if rank == 1:
            yield Recv(source=2, tag=0)  # never sent: rank 1 is killed while it waits
        return "done"

    sim = Simulator(
        nodes,
        [ChargeLog() for _ in nodes],
        1e-6,
        1e9,
        ComputeModel(seconds_per_sample=1e-3),
        core_groups=((range(3), 2),),
        over_tcp=True,
    )
    assert sim.run([program(r) for r in range(3)], parse_fail_spec("1@0.5ms")) == [
        "told, went on",
        None,
        "done",
    ]
    for host in {id(host): host for host in sim.cores.values()}.values():  # a queue a core
        assert host.free == 1 and not host.turn_ends and not host.ready


def test_a_rank_told_its_peer_failed_in_an_exchange_on_cores_leaves_nothing_waiting():
    """Through shared memory past the cores: rank 0 waits in an exchange of 1 MB with rank 1,
    which is killed before it gets there; rank 0 is told (`PeerFailed`), leaves no receive
    or wait for an announcement behind to take a later message, and computes on."""
    from twinsgd.programs.ops import PeerFailed
    from twinsgd.run.faults import parse_fail_spec

    big = np.zeros(250_000, np.float32)

    def program(rank):
        if rank == 0:
            try:
                yield Exchange({1: big}, {1: np.zeros_like(big)})
            except PeerFailed:
                yield Compute(lambda: None, (), samples=1)
                return "told, went on"
            return "not told"
        yield Compute(lambda: None, (), samples=2)  # rank 1 is killed meanwhile
        return "done"

    sim = _on_shared_cores(3, 2, ComputeModel(seconds_per_sample=1e-3))
    assert sim.run([program(r) for r in range(3)], parse_fail_spec("1@0.5ms")) == [
        "told, went on",
        None,
        "done",
    ]
    assert not sim.network.mailbox[0].takes
    assert all(not store.get_queue for store in sim._announced.values())
    host = sim.cores[0]
    assert host.free == 2 and not host.turn_ends and not host.ready


def test_a_refill_as_long_as_a_turn_is_paid_once_a_run_and_the_work_ends():
    """One core, two ranks of 6 ms of work each, turns of 1 ms (the tick), a refill of 2 ms:
    ranks 0 and 1 alternate, each back on a core the other used, so from 2 and 3 ms their 5 ms
    left, cold, take 5 * (1 + 2/6) = 6.67 ms in turns of 1 ms: rank 0 ends at 14.67 ms, rank 1
    at 15.33. Paid again each cold turn, a refill as long as a turn left no time for the work,
    and the simulation never ended. Rank 0's later run, back after rank 1 ran, pays the whole
    refill at its start: its 2 ms take 4 ms of the core; rank 1, released and still on the
    host, polls beside it and takes its share in 1 ms turns, so the run ends after 7 ms, and
    the warm run after it (2 ms of the core) after 3.33 ms."""
    env = simpy.Environment()
    host = HostCores(env, 1, 0.001, switch_s=0.002)
    assert _two_ranks_then_one_again(env, host) == {
        0: 0.014666667,
        1: 0.015333333,
        "cold": 0.007,
        "warm": 0.003333333,
    }


def _two_ranks_then_one_again(env, host):
    """Ranks 0 and 1 run 6 ms each from 0 on ``host``; rank 0 comes back 10 ms after its end
    (rank 1 ran on the core since: cold) for 2 ms, then at once for 2 ms more. When each
    ended, and how long each of the two later runs took (``cold``, ``warm``)."""
    done = {}

    def rank(r):
        yield from host.acquire(r)
        yield from host.run(r, 0.006)
        done[r] = round(env.now, 9)
        host.release(r)
        if r == 1:
            return
        yield env.timeout(0.010)
        for again in ("cold", "warm"):
            yield from host.acquire(r)
            t0 = env.now
            yield from host.run(r, 0.002)
            done[again] = round(env.now - t0, 9)
            host.release(r)

    for r in range(2):
        env.process(rank(r))
    env.run(until=1.0)
    return done


def test_a_switch_costs_the_compute_after_the_wait_in_the_simulator():
    """Two ranks on one core ping-pong a step of 1 ms each: each step after a rank's first
    comes after the other rank's, so it costs the switch more, charged as compute."""
    steps, switch_s = 4, 2e-4

    def program(node):
        for _ in range(steps):
            if node.rank == 1:
                yield Recv(source=0, buf=np.zeros(1))
            yield Compute(lambda: None, (), samples=1)
            yield Send(dest=1 - node.rank, payload=np.zeros(1))
            if node.rank == 0:
                yield Recv(source=1, buf=np.zeros(1))

    def compute(switch):
        nodes = [SimpleNamespace(rank=r, size=2) for r in range(2)]
        logs = [ChargeLog() for _ in nodes]
        sim = Simulator(
            nodes,
            logs,
            1e-6,
            1e9,
            ComputeModel(seconds_per_sample=1e-3),
            core_groups=[((0, 1), 1)],
            time_slice_s=1.0,  # no turn ends within these steps
            switch_s=switch,
        )
        sim.run([program(node) for node in nodes])
        return [log.seconds["compute"] for log in logs]

    plain, switched = compute(0.0), compute(switch_s)
    assert plain == pytest.approx([steps * 1e-3] * 2)
    # every compute but each rank's first comes back to the core after the other's
    assert switched == pytest.approx([steps * 1e-3 + (steps - 1) * switch_s] * 2)


def test_a_rank_that_computes_without_pause_gets_its_share_beside_polling_ranks():
    """One core, rank 0 computing 12 ms, ranks 1 and 2 waiting for messages (polling: in Linux
    they stay runnable, so EEVDF gives each a third). Rank 0 runs to the first 4 ms tick after
    half its 0.75 ms slice, is then 4 ms ahead of the mean 4/3 and waits (4 - 4/3) x 3 = 8 ms
    while the pollers take the core; back at 12 ms for a whole slice, to the 16 ms tick; ahead
    again by 8/3, it waits to 24 ms and ends its last 4 ms on the 28 ms tick (the pollers
    took nothing from it in the plain turns once modelled over TCP: 12 ms)."""
    env = simpy.Environment()
    host = HostCores(env, 1, 0.004)
    assert host.eevdf_slice_s == pytest.approx(0.00075)
    ended = []

    def computing():
        yield from host.acquire(0)
        yield from host.run(0, 0.012)
        ended.append(env.now)
        host.release(0)
        host.leave(0)

    def polling(r):
        yield from host.acquire(r)
        host.release(r)  # waits for a message that never comes (the run ends with rank 0)

    env.process(computing())
    for r in (1, 2):
        env.process(polling(r))
    env.run()
    assert ended == [pytest.approx(0.028)]


def test_in_fair_turns_a_rank_back_on_a_core_after_another_ran_pays_the_refill():
    """One core, two ranks of 6 ms, a refill of 1 ms, fair turns. Rank 0 runs to the 4 ms tick
    and is 2 ms ahead of the mean; rank 1 runs to the 8 ms tick; rank 0, eligible again, comes
    back cold: its last 2 ms take their share of the refill more (ends at 10.33 ms); rank 1,
    equal then, waits in line and does the same (12.67 ms). Rank 0 comes back at 20.33 ms (the
    two polled alike meanwhile): cold, the whole refill, 3 ms. Then it asks again at once,
    1.5 ms ahead of the mean: it waits 3 ms for rank 1, polling, to catch up, and its 2 ms,
    warm now, cross the 28 ms tick, where it is ahead again by 0.83 ms: 1.67 ms more."""
    env = simpy.Environment()
    host = HostCores(env, 1, 0.004, switch_s=0.001)
    assert _two_ranks_then_one_again(env, host) == {
        0: 0.010333333,
        1: 0.012666667,
        "cold": 0.003,
        "warm": 0.003666667,
    }


def test_fairness_fills_the_free_cores_from_the_lowest_runtime_one_core_a_rank_at_most():
    """Ranks 0 and 1 hold the 2 of 4 cores for 1 s; ranks 2, 3 and 4 poll from runtimes of 0,
    0.5 and 3 s: the 2 free core-seconds raise rank 2 to 1 s (its most, one core), rank 3 to
    1.5 s, and leave rank 4. Eligible: at most the mean; the others wait while the cores,
    all busy, raise the mean by 4/5 a second."""
    env = simpy.Environment()
    fair = Fairness(env)
    for rank, v in enumerate([0.0, 0.0, 0.0, 0.5, 3.0]):
        fair.join(rank)
        fair.v[rank] = v
    env.run(until=1.0)
    fair.advance({0, 1}, {2, 3, 4}, 4)
    assert fair.v == pytest.approx({0: 1.0, 1: 1.0, 2: 1.0, 3: 1.5, 4: 3.0})
    assert fair.mean() == pytest.approx(1.5)
    assert fair.behind_s(4, 4) == pytest.approx((3.0 - 1.5) * 5 / 4)
    assert fair.behind_s(0, 4) < 0  # eligible
    assert [eevdf_slice(c) for c in (1, 2, 4, 8, 16)] == pytest.approx(
        [0.00075, 0.0015, 0.00225, 0.003, 0.003]
    )


@settings(max_examples=200, deadline=None)
@given(
    runtimes=st.lists(st.floats(0.0, 10.0), min_size=1, max_size=12),
    most=st.floats(0.001, 2.0),
    share=st.floats(0.0, 1.0),
)
def test_the_fill_level_pours_exactly_the_free_core_seconds(runtimes, most, share):
    """Raising each runtime below the level up to it, by ``most`` at most, pours the amount."""
    from sim.cores import _fill_level

    amount = share * most * len(runtimes)
    level = _fill_level(runtimes, most, amount)
    poured = sum(min(max(level - v, 0.0), most) for v in runtimes)
    assert poured == pytest.approx(amount, rel=1e-9, abs=1e-9)


def _stack_run(start_s, nbytes, hosts=((0, 1.0), (1, 1.0)), flow=(1, 2)):
    """1 s of work on one core from 0 while a flow of ``nbytes`` at 100 B/s goes ``flow``
    (hosts) from ``start_s``; the kernel takes 1 ms a byte sent and 2 ms a byte received on
    this core for ``hosts``. Returns when the work ends."""
    from sim.cores import StackCpu
    from sim.fairshare import FluidStar
    from sim.shaping import ShapedPattern, Shaping

    env = simpy.Environment()
    plain = ShapedPattern(alpha_s=0.0, efficiency=1.0)
    star = FluidStar(env, Shaping(((100.0, 1e-9),), 100.0, {"oneway": plain}))
    core = HostCores(env, 1, 0.004)
    core.stack = StackCpu(star, hosts, 0.001, 0.002)
    ended = []

    def rank():
        yield from core.acquire(0)
        yield from core.run(0, 1.0)
        ended.append(env.now)

    def message():
        yield env.timeout(start_s)
        yield star.transfer(*flow, nbytes, "oneway")

    env.process(rank())
    env.process(message())
    env.run()
    return ended[0]


@pytest.mark.parametrize(
    "start_s, nbytes, hosts, flow, end_s",
    [
        # 100 B sent from 0.1 to 1.1 s: the kernel takes 0.1 of the core, 0.1 s in all
        (0.1, 100.0, ((0, 1.0), (1, 1.0)), (1, 2), 1.1),
        # 50 B from 0.1 to 0.6 s: the load ends in the middle of the work
        (0.1, 50.0, ((0, 1.0), (1, 1.0)), (1, 2), 1.05),
        # ... and begins between two ticks
        (0.1013, 50.0, ((0, 1.0), (1, 1.0)), (1, 2), 1.05),
        # received here: 2 ms a byte, a fifth of the core until 1.1 s, then the rest alone
        (0.1, 100.0, ((0, 1.0), (1, 1.0)), (2, 1), 1.2),
        # a host of ranks on two cores: half of its work here, 0.05 of the core until the
        # work ends (before the bytes)
        (0.1, 100.0, ((1, 0.5),), (1, 2), 0.1 + 0.9 / 0.95),
        # both ends here: its send and its receive
        (0.1, 50.0, ((1, 1.0), (2, 1.0)), (1, 2), 1.15),
        # between two hosts of other cores: nothing here
        (0.1, 100.0, ((0, 1.0),), (1, 2), 1.0),
        # after the work: nothing taken from it
        (1.0, 100.0, ((0, 1.0), (1, 1.0)), (1, 2), 1.0),
    ],
)
def test_the_kernels_work_for_moving_bytes_takes_the_compute_on_its_core(
    start_s, nbytes, hosts, flow, end_s
):
    """`sim.cores.StackCpu`: a compute on a core where the kernel moves bytes (TCP's copies
    and segments) gives it its share: the work ends as much later as the bytes' CPU time on
    that core while they moved during it, hand-worked."""
    assert _stack_run(start_s, nbytes, hosts, flow) == pytest.approx(end_s, abs=1e-9)


def test_a_host_of_ranks_on_two_cores_spreads_its_kernel_work_over_both():
    """`sim.cores.attach_stack`: ranks 0-3 on two cores (0, 1 | 2, 3), hosts 0, 0, 1, 2 (rank
    r's host ``host_of[r]``): host 0's work is on the first core alone, hosts 1 and 2 on the
    second."""
    from sim.cores import attach_stack

    env = simpy.Environment()
    cores = shared_cores(env, ((range(4), 2),), 0.004, pinned=True)
    attach_stack(cores, [0, 0, 1, 2], object(), 1e-9, 2e-9)
    assert cores[0].stack.hosts == ((0, 1.0),)
    assert sorted(cores[2].stack.hosts) == [(1, 1.0), (2, 1.0)]
    env2 = simpy.Environment()
    spread = shared_cores(env2, ((range(4), 2),), 0.004, pinned=True)
    attach_stack(spread, [0, 1, 0, 1], object(), 1e-9, 2e-9)  # each host on both cores
    assert sorted(spread[0].stack.hosts) == [(0, 0.5), (1, 0.5)]
    assert (spread[0].stack.send_s, spread[0].stack.recv_s) == (1e-9, 2e-9)


@pytest.mark.parametrize("stack_cpu, compute_s", [(None, 2.5), ((1e-4, 0.0), 2.55)])
def test_a_send_over_tcp_slows_the_compute_on_the_senders_core_in_the_simulator(
    stack_cpu, compute_s
):
    """Three emulated hosts on one core: rank 0 sends rank 2 1,000 B at 1,000 B/s (1 s) while
    rank 1 computes 2 s. Rank 2 polls for that second and takes its fair share of the core
    (rank 1 does half a second of work in it), so rank 1's compute ends at 2.5 s; at 0.1 ms of
    the sender's CPU a byte the kernel takes a tenth of the core that second, of which rank 1
    held half: 2.55 s."""
    from sim.shaping import ShapedPattern, Shaping

    plain = ShapedPattern(alpha_s=0.0, efficiency=1.0)
    nodes = [SimpleNamespace(rank=r, size=3, reporter=0) for r in range(3)]
    payload = np.zeros(250, np.float32)  # 1,000 B

    def program(rank):
        if rank == 0:
            yield Send(dest=2, payload=payload, tag=0)
        elif rank == 1:
            yield Compute(lambda: None, (), samples=2)
        else:
            yield Recv(source=0, tag=0)

    logs = [ChargeLog() for _ in nodes]
    sim = Simulator(
        nodes,
        logs,
        0.0,
        1e3,
        ComputeModel(seconds_per_sample=1.0),
        shaping=Shaping(((1e3, 1e-9),), 1e3, {"oneway": plain, "sendrecv": plain}),
        eager_bytes=2**20,
        core_groups=((range(3), 1),),
        over_tcp=True,
        stack_cpu=stack_cpu,
    )
    sim.run([program(r) for r in range(3)])
    assert logs[1].seconds["compute"] == pytest.approx(compute_s, abs=1e-9)


def _ping_pong_beside(others_poll, poll_wait_s, rounds=5):
    """Ranks 0 and 2 of 4 over TCP on 2 cores ping-pong 8 B ``rounds`` times; ranks 1 and 3
    wait for a message the pair sends them at the end (polling all along) or have none to
    wait for. Returns when rank 0's last round ended (s), rank 2 then polling for a token."""
    ended = {}

    def program(rank):
        buf = np.zeros(2, np.float32)
        if rank in (0, 2):
            peer = 2 - rank
            for _ in range(rounds):
                if rank == 0:
                    yield Send(dest=peer, payload=buf)
                    yield Recv(source=peer, buf=buf)
                else:
                    yield Recv(source=peer, buf=buf)
                    yield Send(dest=peer, payload=buf)
            if rank == 0:  # rank 2 polls until rank 0 has the last message
                ended[rank] = sim.env.now
                yield Send(dest=2, payload=buf)
            else:
                yield Recv(source=0, buf=buf)
            if others_poll:
                yield Send(dest=rank + 1, payload=buf)
        elif others_poll:
            yield Recv(source=rank - 1, buf=buf)

    nodes = [SimpleNamespace(rank=r, size=4, reporter=0) for r in range(4)]
    sim = Simulator(
        nodes,
        [ChargeLog() for _ in range(4)],
        1e-5,
        1e9,
        ComputeModel(seconds_per_sample=0.0),
        core_groups=((range(4), 2),),
        over_tcp=True,
        poll_wait_s=poll_wait_s,
    )
    sim.run([program(r) for r in range(4)])
    return ended[0]


def test_a_message_to_a_rank_polling_past_the_cores_is_seen_its_poll_wait_later_per_rank_past():
    """Over TCP, 4 ranks polling on 2 cores: each of the ping-pong's 2 x 5 messages is seen
    2 x poll_wait_s later (two ranks past the cores); with the other two done, the pair fits
    the cores and nothing changes, nor without a poll_wait_s (`sim.cores.Pollers`)."""
    alone = _ping_pong_beside(False, 0.0)
    assert alone == pytest.approx(10 * (1e-5 + 8 / 1e9), rel=1e-12)  # 10 one-way messages
    assert _ping_pong_beside(False, 7e-6) == alone  # within the cores: none
    assert _ping_pong_beside(True, 0.0) == alone  # no poll wait: as before
    assert _ping_pong_beside(True, 7e-6) == pytest.approx(alone + 10 * 2 * 7e-6, rel=1e-12)


def test_pollers_count_the_ranks_computing_and_polling_past_the_cores():
    """`Pollers.seen_after_s`: poll_wait_s for each rank past the cores that wants one, polling
    (itself counted) or holding a core; none while they fit."""
    from sim.cores import Pollers, pollers

    env = simpy.Environment()
    by_rank = shared_cores(env, ((range(4), 2),), 0.004, pinned=True)
    found = pollers(by_rank, ((range(4), 2),), 1e-5)
    polls = found[0]
    assert set(found) == {0, 1, 2, 3} and all(found[r] is polls for r in range(4))
    assert isinstance(polls, Pollers) and len(polls.queues) == 2  # the two cores' queues
    polls.count = 2
    assert polls.seen_after_s() == 0.0  # two ranks on two cores
    polls.count = 3
    assert polls.seen_after_s() == pytest.approx(1e-5)
    by_rank[2].turn_ends[2] = 1.0  # rank 2 computes on its core
    assert polls.seen_after_s() == pytest.approx(2e-5)
    assert pollers(by_rank, ((range(4), 2),), 0.0) == {}


def test_a_profiles_poll_wait_reaches_an_emulated_clusters_ranks_past_the_cores(tmp_path):
    """``[cluster] poll_wait_s`` is read (a negative one refused) and reaches the simulator
    where ranks over TCP share the machine's cores; not where they fit them, nor without the
    emulated cluster's shaper (shared memory's fair share sees polling ranks as runnable)."""
    import tomli_w

    from sim.cluster import build_cluster
    from sim.cluster_profile import load_profile
    from sim.run import build_parser

    def cluster(ranks, poll_wait_s, shaper=True):
        document = {"cluster": {"name": "t", "cores": 2, "one_machine": True}}
        document["cluster"]["poll_wait_s"] = poll_wait_s
        if shaper:
            document["network"] = {"shaper": {"rates_Bps": [1e8], "bursts_bytes": [1e5]}}
        path = tmp_path / "p.toml"
        path.write_text(tomli_w.dumps(document))
        argv = ["--nodes", str(ranks), "--profile", str(path)]
        options = build_parser().parse_known_args(argv)[0]
        return build_cluster(options, load_profile(str(path)), None, "mlp")

    assert cluster(4, 9e-6).poll_wait_s == 9e-6
    assert cluster(2, 9e-6).poll_wait_s == 0.0  # two ranks, two cores
    assert cluster(4, 9e-6, shaper=False).poll_wait_s == 0.0
    with pytest.raises(ValueError, match="poll_wait_s"):
        cluster(4, -1e-6)
