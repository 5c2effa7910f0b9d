"""topologies: graph families against closed forms, mixing matrices against their definitions and
known spectra, consensus speed against the spectral gap, schedules, files and error messages."""

import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topologies import (
    MIXINGS,
    TOPOLOGIES,
    Schedule,
    TopologyError,
    make_graph,
    make_schedule,
    mixing_matrix,
    spectral_gap,
)

FIXED = ["ring", "torus", "hypercube", "exponential", "complete", "star"]


def edge_set(G):
    return {frozenset(e) for e in G.edges}


def assert_one_line_error(call, *fragments, error=TopologyError):
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


# ---- graph families against their closed forms --------------------------------------------------


@pytest.mark.parametrize("n", range(2, 21))
def test_ring(n):
    G = make_graph("ring", n)
    assert list(G) == list(range(n)) and nx.is_connected(G)
    assert edge_set(G) == {frozenset((i, (i + 1) % n)) for i in range(n)}
    assert G.number_of_edges() == (1 if n == 2 else n)
    assert {d for _, d in G.degree} == ({1} if n == 2 else {2})


@pytest.mark.parametrize("n", range(2, 21))
def test_star(n):
    G = make_graph("star", n)
    assert G.number_of_edges() == n - 1 and nx.is_connected(G)
    assert G.degree[0] == n - 1 and all(G.degree[i] == 1 for i in range(1, n))


@pytest.mark.parametrize(
    ("n", "rows", "cols"),
    [
        (9, 3, 3),
        (12, 3, 4),
        (15, 3, 5),
        (16, 4, 4),
        (18, 3, 6),
        (24, 4, 6),
        (30, 5, 6),
        (36, 6, 6),
        (49, 7, 7),
        (100, 10, 10),
    ],
)
def test_torus(n, rows, cols):
    G = make_graph("torus", n)
    assert list(G) == list(range(n)) and nx.is_connected(G)
    assert G.number_of_edges() == 2 * n and {d for _, d in G.degree} == {4}
    for i in range(n):
        a, b = divmod(i, cols)  # node i = (row, column) = (i // c, i % c)
        expected = {
            ((a + 1) % rows) * cols + b,
            ((a - 1) % rows) * cols + b,
            a * cols + (b + 1) % cols,
            a * cols + (b - 1) % cols,
        }
        assert set(G[i]) == expected


@pytest.mark.parametrize("k", range(8))
def test_hypercube(k):
    n = 2**k
    G = make_graph("hypercube", n)
    assert list(G) == list(range(n)) and nx.is_connected(G)
    assert G.number_of_edges() == n * k // 2
    assert edge_set(G) == {frozenset((i, i ^ (1 << b))) for i in range(n) for b in range(k)}


@pytest.mark.parametrize("n", range(1, 21))
def test_complete(n):
    G = make_graph("complete", n)
    assert G.number_of_edges() == n * (n - 1) // 2 and list(G) == list(range(n))


@pytest.mark.parametrize("n", range(1, 70))
def test_exponential(n):
    G = make_graph("exponential", n)
    powers = {2**k for k in range(n.bit_length()) if 2**k < n}
    expected = {
        frozenset((i, j))
        for i in range(n)
        for j in range(n)
        if i != j and ((j - i) % n in powers or (i - j) % n in powers)
    }
    assert edge_set(G) == expected and list(G) == list(range(n))
    assert n == 1 or nx.is_connected(G)
    if n >= 2 and n & (n - 1) == 0:  # power of two: 2 log2 n - 1
        assert {d for _, d in G.degree} == {2 * int(math.log2(n)) - 1}
    if n == 12:  # ±1, ±2, ±4, +8 = -4: degree 6
        assert {d for _, d in G.degree} == {6}


