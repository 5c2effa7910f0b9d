"""The simulator's multi-hop networks: message times against the alpha-beta formulas.

Each test starts tiny SimPy drivers that call ``network.transfer`` and take from the mailboxes,
then compares arrival times with ``hops * alpha + n / beta`` and its contended variants.
"""

import dataclasses
import itertools
import math
from types import SimpleNamespace

import networkx as nx
import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.backend import Simulator
from sim.network import Link, MemoryPath, Message, RoutedNetwork, make_network
from sim.shaping import ShapedPattern, Shaping
from twinsgd.calibration.costfit import PiecewiseCost
from twinsgd.calibration.jitter import Jitter

ALPHA = 1e-6  # seconds per hop
BETA = 1e9  # bytes per second per link
NBYTES = 4096
SEND = NBYTES / BETA  # seconds NBYTES take to leave at full rate


def network(spec, n, latency_s=ALPHA, bandwidth_Bps=BETA):
    return make_network(simpy.Environment(), spec, n, latency_s, bandwidth_Bps)


def run_messages(net, sends, at=None):
    """Start each send ``(source, dest, nbytes)`` at time 0 (or ``at[i]``), in order, with tag i;
    run to the end; return (arrival time, Message) per send, in send order."""
    env, arrivals = net.env, [None] * len(sends)

    def send(i, source, dest, nbytes):
        yield env.timeout(at[i] if at else 0)
        yield env.process(net.transfer(source, dest, nbytes, tag=i, payload=f"m{i}"))

    def receive(i, dest):
        message = yield net.mailbox[dest].get(tag=i)
        arrivals[i] = env.now, message

    for i, (source, dest, nbytes) in enumerate(sends):
        env.process(send(i, source, dest, nbytes))
        env.process(receive(i, dest))
    env.run()
    assert None not in arrivals, "a message never arrived"
    return arrivals


def times(arrivals):
    return [t for t, _ in arrivals]


# -- star: the alpha-beta model -------------------------------------------------------------------


@pytest.mark.parametrize("nbytes", [0, 1, NBYTES, 10**6])
def test_star_message_takes_alpha_plus_n_over_beta(nbytes):
    net = network("star", 4)
    [(arrival, _)] = run_messages(net, [(1, 3, nbytes)])
    assert arrival == pytest.approx(ALPHA + nbytes / BETA, rel=1e-12)
    assert net.hops(1, 3) == 2 and net.route(1, 3).latency_s == ALPHA


def test_star_incast_queues_at_the_receivers_link():
    senders = 7
    net = network("star", senders + 1)
    arrivals = run_messages(net, [(r, 0, NBYTES) for r in range(1, senders + 1)])
    expected = [ALPHA + k * SEND for k in range(1, senders + 1)]
    assert sorted(times(arrivals)) == pytest.approx(expected, rel=1e-12)
    assert max(times(arrivals)) == pytest.approx(ALPHA + senders * SEND, rel=1e-12)


@pytest.mark.parametrize(("copies", "turns"), [(None, 1), (8, 1), (3, 2), (2, 3), (1, 6)])
def test_ranks_of_one_machine_take_turns_at_its_memory(copies, turns):
    """Six ranks of one machine each sending to the next at once (no link shared): with its
    memory moving ``copies`` copies at once, ceil(6 / copies) turns of n / beta, then alpha;
    the closed form's ring step gets each copy a share copies / 6 of the measured rate."""
    net = make_network(simpy.Environment(), "star", 6, ALPHA, BETA, machine_copies=copies)
    arrivals = run_messages(net, [(r, (r + 1) % 6, NBYTES) for r in range(6)])
    assert max(times(arrivals)) == pytest.approx(ALPHA + turns * SEND, rel=1e-12)
    measured = {"sendrecv": PiecewiseCost.constant(ALPHA, BETA)}
    ring = make_network(None, "star", 6, ALPHA, BETA, measured, machine_copies=copies)
    share = 1.0 if copies is None else min(1.0, copies / 6)
    assert ring.ring_link(NBYTES) == pytest.approx((ALPHA, BETA * share))


