"""Mixing matrices for gossip averaging, and the spectral gap that sets how fast they mix.

One gossip round replaces each node's vector by a weighted average of its own and its
neighbours': ``x_i <- w_ii x_i + sum_{j in N(i)} w_ij x_j``, i.e. ``X <- W X`` for the stacked
``X : (n, d)``. W is symmetric, doubly stochastic and non-negative, so the average of the rows is
kept and (on a connected graph) every row converges to it.

Every weight is the float nearest its exact rational value (``w_ii`` is computed exactly with
`fractions.Fraction`, not as ``1 - sum`` in floating point). So the ring's matrix holds exactly
``1/3``, the complete graph's exactly ``1/n``, and the two kinds agree bit for bit on regular
graphs.
"""

from collections import Counter
from fractions import Fraction

import networkx as nx
import numpy as np

from topologies.errors import TopologyError

MIXINGS = ("uniform", "metropolis")


def mixing_matrix(G, kind="uniform"):
    """The gossip mixing matrix W of the graph G.

    Parameters
    ----------
    G : networkx.Graph
        Undirected, simple, nodes exactly ``0 .. n-1``, n >= 1. Need not be connected.
    kind : {"uniform", "metropolis"}, default "uniform"
        ``"uniform"``: the max-degree rule, ``w_ij = 1/(d_max + 1)`` for every edge and
        ``w_ii = 1 - deg(i)/(d_max + 1)``. On a d-regular graph this is plain neighbour
        averaging, ``1/(d + 1)`` on ``N(i) ∪ {i}`` (the ring's 1/3 matrix). The tempting
        ``1/(deg(i) + 1)`` per row is not symmetric on irregular graphs (it would not keep the
        average), hence d_max: low-degree nodes keep more of their own value instead.
        ``"metropolis"``: Metropolis-Hastings weights ``w_ij = 1/(1 + max(deg(i), deg(j)))`` on
        edges, ``w_ii = 1 - sum_j w_ij`` (Xiao & Boyd 2004, "Fast linear iterations for
        distributed averaging"); often mixes faster than uniform on irregular graphs, equal to it
        on regular ones.

    Returns
    -------
    W : (n, n) float64
        Symmetric, rows and columns sum to 1 (to rounding), entries in [0, 1], ``w_ij > 0``
        exactly on the edges and the diagonal (``w_ii >= 1/(d_max + 1) > 0``).

    Raises
    ------
    TopologyError
        ``kind`` unknown; G directed, a multigraph, with a self-loop, empty, or with nodes other
        than ``0 .. n-1``.

    Examples
    --------
    >>> W = mixing_matrix(nx.cycle_graph(4))
    >>> W * 3
    array([[1., 1., 0., 1.],
           [1., 1., 1., 0.],
           [0., 1., 1., 1.],
           [1., 0., 1., 1.]])
    >>> W = mixing_matrix(nx.path_graph(3), "metropolis")      # degrees 1, 2, 1
    >>> W * 6
    array([[4., 2., 0.],
           [2., 2., 2.],
           [0., 2., 4.]])
    >>> mixing_matrix(nx.path_graph(3), "uniform") * 3
    array([[2., 1., 0.],
           [1., 1., 1.],
           [0., 1., 2.]])
    """
    _check_kind(kind)
    n = _check_graph(G)
    peers, self_weights = mixing_weights(G, kind)
    return _dense(n, peers, self_weights)


def mixing_weights(G, kind):
    """Each node's row of W, sparse: ``(peers, self_weights)``, unchecked inputs.

    ``peers[i]`` is ``{j: w_ij}`` over the neighbours j of i in increasing order, and
    ``self_weights[i]`` is ``w_ii``; both hold Python floats. `mixing_matrix` and the schedules
    build from these same floats, so a gossip step over a node's peers uses exactly the matrix
    entries.
    """
    degree = dict(G.degree())
    d_max = max(degree.values(), default=0)
    peers, self_weights = [], []
    for i in range(G.number_of_nodes()):
        neighbours = sorted(G[i])
        if kind == "uniform":
            peers.append(dict.fromkeys(neighbours, 1 / (d_max + 1)))
            self_weights.append((d_max + 1 - degree[i]) / (d_max + 1))  # exact ints, one rounding
        else:
            bigger = [max(degree[i], degree[j]) for j in neighbours]
            peers.append({j: 1 / (1 + m) for j, m in zip(neighbours, bigger, strict=True)})
            exact = 1 - sum(Fraction(count, 1 + m) for m, count in Counter(bigger).items())
            self_weights.append(float(exact))
    return peers, self_weights