@pytest.mark.parametrize(("degree", "n"), [(3, 8), (3, 20), (4, 9), (5, 12), (7, 30)])
def test_random_regular(degree, n):
    G = make_graph(f"random-regular:{degree}", n, seed=1)
    assert {d for _, d in G.degree} == {degree} and G.number_of_edges() == n * degree // 2
    assert list(G) == list(range(n)) and nx.is_connected(G)
    assert edge_set(G) == edge_set(nx.random_regular_graph(degree, n, seed=1))
    assert edge_set(G) == edge_set(make_graph(f"random-regular:{degree}", n, seed=1))


def test_random_regular_depends_on_the_seed():
    graphs = {frozenset(edge_set(make_graph("random-regular:3", 20, seed=s))) for s in range(5)}
    assert len(graphs) == 5


@pytest.mark.parametrize("name", [*FIXED, "random-regular:0"])
def test_one_node_is_one_node(name):
    G = make_graph(name, 1)
    assert list(G) == [0] and G.number_of_edges() == 0
    schedule = make_schedule(name, 1)
    assert schedule.neighbours(0, 0) == {} and schedule.self_weight(0, 0) == 1.0
    assert schedule.matrix(0).tolist() == [[1.0]] and schedule.spectral_gap() == 1.0


def test_topology_names():
    assert TOPOLOGIES == (
        "ring",
        "torus",
        "hypercube",
        "exponential",
        "complete",
        "star",
        "random-regular",
        "rotating",
    )
    assert MIXINGS == ("uniform", "metropolis")


# ---- bad names and impossible sizes --------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "n", "fragment"),
    [
        ("tree", 4, "unknown topology 'tree': not one of ring, torus, hypercube"),
        ("hypercube", 6, "hypercube needs a power of two nodes, got 6"),
        ("hypercube", 12, "hypercube needs a power of two nodes, got 12"),
        ("torus", 8, "torus needs n = r*c with r, c >= 3, got 8"),
        ("torus", 7, "torus needs n = r*c with r, c >= 3, got 7"),
        ("torus", 22, "torus needs n = r*c with r, c >= 3, got 22"),
        ("ring", 0, "n must be an integer >= 1, got 0"),
        ("ring", 2.5, "n must be an integer >= 1, got 2.5"),
        ("ring", True, "n must be an integer >= 1, got True"),
        ("random-regular", 8, "write random-regular:D with D an integer degree"),
        ("random-regular:x", 8, "write random-regular:D with D an integer degree"),
        ("random-regular:-2", 8, "write random-regular:D with D an integer degree"),
        ("random-regular:8", 8, "random-regular:8 needs D < n, got n = 8, D = 8"),
        ("random-regular:3", 7, "random-regular:3 needs n*D even, got n = 7, D = 3"),
        (
            "random-regular:1",
            4,
            "topology random-regular:1 (n = 4, seed = 0) is disconnected: 2 components",
        ),
        ("rotating", 4, "use make_schedule"),
    ],
)
def test_bad_names_and_sizes(name, n, fragment):
    assert_one_line_error(lambda: make_graph(name, n), fragment)
    if name != "rotating":
        assert_one_line_error(lambda: make_schedule(name, n), fragment)


def test_a_disconnected_random_draw_is_refused():
    seed = next(s for s in range(100) if not nx.is_connected(nx.random_regular_graph(2, 10, s)))
    count = nx.number_connected_components(nx.random_regular_graph(2, 10, seed))
    assert_one_line_error(
        lambda: make_graph("random-regular:2", 10, seed=seed),
        f"(n = 10, seed = {seed}) is disconnected: {count} components",
    )


def test_bad_mixing_and_bad_matrices():
    assert_one_line_error(
        lambda: make_schedule("ring", 4, mixing="max-degree"),
        "unknown mixing 'max-degree': expected uniform or metropolis",
    )
    assert_one_line_error(lambda: mixing_matrix(nx.cycle_graph(4), "Uniform"), "unknown mixing")
    assert_one_line_error(lambda: mixing_matrix(nx.DiGraph([(0, 1)])), "undirected simple")
    assert_one_line_error(lambda: mixing_matrix(nx.Graph([(1, 2)])), "nodes must be 0..1")
    assert_one_line_error(lambda: mixing_matrix(nx.Graph([(0, 0), (0, 1)])), "self-loop")
    assert_one_line_error(lambda: mixing_matrix(nx.Graph()), "at least one node")
    assert_one_line_error(lambda: spectral_gap(np.ones((2, 3)) / 3), "square", "(2, 3)")
    assert_one_line_error(lambda: spectral_gap(np.ones((2, 2))), "doubly stochastic")
    assert_one_line_error(lambda: spectral_gap([[np.nan]]), "finite")