def test_machine_copies_must_be_a_whole_number_of_at_least_one():
    for bad in (0, 1.5, -2):
        with pytest.raises(ValueError, match="machine copies must be an integer >= 1"):
            make_network(None, "star", 2, ALPHA, BETA, machine_copies=bad)


def test_transfer_ends_when_the_bytes_have_left_the_sender():
    net = network("ring", 8)
    env = net.env
    transfer = env.process(net.transfer(0, 3, NBYTES, tag=0, payload=None))
    env.run(transfer)
    assert env.now == pytest.approx(SEND, rel=1e-12)  # not yet arrived: 3 alpha later
    assert net.mailbox[3].items == []
    env.run()
    assert env.now == pytest.approx(SEND + 3 * ALPHA, rel=1e-12)


def test_mailbox_gets_source_tag_payload_and_start_after_queueing():
    net = network("star", 3)
    arrivals = run_messages(net, [(1, 0, NBYTES), (2, 0, NBYTES)])
    assert [m for _, m in arrivals] == [
        Message(source=1, tag=0, payload="m0", started=0.0),
        Message(source=2, tag=1, payload="m1", started=pytest.approx(SEND, rel=1e-12)),
    ]


def test_message_to_oneself_is_free():
    net = network("star", 2)
    assert net.hops(1, 1) == 0
    assert times(run_messages(net, [(1, 1, NBYTES)])) == [0.0]


# -- ring and torus: direct networks, alpha per link ----------------------------------------------


@pytest.mark.parametrize(("dest", "hops"), [(1, 1), (2, 2), (3, 3), (4, 4), (5, 3), (7, 1)])
def test_ring_message_over_h_hops_takes_h_alpha_plus_n_over_beta(dest, hops):
    net = network("ring", 8)
    assert net.hops(0, dest) == hops
    assert times(run_messages(net, [(0, dest, NBYTES)])) == pytest.approx(
        [hops * ALPHA + SEND], rel=1e-12
    )


def test_torus_is_as_square_as_possible_with_ranks_row_major():
    net = network("torus", 12)  # 3 rows x 4 columns: rank r at (r // 4, r % 4)
    assert set(net.graph[0]) == {1, 3, 4, 8}
    assert net.graph.number_of_edges() == 24 and {d for _, d in net.graph.degree} == {4}
    assert [net.hops(0, dest) for dest in (1, 2, 4, 5, 6, 11)] == [1, 2, 1, 2, 3, 2]


@pytest.mark.parametrize("dest", [1, 2, 5, 6, 10, 11])
def test_torus_message_over_h_hops_takes_h_alpha_plus_n_over_beta(dest):
    net = network("torus", 12)
    hops = net.hops(0, dest)
    assert times(run_messages(net, [(0, dest, NBYTES)])) == pytest.approx(
        [hops * ALPHA + SEND], rel=1e-12
    )


def test_torus_of_a_prime_is_a_ring():
    net = network("torus", 7)
    assert nx.is_isomorphic(net.graph, nx.cycle_graph(7))
    assert [net.hops(0, dest) for dest in range(7)] == [0, 1, 2, 3, 3, 2, 1]


def test_messages_sharing_a_link_one_way_take_turns():
    net = network("ring", 8)  # 0 -> 2 and 1 -> 2 both cross the link 1 -> 2
    first, second = times(run_messages(net, [(0, 2, NBYTES), (1, 2, NBYTES)]))
    assert first == pytest.approx(2 * ALPHA + SEND, rel=1e-12)
    assert second == pytest.approx(SEND + ALPHA + SEND, rel=1e-12)  # waits for the link


@pytest.mark.parametrize(
    ("spec", "a", "b"),
    [("ring", 0, 2), ("ring", 0, 1), ("torus", 0, 6), ("star", 0, 1), ("fat-tree:4", 0, 8)],
)
def test_opposite_directions_do_not_interfere(spec, a, b):
    net = network(spec, {"torus": 12, "fat-tree:4": 16}.get(spec, 8))
    arrivals = times(run_messages(net, [(a, b, NBYTES), (b, a, NBYTES)]))
    idle = net.idle_transfer_s(a, b, NBYTES)
    assert arrivals == pytest.approx([idle, idle], rel=1e-12)