def _dense(n, peers, self_weights):
    W = np.zeros((n, n), dtype=np.float64)
    for i, row in enumerate(peers):
        W[i, list(row)] = list(row.values())
    W[np.arange(n), np.arange(n)] = self_weights
    return W


def spectral_gap(W):
    """``1 - |λ2|``, where ``|λ2|`` is the second largest eigenvalue modulus of W.

    Parameters
    ----------
    W : (n, n) array_like of float
        Doubly stochastic (a mixing matrix, or a product of mixing matrices), n >= 1.

    Returns
    -------
    gap : float
        In [0, 1] up to rounding. For symmetric W (eigenvalues by `scipy.linalg.eigvalsh`) it
        gives the consensus contraction per round: for ``x : (n, d)`` and x̄ the matrix whose
        rows are all the mean row of x, ``||W x - x̄|| <= λ ||x - x̄||`` with ``λ = |λ2| = 1 - gap``
        (the Frobenius norm; equality for the slowest eigenvector). After t rounds the
        disagreement has shrunk by at least ``λ^t``: about ``log(1/ε) / gap`` rounds to shrink it
        by ε when the gap is small. For non-symmetric W (eigenvalues by `scipy.linalg.eigvals`)
        λ is the asymptotic rate only. ``gap > 0`` exactly when repeated averaging reaches
        consensus: for a mixing matrix, when the graph is connected; a disconnected graph gives
        0 to rounding (about 1e-15). The one-node matrix has gap 1 (nothing to agree on).

    Raises
    ------
    TopologyError
        W not square and two-dimensional, not finite, or not doubly stochastic (rows and columns
        summing to 1 within 1e-9).

    Examples
    --------
    >>> from topologies.families import make_graph
    >>> round(spectral_gap(mixing_matrix(make_graph("ring", 8))), 6)    # 1 - (1 + 2 cos(π/4))/3
    0.195262
    >>> round(spectral_gap(mixing_matrix(make_graph("complete", 5))), 12)   # W = J/n, λ2 = 0
    1.0
    >>> two_rings = nx.disjoint_union(nx.cycle_graph(3), nx.cycle_graph(3))
    >>> abs(spectral_gap(mixing_matrix(two_rings))) < 1e-12
    True
    """
    W = np.asarray(W, dtype=np.float64)
    if W.ndim != 2 or W.shape[0] != W.shape[1] or W.shape[0] == 0:
        raise TopologyError(f"W must be a non-empty square matrix, got shape {W.shape}")
    if not np.all(np.isfinite(W)):
        raise TopologyError("W must be finite, got NaN or infinity")
    worst = max(np.abs(W.sum(axis=0) - 1).max(), np.abs(W.sum(axis=1) - 1).max())
    if worst > 1e-9:
        raise TopologyError(
            f"W must be doubly stochastic (rows and columns summing to 1 within "
            f"1e-9), a sum is off by {worst:.3g}"
        )
    return _gap(W)


def _gap(W):
    import scipy.linalg  # here, not at the top: it is 0.3 s of every run's start-up, and only
    # the spectral gap needs it

    if W.shape[0] == 1:
        return 1.0
    if np.array_equal(W, W.T):
        moduli = np.abs(scipy.linalg.eigvalsh(W))
    else:
        moduli = np.abs(scipy.linalg.eigvals(W))
    return float(1 - np.sort(moduli)[-2])


def _check_kind(kind):
    if kind not in MIXINGS:
        raise TopologyError(f"unknown mixing {kind!r}: expected uniform or metropolis")


def _check_graph(G):
    if not isinstance(G, nx.Graph) or G.is_directed() or G.is_multigraph():
        raise TopologyError(
            f"G must be an undirected simple networkx.Graph, got {type(G).__name__}"
        )
    n = G.number_of_nodes()
    if n == 0:
        raise TopologyError("G must have at least one node, got none")
    if set(G) != set(range(n)):
        wrong = sorted((v for v in G if v not in range(n)), key=repr)[:3]
        raise TopologyError(f"G's nodes must be 0..{n - 1}, got {', '.join(map(repr, wrong))}")
    loops = list(nx.nodes_with_selfloops(G))
    if loops:
        raise TopologyError(
            f"G has a self-loop at node {loops[0]}: mixing weights need simple graphs"
        )
    return n