def test_bad_rank_and_round():
    schedule = make_schedule("ring", 4)
    assert_one_line_error(
        lambda: schedule.neighbours(4, 0), "rank must be an integer in 0..3", error=ValueError
    )
    assert_one_line_error(lambda: schedule.self_weight(-1, 0), "got -1", error=ValueError)
    assert_one_line_error(
        lambda: schedule.matrix(-1), "round t must be an integer >= 0", error=ValueError
    )


# ---- mixing matrices: properties -----------------------------------------------------------------


@st.composite
def family_graphs(draw):
    """A (connected) graph of a family, at a size the family can make."""
    name = draw(st.sampled_from([*FIXED, "random-regular"]))
    if name == "torus":
        n = draw(st.integers(3, 6)) * draw(st.integers(3, 6))
    elif name == "hypercube":
        n = 2 ** draw(st.integers(0, 5))
    elif name == "random-regular":
        degree = draw(st.integers(3, 6))
        n = draw(st.integers(degree + 1, 30).filter(lambda m: m * degree % 2 == 0))
        seed = draw(st.integers(0, 2**32 - 1))
        G = nx.random_regular_graph(degree, n, seed)  # may be disconnected: make_graph refuses
        return G if nx.is_connected(G) else make_graph("ring", n)
    else:
        n = draw(st.integers(2 if name == "ring" else 1, 40))
    return make_graph(name, n)


@st.composite
def any_graphs(draw):
    """Connected or not, regular or not: G(n, p), or two family graphs side by side."""
    if draw(st.booleans()):
        n = draw(st.integers(1, 30))
        return nx.gnp_random_graph(n, draw(st.floats(0.0, 0.6)), seed=draw(st.integers(0, 10**6)))
    return nx.disjoint_union(draw(family_graphs()), draw(family_graphs()))


def check_mixing_matrix(G, kind):
    n = G.number_of_nodes()
    W = mixing_matrix(G, kind)
    assert W.shape == (n, n) and W.dtype == np.float64
    np.testing.assert_array_equal(W, W.T)  # symmetric, exactly
    np.testing.assert_allclose(W.sum(axis=0), 1, rtol=0, atol=1e-12)  # doubly stochastic
    np.testing.assert_allclose(W.sum(axis=1), 1, rtol=0, atol=1e-12)
    assert W.min() >= 0
    support = nx.to_numpy_array(G, nodelist=range(n)) + np.eye(n)
    np.testing.assert_array_equal(W > 0, support > 0)  # edges and diagonal only
    return W


def definition(G, kind):
    """The weights straight from their formulas, in numpy."""
    n = G.number_of_nodes()
    A = nx.to_numpy_array(G, nodelist=range(n))
    degree = A.sum(axis=1)
    if kind == "uniform":
        W = A / (degree.max() + 1)
    else:
        W = A / (1 + np.maximum(degree[:, None], degree[None, :]))
    return W + np.diag(1 - W.sum(axis=1))


@settings(max_examples=150, deadline=None)
@given(G=family_graphs(), kind=st.sampled_from(MIXINGS))
def test_family_mixing_matrices(G, kind):
    W = check_mixing_matrix(G, kind)
    np.testing.assert_allclose(W, definition(G, kind), rtol=0, atol=1e-15)
    assert spectral_gap(W) > 1e-10  # connected: contracts