@pytest.mark.parametrize("offset", [3, -3])
def test_ring_everyone_sends_three_hops_round_without_deadlock(offset):
    n = 8
    net = network("ring", n)
    assert {net.hops(r, (r + offset) % n) for r in range(n)} == {3}
    arrivals = times(run_messages(net, [(r, (r + offset) % n, NBYTES) for r in range(n)]))
    # each link carries 3 of the messages one way; some message is always on the wire
    assert 3 * ALPHA + 3 * SEND - 1e-15 <= max(arrivals) <= 3 * ALPHA + n * SEND + 1e-15


@pytest.mark.parametrize(
    ("spec", "n"), [("ring", 6), ("torus", 9), ("torus", 16), ("star", 6), ("fat-tree:4", 16)]
)
def test_all_to_all_at_once_arrives(spec, n):
    net = network(spec, n)
    sends = [(s, d, NBYTES) for s, d in itertools.permutations(range(n), 2)]
    arrivals = times(run_messages(net, sends))
    for (s, d, nbytes), arrival in zip(sends, arrivals, strict=True):
        assert arrival >= net.idle_transfer_s(s, d, nbytes) - 1e-15
    assert max(arrivals) <= max(net.route(s, d).latency_s for s, d, _ in sends) + len(sends) * SEND


# -- fat tree -------------------------------------------------------------------------------------


def test_fat_tree_4_has_16_hosts_20_switches_48_links():
    net = network("fat-tree:4", 16)
    kinds = [node[0] for node in net.graph]
    assert [kinds.count(kind) for kind in ("host", "edge", "agg", "core")] == [16, 8, 8, 4]
    assert net.graph.number_of_edges() == 48 and len(net.mailbox) == 16


@pytest.mark.parametrize(
    ("dest", "hops", "switches"), [(1, 2, 1), (2, 4, 3), (3, 4, 3), (4, 6, 5), (15, 6, 5)]
)
def test_fat_tree_route_lengths(dest, hops, switches):
    """Same edge switch, same pod, another pod: alpha per switch passed through."""
    net = network("fat-tree:4", 16)
    assert net.hops(0, dest) == hops
    assert times(run_messages(net, [(0, dest, NBYTES)])) == pytest.approx(
        [switches * ALPHA + SEND], rel=1e-12
    )


@pytest.mark.parametrize("pods", [1, 2, 3])
def test_fat_tree_pod_shift_is_contention_free(pods):
    """Host i of pod p sends to host i of pod p + pods: two-level routing gives every message
    its own links (edge e climbs to aggregation (i + e) mod 2, which climbs to core i + a)."""
    net = network("fat-tree:4", 16)
    arrivals = times(run_messages(net, [(r, (r + 4 * pods) % 16, NBYTES) for r in range(16)]))
    assert arrivals == pytest.approx([5 * ALPHA + SEND] * 16, rel=1e-12)


