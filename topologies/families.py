"""The gossip topologies as networkx graphs on nodes ``0 .. n-1`` (node i is MPI rank i).

Each family is a networkx generator (relabelled to the integers where its nodes are tuples),
except the hypercube, built from its definition.
`make_graph` checks the name and size first, hands off to the family's builder (or the file
reader), then checks that the graph is connected.
"""

import math
import numbers
import os

import networkx as nx

from topologies.errors import TopologyError
from topologies.files import read_graph_file

FAMILIES = ("ring", "torus", "hypercube", "exponential", "complete", "star", "random-regular")
"""The graph families `make_graph` knows; ``random-regular`` is written ``random-regular:D``."""

_NAMES = ", ".join(FAMILIES) + ":D"


def make_graph(name, n, seed=0):
    """The connected undirected graph ``name`` on the nodes ``0 .. n-1``.

    Parameters
    ----------
    name : str or os.PathLike
        A family (every family gives the one-node graph for ``n = 1``):

        - ``"ring"``: the cycle 0-1-...-(n-1)-0, degree 2, n edges (n >= 3); ``n = 2`` is one edge.
        - ``"torus"``: the 2-D torus (wrap-around grid) of r rows and c columns, ``n = r*c`` with
          ``3 <= r <= c`` and r the largest such divisor (as square as possible: 16 is 4x4, 12 is
          3x4, 18 is 3x6); node i sits at (row, column) = ``(i // c, i % c)``; degree 4, 2n edges.
        - ``"hypercube"``: n a power of two; i and ``i ^ 2**k`` are neighbours; degree log2(n),
          ``n log2(n) / 2`` edges.
        - ``"exponential"``: i linked to ``i ± 2**k (mod n)`` for every ``2**k < n``: the
          undirected version of the exponential graph of Assran et al. (2019), "Stochastic
          Gradient Push for Distributed Deep Learning", ICML. Degree ``2 log2(n) - 1`` when n is
          a power of two (``+2**k`` and ``-2**k`` coincide for ``2**k = n/2``).
        - ``"complete"``: every pair, ``n(n-1)/2`` edges.
        - ``"star"``: node 0 is the hub, linked to every other node; n - 1 edges.
        - ``"random-regular:D"``: ``networkx.random_regular_graph(D, n, seed)``, every node of
          degree D; needs ``0 <= D < n`` and ``n*D`` even.

        Any other string, or a path, is a file read by `read_graph_file` (edge list, or GraphML
        if it ends in ``.graphml`` / ``.xml``). A family name wins over a file of the same name in
        the working directory: write ``./ring`` for the file.
    n : int
        Number of nodes (ranks), >= 1.
    seed : int, default 0
        Used by ``random-regular`` only.

    Returns
    -------
    G : networkx.Graph
        Undirected, simple, connected, with nodes exactly ``0 .. n-1`` (added in that order).

    Raises
    ------
    TopologyError
        ``n`` is not an integer >= 1; the name is neither a family nor an existing file; the family
        cannot make ``n`` nodes; D is not an integer with ``0 <= D < n`` and ``n*D`` even; the file
        is malformed or its nodes are not ``0 .. n-1`` (see `read_graph_file`); the graph is
        disconnected (a random regular graph of degree 1 or 2, or one unlucky draw of a higher
        degree: then try another seed).

    Examples
    --------
    >>> sorted(make_graph("ring", 5).edges)
    [(0, 1), (0, 4), (1, 2), (2, 3), (3, 4)]
    >>> sorted(make_graph("hypercube", 8)[0])
    [1, 2, 4]
    >>> sorted(make_graph("exponential", 8)[0])
    [1, 2, 4, 6, 7]
    >>> G = make_graph("torus", 12)            # 3 rows x 4 columns
    >>> sorted(G[5])                           # node 5 is (1, 1)
    [1, 4, 6, 9]
    >>> G.number_of_edges()
    24
    >>> make_graph("hypercube", 6)
    Traceback (most recent call last):
    ...
    topologies.errors.TopologyError: hypercube needs a power of two nodes, got 6
    >>> make_graph("random-regular:3", 7)
    Traceback (most recent call last):
    ...
    topologies.errors.TopologyError: random-regular:3 needs n*D even, got n = 7, D = 3
    """
    n = _check_n(n)
    if isinstance(name, str) and name == "rotating":
        raise TopologyError(
            "topology 'rotating' changes every round: use make_schedule, not make_graph"
        )
    if isinstance(name, str) and _family(name) is not None:
        G = _build(name, n, seed)
    elif isinstance(name, (str, os.PathLike)) and os.path.isfile(name):
        G = read_graph_file(name, n)
    else:
        raise TopologyError(
            f"unknown topology {str(name)!r}: not one of {_NAMES}, rotating, nor an existing file"
        )
    _check_connected(G, name, n, seed)
    return G