@settings(max_examples=150, deadline=None)
@given(G=any_graphs(), kind=st.sampled_from(MIXINGS))
def test_gap_is_positive_exactly_when_connected(G, kind):
    W = check_mixing_matrix(G, kind)
    np.testing.assert_allclose(W, definition(G, kind), rtol=0, atol=1e-15)
    gap = spectral_gap(W)
    if nx.is_connected(G):
        assert gap > 1e-10
    else:
        assert abs(gap) < 1e-10


def test_two_rings_do_not_mix():
    two_rings = nx.disjoint_union(nx.cycle_graph(5), nx.cycle_graph(7))
    for kind in MIXINGS:
        assert abs(spectral_gap(mixing_matrix(two_rings, kind))) < 1e-12
        joined = nx.Graph(two_rings)
        joined.add_edge(0, 5)
        assert spectral_gap(mixing_matrix(joined, kind)) > 1e-3


# ---- mixing matrices: known values ---------------------------------------------------------------


@pytest.mark.parametrize("n", range(3, 13))
def test_ring_uniform_matrix_is_the_third_circulant(n):
    expected = np.zeros((n, n))
    for i in range(n):
        expected[i, [(i - 1) % n, i, (i + 1) % n]] = 1 / 3
    for kind in MIXINGS:  # a regular graph: both kinds, bit for bit
        np.testing.assert_array_equal(mixing_matrix(make_graph("ring", n), kind), expected)


@pytest.mark.parametrize("n", range(3, 61))
def test_ring_gap_closed_form(n):
    expected = 1 - (1 + 2 * math.cos(2 * math.pi / n)) / 3
    assert spectral_gap(mixing_matrix(make_graph("ring", n))) == pytest.approx(expected, abs=1e-12)


def test_two_node_ring():
    np.testing.assert_array_equal(mixing_matrix(make_graph("ring", 2)), np.full((2, 2), 0.5))


@pytest.mark.parametrize("n", range(1, 20))
def test_complete_graph_is_exact_averaging(n):
    for kind in MIXINGS:
        W = mixing_matrix(make_graph("complete", n), kind)
        np.testing.assert_array_equal(W, np.full((n, n), 1 / n))  # J/n
        assert spectral_gap(W) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("k", range(1, 7))
def test_hypercube_gap(k):
    # W = (I + A)/(k + 1); A has eigenvalues k - 2j, so |λ2| = (k - 1)/(k + 1).
    for kind in MIXINGS:
        gap = spectral_gap(mixing_matrix(make_graph("hypercube", 2**k), kind))
        assert gap == pytest.approx(2 / (k + 1), abs=1e-12)


@pytest.mark.parametrize(("n", "rows", "cols"), [(9, 3, 3), (12, 3, 4), (16, 4, 4), (30, 5, 6)])
def test_torus_gap(n, rows, cols):
    # W = (I + A)/5, A = cycle(r) ⊕ cycle(c): eigenvalues (1 + 2cos(2πa/r) + 2cos(2πb/c)) / 5.
    a, b = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    eig = (1 + 2 * np.cos(2 * np.pi * a / rows) + 2 * np.cos(2 * np.pi * b / cols)) / 5
    expected = 1 - np.sort(np.abs(eig).ravel())[-2]
    assert spectral_gap(mixing_matrix(make_graph("torus", n))) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("n", range(3, 20))
def test_star_weights_and_gap(n):
    # Uniform (max-degree n-1) and Metropolis agree on a star: hub row 1/n, leaves keep 1 - 1/n;
    # eigenvalues 1, 1 - 1/n (n-2 times), 0, so the gap is 1/n.
    expected = np.diag(np.full(n, (n - 1) / n))  # the nearest floats to the exact weights
    expected[0, :] = expected[:, 0] = 1 / n
    for kind in MIXINGS:
        W = mixing_matrix(make_graph("star", n), kind)
        np.testing.assert_array_equal(W, expected)
        assert spectral_gap(W) == pytest.approx(1 / n, abs=1e-12)