def test_fat_tree_cross_pod_permutation_ends_between_idle_and_serial():
    rng = np.random.default_rng(1)
    while True:
        dests = rng.permutation(16)
        if all(d // 4 != r // 4 for r, d in enumerate(dests)):
            break
    net = network("fat-tree:4", 16)
    arrivals = times(run_messages(net, [(r, int(d), NBYTES) for r, d in enumerate(dests)]))
    idle = 5 * ALPHA + SEND
    assert min(arrivals) == pytest.approx(idle, rel=1e-12)
    assert max(arrivals) <= 5 * ALPHA + 16 * SEND + 1e-15


def test_fat_tree_fills_hosts_pod_by_pod():
    net = network("fat-tree:4", 5)
    assert [net.hops(0, dest) for dest in range(5)] == [0, 2, 4, 4, 6]


def test_fat_tree_of_too_few_hosts_names_the_flag():
    with pytest.raises(ValueError, match=r"^--network fat-tree:4 holds 16 hosts, got n = 17$"):
        network("fat-tree:4", 17)


@pytest.mark.parametrize("spec", ["fat-tree:3", "fat-tree:0", "fat-tree:x", "fat-tree:"])
def test_fat_tree_needs_an_even_k(spec):
    with pytest.raises(ValueError, match="even K >= 2"):
        network(spec, 2)


# -- specs and checks -----------------------------------------------------------------------------


def test_unknown_spec_lists_the_choices():
    with pytest.raises(
        ValueError,
        match=r"^--network: expected star, fat-tree:K, torus, ring or "
        r"a graph file, got 'mesh'$",
    ):
        network("mesh", 4)


def test_large_networks_build_without_computing_routes():
    for spec in ("star", "torus"):
        net = network(spec, 10_000)
        assert times(run_messages(net, [(0, 9_999, NBYTES)]))[0] >= SEND


@pytest.mark.parametrize(
    ("graph", "hosts", "latency_s", "bandwidth_Bps", "match"),
    [
        (nx.Graph([(0, 1), (2, 3)]), [0, 2], ALPHA, BETA, "connected"),
        (nx.path_graph(3), [0, 0], ALPHA, BETA, "memory path"),
        (nx.path_graph(3), [0, 5], ALPHA, BETA, "host 5"),
        (nx.path_graph(3), [], ALPHA, BETA, "at least one"),
        (nx.path_graph(3), [0, 2], -1.0, BETA, "latency_s"),
        (nx.path_graph(3), [0, 2], ALPHA, 0.0, "bandwidth_Bps"),
    ],
)
def test_routed_network_checks_its_inputs(graph, hosts, latency_s, bandwidth_Bps, match):
    with pytest.raises(ValueError, match=match):
        RoutedNetwork(simpy.Environment(), graph, hosts, latency_s, bandwidth_Bps)


def test_a_router_that_gives_no_path_is_refused():
    net = RoutedNetwork(
        simpy.Environment(), nx.path_graph(3), [0, 2], ALPHA, BETA, router=lambda u, v: [u, v]
    )
    with pytest.raises(ValueError, match="not a path"):
        net.hops(0, 1)


# -- interrupted transfers give their links back --------------------------------------------------


def interrupted_incast(interrupt_rank, interrupt_at):
    """Ranks 1, 2, 3 send to 0 on a star, in that order; ``interrupt_rank``'s transfer is
    interrupted at ``interrupt_at``. Returns {rank: arrival} of the messages that arrive."""
    net = network("star", 4)
    env, arrived, senders = net.env, {}, {}

    def sender(rank):
        try:
            yield from net.transfer(rank, 0, NBYTES, tag=rank, payload=None)
        except simpy.Interrupt:
            return

    def receiver():
        while True:
            message = yield net.mailbox[0].get()
            arrived[message.source] = env.now

    def interrupter():
        yield env.timeout(interrupt_at)
        senders[interrupt_rank].interrupt()

    for rank in (1, 2, 3):
        senders[rank] = env.process(sender(rank))
    env.process(receiver())
    env.process(interrupter())
    env.run()
    return arrived


@pytest.mark.parametrize(("rank", "at"), [(2, SEND / 2), (2, SEND)])
def test_a_transfer_interrupted_while_queueing_leaves_the_queue(rank, at):
    """At ``SEND`` it is interrupted just as it is handed the link: it hands it on."""
    assert interrupted_incast(rank, at) == pytest.approx(
        {1: ALPHA + SEND, 3: ALPHA + 2 * SEND}, rel=1e-12
    )


def test_a_transfer_interrupted_while_sending_frees_its_links():
    assert interrupted_incast(1, SEND / 2) == pytest.approx(
        {2: ALPHA + 1.5 * SEND, 3: ALPHA + 2.5 * SEND}, rel=1e-12
    )


def test_a_transfer_that_queued_and_is_interrupted_while_sending_frees_its_links():
    """Rank 2 waited for the NIC, was handed it at SEND and sends until 2 SEND (one event
    for the wait and the bytes): interrupted half way, rank 3 takes the NIC then."""
    assert interrupted_incast(2, 1.5 * SEND) == pytest.approx(
        {1: ALPHA + SEND, 3: ALPHA + 2.5 * SEND}, rel=1e-12
    )


# -- graph files ----------------------------------------------------------------------------------


def small_switched_graph():
    """h1, h2 on switch s0; h10 on switch s1; the s0-s1 link at half the bandwidth."""
    graph = nx.Graph([("h1", "s0"), ("h2", "s0"), ("h10", "s1")])
    graph.add_edge("s0", "s1", bandwidth_Bps=BETA / 2)
    return graph


def check_small_switched_network(net):
    assert net.hosts == ["h1", "h2", "h10"]  # numeric order of the names
    assert [net.hops(0, 1), net.hops(0, 2)] == [2, 3]
    arrivals = times(run_messages(net, [(0, 1, NBYTES), (0, 2, NBYTES)]))
    assert arrivals == pytest.approx([ALPHA + SEND, SEND + 2 * ALPHA + 2 * SEND], rel=1e-12)


@pytest.mark.parametrize(("yes", "no"), [(True, False), ("true", "false"), ("1", "0")])
def test_graphml_file_hosts_are_marked(tmp_path, yes, no):
    graph = small_switched_graph()
    nx.set_node_attributes(graph, {v: yes if v.startswith("h") else no for v in graph}, "host")
    path = tmp_path / "net.graphml"
    nx.write_graphml(graph, path)
    check_small_switched_network(network(path, 3))


@pytest.mark.parametrize("name", ["net.edgelist", "net.txt"])
def test_edgelist_file_hosts_are_named_h(tmp_path, name):
    path = tmp_path / name
    path.write_text("# two switches\nh2 s0\nh1 s0\ns0 s1 {'bandwidth_Bps': 5e8}\nh10 s1\n")
    check_small_switched_network(network(str(path), 3))


def test_a_host_without_a_rank_still_forwards_as_a_host(tmp_path):
    path = tmp_path / "line.edgelist"
    path.write_text("h0 h2\nh2 h1\n")  # h2 has no rank when n = 2, yet costs alpha per link
    net = network(path, 2)
    assert times(run_messages(net, [(0, 1, NBYTES)])) == pytest.approx([2 * ALPHA + SEND])


@pytest.mark.parametrize(
    ("name", "text", "n", "match"),
    [
        ("bad.graphml", "<graphml><node", 2, "not a valid GraphML"),
        ("bad.edgelist", "h0 s0 not-a-dict\n", 2, "not a valid edge list"),
        ("few.edgelist", "h0 s0\nh1 s0\n", 3, "has 2 hosts"),
        ("apart.edgelist", "h0 s0\nh1 s1\n", 2, "disconnected"),
        ("slow.edgelist", "h0 s0 {'bandwidth_Bps': -1}\nh1 s0\n", 2, "bandwidth_Bps"),
        ("missing.graphml", None, 2, "cannot read"),
    ],
)
def test_a_bad_graph_file_is_one_line_naming_it(tmp_path, name, text, n, match):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(ValueError, match=match) as caught:
        network(path, n)
    assert str(caught.value).startswith(f"--network {path}: ") and "\n" not in str(caught.value)


# -- property: an idle message on any tree --------------------------------------------------------


@st.composite
def trees_with_hosts(draw):
    """A random labelled tree on 2..10 nodes (from a Pruefer sequence), some of them hosts in a
    random rank order, each link at the default or its own bandwidth."""
    size = draw(st.integers(2, 10))
    tree = nx.from_prufer_sequence(
        draw(st.lists(st.integers(0, size - 1), min_size=size - 2, max_size=size - 2))
    )
    hosts = draw(st.lists(st.integers(0, size - 1), min_size=1, unique=True))
    for u, v in tree.edges:
        link_Bps = draw(st.sampled_from([None, 1e8, 2.5e9, 1e10]))
        if link_Bps is not None:
            tree.edges[u, v]["bandwidth_Bps"] = link_Bps
    return tree, hosts


@settings(max_examples=50, deadline=None)
@given(network_=trees_with_hosts(), data=st.data(), nbytes=st.integers(0, 10**7))
def test_idle_message_takes_route_latency_plus_n_over_slowest_link(network_, data, nbytes):
    tree, hosts = network_
    source, dest = data.draw(st.lists(st.integers(0, len(hosts) - 1), min_size=2, max_size=2))
    net = RoutedNetwork(simpy.Environment(), tree, hosts, ALPHA, BETA)
    path = nx.shortest_path(tree, hosts[source], hosts[dest])  # the only path in a tree
    links = list(itertools.pairwise(path))
    switches = set(tree) - set(hosts)
    alphas = sum(v in switches for v in path[1:-1]) + sum(
        u not in switches and v not in switches for u, v in links
    )
    slowest_Bps = min(
        (tree.edges[link].get("bandwidth_Bps", BETA) for link in links), default=math.inf
    )
    assert net.hops(source, dest) == len(links)
    assert times(run_messages(net, [(source, dest, nbytes)])) == pytest.approx(
        [alphas * ALPHA + nbytes / slowest_Bps], rel=1e-12
    )


# -- MPI's non-overtaking rule ------------------------------------------------------------------

SIZED = PiecewiseCost(  # a big message's alpha dwarfs a small one's, as fitted segments do
    min_bytes=(0.0, 65536.0),
    max_bytes=(65536.0, math.inf),
    latency_s=(1e-6, 300e-6),
    bandwidth_Bps=(1e9, 1e9),
    latency_ci_s=((math.nan, math.nan),) * 2,
    bandwidth_ci_Bps=((math.nan, math.nan),) * 2,
    max_rel_residual=(math.nan, math.nan),
)


@pytest.mark.parametrize("jitter", [None, "spread"])
def test_a_later_message_of_a_pair_never_lands_before_an_earlier_one(jitter):
    """0 sends 100 kB, then 8 B, to 1: alone the small one would land after 1 us + 8 ns, the
    big one after 300 us + 100 us. The small one waits, landing with the big one; a message
    from another rank (2) is not held up. With jitter each draw may reorder landings too."""
    draws = {"oneway": Jitter(np.linspace(0.2, 5.0, 101), seed=1)} if jitter else None
    net = make_network(simpy.Environment(), "star", 3, ALPHA, BETA, {"oneway": SIZED}, jitter=draws)
    env, landed = net.env, []

    def sender(source, sizes):
        for nbytes in sizes:
            yield env.process(net.transfer(source, 1, nbytes, tag=0, payload=(source, nbytes)))

    def receiver():
        for _ in range(5):
            message = yield net.mailbox[1].get()
            landed.append((env.now, message.payload))

    env.process(sender(0, [100_000, 8, 100_000, 8]))
    env.process(sender(2, [8]))
    env.process(receiver())
    env.run()
    from_0 = [payload for _, payload in landed if payload[0] == 0]
    assert from_0 == [(0, 100_000), (0, 8), (0, 100_000), (0, 8)]
    if jitter is None:  # each 8 B lands the moment the 100 kB sent before it does
        times_ = [t for t, _ in landed]
        assert landed[0][1] == (2, 8) and times_[0] < SIZED.seconds(100_000)
        assert times_[1] == pytest.approx(SIZED.seconds(100_000), rel=1e-12)
        assert times_[1] == times_[2] and times_[3] == times_[4]


def _landings(spec, sends, keep_order):
    """(time, dest, source, payload) of every message as it is taken from its mailbox,
    ``sends`` being (start s, source, dest, nbytes), each transfer its own process and its
    payload its index; the network holds each pair to its order only if ``keep_order``."""
    net = network(spec, 4)
    net.keep_order = keep_order
    env, landed = net.env, []

    def send(at, source, dest, nbytes, i):
        yield env.timeout(at)
        yield from net.transfer(source, dest, nbytes, tag=0, payload=i)

    def receive(dest, count):
        for _ in range(count):
            message = yield net.mailbox[dest].get()
            landed.append((env.now, dest, message.source, message.payload))

    for i, (at, source, dest, nbytes) in enumerate(sends):
        env.process(send(at, source, dest, nbytes, i))
    for dest in range(4):
        env.process(receive(dest, sum(d == dest for _, _, d, _ in sends)))
    env.run()
    return landed


@settings(max_examples=60, deadline=None)
@given(
    spec=st.sampled_from(["star", "ring", "fat-tree:4"]),
    sends=st.lists(
        st.tuples(
            st.sampled_from([0.0, 1e-7, 2e-6]),
            st.integers(0, 3),
            st.integers(0, 3),
            st.sampled_from([0, 8, 4096, 10**6]),
        ),
        min_size=1,
        max_size=12,
    ),
)
def test_fifo_links_of_one_latency_keep_a_pairs_order_by_themselves(spec, sends):
    """Without measured costs or shared hosts a network does not hold messages to their
    order (`RoutedNetwork.keep_order` is False): its FIFO links and a route's one latency keep
    it. Every message lands when, where and in the order it lands when held to it, and each
    pair's in the order sent, of any sizes sent at any times on any topology."""
    assert not network(spec, 4).keep_order
    landed = _landings(spec, sends, keep_order=False)
    assert landed == _landings(spec, sends, keep_order=True)
    for source, dest in itertools.product(range(4), repeat=2):
        pair = [(at, i) for i, (at, s, d, _) in enumerate(sends) if (s, d) == (source, dest)]
        sent = [i for _, i in sorted(pair)]  # by start, then in the order the senders began
        assert [p for _, d, s, p in landed if (s, d) == (source, dest)] == sent


def test_a_network_whose_messages_can_overtake_holds_them_to_their_order():
    """Measured costs (a message's time by size), a jitter, ranks that share a host's memory
    (several copies at once) or the machine's: each pair held to its order; and a simulator
    whose library's steps land sooner sets it on any network; token buckets' flows too."""
    sized = {"oneway": SIZED}
    assert make_network(simpy.Environment(), "star", 3, ALPHA, BETA, sized).keep_order
    draws = {"oneway": Jitter(np.linspace(0.5, 2.0, 101), seed=1)}
    assert make_network(simpy.Environment(), "star", 3, ALPHA, BETA, jitter=draws).keep_order
    buckets = Shaping(((BETA, 1e-9),), BETA, {"oneway": ShapedPattern(alpha_s=0.0, efficiency=1.0)})
    assert make_network(simpy.Environment(), "star", 3, ALPHA, BETA, shaping=buckets).keep_order
    shared = RoutedNetwork(
        simpy.Environment(),
        nx.star_graph(2),
        [1, 1, 2],
        ALPHA,
        BETA,
        memory=MemoryPath(latency_s=ALPHA, bandwidth_Bps=BETA),
    )
    assert shared.keep_order
    machine = RoutedNetwork(
        simpy.Environment(), nx.star_graph(2), [1, 2], ALPHA, BETA, machine_copies=2
    )
    assert machine.keep_order
    nodes = [SimpleNamespace(rank=r, size=2) for r in range(2)]
    assert Simulator(nodes, [None, None], ALPHA, BETA, call_overhead_s=1e-6).network.keep_order
    assert not Simulator(nodes, [None, None], ALPHA, BETA).network.keep_order


def test_an_interrupted_message_does_not_hold_back_the_ones_after_it():
    net = network("star", 2)
    env, landed = net.env, []

    def lost():
        try:
            yield from net.transfer(0, 1, 10**6, tag=0, payload="lost")
        except simpy.Interrupt:
            return

    first = env.process(lost())

    def then():
        yield env.timeout(1e-6)
        first.interrupt()
        yield env.process(net.transfer(0, 1, NBYTES, tag=0, payload="second"))

    def receiver():
        message = yield net.mailbox[1].get()
        landed.append((env.now, message.payload))

    env.process(then())
    env.process(receiver())
    env.run()
    assert landed == [(pytest.approx(1e-6 + SEND + ALPHA, rel=1e-9), "second")]


def test_ctrl_c_between_taking_a_free_link_and_counting_it_stops_the_run_as_it_is():
    """SIGINT lands between any two bytecodes, here right as a transfer takes a free link: it
    reaches the caller as KeyboardInterrupt (the front end's exit 130), not as an error of a
    link given back that was never counted."""

    class Tripwire(Link):
        __slots__ = ()

        def __init__(self):
            self.waiting = []

        @property
        def free(self):
            return 1

        @free.setter
        def free(self, value):
            raise KeyboardInterrupt

    env = simpy.Environment()
    net = RoutedNetwork(env, nx.path_graph(["a", "s", "b"]), ["a", "b"], 1e-6, 1e9)
    route = net.route(0, 1)
    net._routes[0, 1] = dataclasses.replace(route, links=(Tripwire(), *route.links[1:]))
    env.process(net.transfer(0, 1, 100, tag=0, payload=None))
    with pytest.raises(KeyboardInterrupt):
        env.run()