def _check_n(n):
    if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 1:
        raise TopologyError(f"the number of nodes n must be an integer >= 1, got {n!r}")
    return int(n)


def _family(name):
    family = name.split(":", 1)[0] if name.startswith("random-regular") else name
    return family if family in FAMILIES else None


def _build(name, n, seed):
    if name.startswith("random-regular"):
        return _random_regular(name, n, seed)
    if n == 1:
        return nx.empty_graph(1)
    return {
        "ring": _ring,
        "torus": _torus,
        "hypercube": _hypercube,
        "exponential": _exponential,
        "complete": nx.complete_graph,
        "star": _star,
    }[name](n)


def _ring(n):
    return nx.cycle_graph(n)  # n = 2: networkx gives the single edge 0-1


def _star(n):
    return nx.star_graph(n - 1)  # hub 0, leaves 1 .. n-1


def _torus(n):
    r = max((r for r in range(3, math.isqrt(n) + 1) if n % r == 0), default=None)
    if r is None:
        raise TopologyError(f"torus needs n = r*c with r, c >= 3, got {n}")
    c = n // r
    G = nx.grid_2d_graph(r, c, periodic=True)
    return _relabel(G, {(i // c, i % c): i for i in range(n)})


def _hypercube(n):
    if n & (n - 1):
        raise TopologyError(f"hypercube needs a power of two nodes, got {n}")
    # From the definition: nx.hypercube_graph labels nodes by bit tuples, except for dimensions
    # 0 (no node) and 1 (plain 0, 1), so relabelling it would need as many special cases.
    G = nx.empty_graph(n)
    G.add_edges_from((i, i ^ (1 << k)) for i in range(n) for k in range(n.bit_length() - 1))
    return G


def _exponential(n):
    offsets = [2**k for k in range(n.bit_length()) if 2**k < n]
    return nx.circulant_graph(n, offsets)  # i ~ i ± offset (mod n); duplicates merge


def _random_regular(name, n, seed):
    _, sep, text = name.partition(":")
    if not sep or not text.isdecimal():
        raise TopologyError(
            f"topology {name!r}: write random-regular:D with D an integer "
            "degree, e.g. random-regular:4"
        )
    degree = int(text)
    if degree >= n:
        raise TopologyError(f"{name} needs D < n, got n = {n}, D = {degree}")
    if n * degree % 2:
        raise TopologyError(f"{name} needs n*D even, got n = {n}, D = {degree}")
    G = nx.random_regular_graph(degree, n, seed=seed)
    return _relabel(G, {i: i for i in range(n)})


def _relabel(G, mapping):
    """G with node v renamed mapping[v], nodes added in the order 0 .. n-1."""
    H = nx.Graph()
    H.add_nodes_from(range(len(mapping)))
    H.add_edges_from((mapping[u], mapping[v]) for u, v in G.edges)
    return H


def _check_connected(G, name, n, seed):
    if n == 1 or nx.is_connected(G):
        return
    count = nx.number_connected_components(G)
    what = os.fspath(name)
    if isinstance(name, str) and _family(name) is not None:
        what = f"{name} (n = {n}, seed = {seed})"
    raise TopologyError(f"topology {what} is disconnected: {count} components")