def test_metropolis_differs_from_uniform_on_irregular_graphs():
    G = nx.path_graph(4)  # degrees 1, 2, 2, 1
    uniform, metropolis = mixing_matrix(G, "uniform"), mixing_matrix(G, "metropolis")
    np.testing.assert_allclose(
        uniform * 3, [[2, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 2]], atol=1e-15
    )
    np.testing.assert_allclose(metropolis * 3, uniform * 3, atol=1e-15)  # d_max = every max
    G = nx.Graph([(0, 1), (0, 2), (0, 3), (3, 4)])  # degrees 3, 1, 1, 2, 1
    metropolis = mixing_matrix(G, "metropolis")
    assert metropolis[3, 4] == 1 / 3 and metropolis[0, 3] == 1 / 4 and metropolis[4, 4] == 2 / 3
    assert metropolis[3, 3] == 5 / 12 != 1 - 1 / 3 - 1 / 4  # exact, not 1 - sum in floats
    assert mixing_matrix(G, "uniform")[3, 4] == 1 / 4


# ---- consensus: the gap predicts the speed ------------------------------------------------------


def small_world(n):
    """A connected irregular graph, on which the two kinds of weights differ."""
    return nx.connected_watts_strogatz_graph(n, 4, 0.3, seed=1)


@pytest.mark.parametrize("kind", MIXINGS)
@pytest.mark.parametrize(
    ("name", "n"),
    [
        ("ring", 16),
        ("ring", 11),
        ("torus", 16),
        ("torus", 15),
        ("hypercube", 16),
        ("hypercube", 64),
        ("exponential", 16),
        ("exponential", 12),
        ("star", 10),
        ("small-world", 20),
    ],
)
def test_consensus_contracts_at_the_predicted_rate(name, n, kind):
    G = small_world(n) if name == "small-world" else make_graph(name, n)
    W = mixing_matrix(G, kind)
    lam = 1 - spectral_gap(W)
    rounds = math.ceil(math.log(1e-9) / math.log(lam))  # until the spread is ~1e-9 of the start
    burn_in = rounds // 4
    x = np.random.default_rng(n).standard_normal((n, 3))
    mean = x.mean(axis=0)
    spread = [np.linalg.norm(x - x.mean(axis=0))]
    for _ in range(rounds):
        x = W @ x
        spread.append(np.linalg.norm(x - x.mean(axis=0)))
    spread = np.array(spread)
    floor = 1e-14 * spread[0]  # rounding in W @ x, mean and norm
    assert np.all(spread[1:] <= lam * spread[:-1] + floor)  # the per-round bound, every round
    measured = (spread[-1] / spread[burn_in]) ** (1 / (rounds - burn_in))
    assert abs(measured - lam) <= 0.1 * lam
    np.testing.assert_allclose(x.mean(axis=0), mean, rtol=0, atol=1e-12)


# ---- schedules -----------------------------------------------------------------------------------


@st.composite
def schedules(draw):
    kind = draw(st.sampled_from(MIXINGS))
    name = draw(st.sampled_from([*FIXED, "random-regular:3", "rotating"]))
    if name == "torus":
        n = draw(st.sampled_from([9, 12, 15, 16, 20]))
    elif name == "hypercube":
        n = 2 ** draw(st.integers(0, 5))
    elif name == "random-regular:3":
        n = draw(st.sampled_from([4, 6, 8, 10]))
        seed = next(s for s in range(100) if nx.is_connected(nx.random_regular_graph(3, n, s)))
        return make_schedule(name, n, kind, seed=seed)
    else:
        n = draw(st.integers(2 if name == "ring" else 1, 24))
    return make_schedule(name, n, kind)


@settings(max_examples=100, deadline=None)
@given(schedule=schedules(), t=st.integers(0, 1000))
def test_weights_are_the_matrix_entries_bit_for_bit(schedule, t):
    assert isinstance(schedule, Schedule)
    W = schedule.matrix(t)
    G = schedule.graph(t)
    for rank in range(schedule.n):
        peers = schedule.neighbours(rank, t)
        assert list(peers) == sorted(G[rank])  # increasing peer order
        assert all(type(w) is float for w in peers.values())
        assert all(W[rank, j] == w for j, w in peers.items())  # exact, not approx
        assert W[rank, rank] == schedule.self_weight(rank, t)
        assert np.count_nonzero(W[rank]) == len(peers) + 1
    np.testing.assert_array_equal(W, mixing_matrix(G, schedule.mixing))
    assert schedule.spectral_gap(t) == spectral_gap(W)


@pytest.mark.parametrize("name", [*FIXED, "random-regular:4"])
def test_fixed_schedules(name):
    n = 16
    for kind in MIXINGS:
        schedule = make_schedule(name, n, kind)
        assert (schedule.name, schedule.n, schedule.mixing) == (name, n, kind)
        assert schedule.static and schedule.period == 1
        W = schedule.matrix(0)
        assert W is schedule.matrix(7) and not W.flags.writeable  # cached, read-only
        np.testing.assert_array_equal(W, mixing_matrix(make_graph(name, n), kind))
        assert edge_set(schedule.graph(3)) == edge_set(make_graph(name, n))
        assert nx.is_frozen(schedule.graph(0))


@pytest.mark.parametrize("n", range(1, 26))
def test_rotating_offsets_cycle(n):
    schedule = make_schedule("rotating", n)
    half = n // 2
    assert schedule.period == max(1, half) and schedule.static == (n <= 3)
    for t in range(3 * schedule.period + 1):
        s = 1 + t % half if n > 1 else 0
        for rank in range(n):
            peers = schedule.neighbours(rank, t)
            if n == 1:
                assert peers == {} and schedule.self_weight(rank, t) == 1.0
            elif 2 * s == n:
                assert peers == {(rank + s) % n: 0.5} and schedule.self_weight(rank, t) == 0.5
            else:
                assert peers == {(rank + s) % n: 1 / 3, (rank - s) % n: 1 / 3}
                assert schedule.self_weight(rank, t) == 1 / 3
        np.testing.assert_array_equal(schedule.matrix(t), schedule.matrix(t + schedule.period))


@pytest.mark.parametrize("n", range(2, 31))
def test_rotating_rounds_mix_and_a_cycle_contracts(n):
    schedule = make_schedule("rotating", n)
    product = np.eye(n)
    for t in range(schedule.period):
        W = schedule.matrix(t)
        np.testing.assert_array_equal(W, W.T)
        np.testing.assert_allclose(W.sum(axis=0), 1, rtol=0, atol=1e-12)
        np.testing.assert_allclose(W.sum(axis=1), 1, rtol=0, atol=1e-12)
        assert W.min() >= 0
        for kind in MIXINGS:  # each round is a regular graph: both kinds agree
            np.testing.assert_array_equal(W, mixing_matrix(schedule.graph(t), kind))
        product = W @ product
    assert spectral_gap(product) > 1e-3


def test_a_rotating_round_alone_may_not_mix():
    schedule = make_schedule("rotating", 8)  # offset 2 splits 0..7 into two 4-cycles
    assert nx.number_connected_components(schedule.graph(1)) == 2
    assert abs(schedule.spectral_gap(1)) < 1e-12
    assert schedule.spectral_gap(0) == pytest.approx(
        1 - (1 + 2 * math.cos(math.pi / 4)) / 3, abs=1e-12
    )


# ---- files ---------------------------------------------------------------------------------------


def test_edge_list_file(tmp_path):
    path = tmp_path / "ring6.edges"
    path.write_text(
        "# a ring of six ranks\n\n0 1\n1 2   # trailing comment\n2\t3\n3 4\n4 5\n5 0\n1 0\n"
    )  # 1 0 repeats 0 1: one link
    for name in (path, str(path)):
        G = make_graph(name, 6)
        assert list(G) == list(range(6)) and edge_set(G) == edge_set(nx.cycle_graph(6))
    schedule = make_schedule(str(path), 6)
    assert schedule.name == str(path)
    np.testing.assert_array_equal(schedule.matrix(0), mixing_matrix(make_graph("ring", 6)))


@pytest.mark.parametrize("suffix", [".graphml", ".xml", ".GraphML"])
def test_graphml_file(tmp_path, suffix):
    path = tmp_path / f"cube{suffix}"
    nx.write_graphml(make_graph("hypercube", 8), path)
    assert edge_set(make_graph(path, 8)) == edge_set(make_graph("hypercube", 8))


def test_directed_graphml_reads_as_undirected(tmp_path):
    path = tmp_path / "directed.graphml"
    nx.write_graphml(nx.MultiDiGraph([(0, 1), (1, 0), (1, 0), (1, 2), (3, 2), (3, 0)]), path)
    G = make_graph(path, 4)
    assert type(G) is nx.Graph and edge_set(G) == edge_set(nx.cycle_graph(4))


GRAPHML_HEAD = '<?xml version="1.0"?>\n<graphml xmlns="http://graphml.graphdrawing.org/xmlns">\n'


@pytest.mark.parametrize(
    ("filename", "text", "n", "fragments"),
    [
        ("bad.txt", "0 1\n1 x\n", 2, [":2: expected two integer node labels 'u v', got '1 x'"]),
        ("bad.txt", "# header\n0 1 2\n", 3, [":2: expected two integer node labels"]),
        ("bad.txt", "0 1\n1 1.0\n", 2, [":2: expected two integer"]),
        ("loop.txt", "0 1\n1 1\n", 2, [":2: self-loop 1 1"]),
        ("split.txt", "0 1\n2 3\n", 4, [" is disconnected: 2 components"]),
        ("labels.txt", "1 2\n2 3\n3 1\n", 3, [": node labels must be 0..2, got 3"]),
        ("labels.txt", "0 1\n1 -1\n", 3, [": node labels must be 0..2, got -1"]),
        ("count.txt", "0 1\n1 2\n2 3\n3 0\n", 5, [" has 4 nodes, expected n = 5"]),
        ("count.txt", "0 1\n1 2\n2 3\n3 0\n", 3, [" has 4 nodes, expected n = 3"]),
        ("empty.txt", "# nothing\n", 2, [" has 0 nodes, expected n = 2"]),
        (
            "ids.graphml",
            GRAPHML_HEAD + '<graph edgedefault="undirected"><node id="n0"/>'
            '<node id="n1"/><edge source="n0" target="n1"/></graph></graphml>\n',
            2,
            [": node id 'n0' is not an integer"],
        ),
        (
            "lone.graphml",
            GRAPHML_HEAD + '<graph edgedefault="undirected"><node id="0"/>'
            '<node id="1"/><node id="2"/><edge source="0" target="1"/></graph></graphml>\n',
            3,
            [" is disconnected: 2 components"],
        ),
        (
            "cut.graphml",
            GRAPHML_HEAD + '<graph edgedefault="undirected">\n<node id="0"/>\n',
            1,
            [":5: not valid XML (no element found"],
        ),
        ("other.xml", '<?xml version="1.0"?>\n<html/>\n', 1, [": not a GraphML graph"]),
    ],
)
def test_bad_files(tmp_path, filename, text, n, fragments):
    path = tmp_path / filename
    path.write_text(text)
    message = assert_one_line_error(lambda: make_graph(path, n), f"topology {path}", *fragments)
    assert message == assert_one_line_error(lambda: make_schedule(str(path), n))


def test_unreadable_and_missing_files(tmp_path):
    path = tmp_path / "binary.txt"
    path.write_bytes(b"0 1\n\xff\xfe\n")
    assert_one_line_error(lambda: make_graph(path, 2), f"topology {path}: cannot read the file")
    missing = tmp_path / "nope.txt"
    assert_one_line_error(
        lambda: make_graph(missing, 2), f"unknown topology '{missing}'", "nor an existing file"
    )
    assert_one_line_error(lambda: make_graph(tmp_path, 2), "nor an existing file")


def test_error_messages_fold_to_one_line():
    assert str(TopologyError("a\nb")) == "a b" and issubclass(TopologyError, ValueError)
