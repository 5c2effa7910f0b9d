"""Who averages with whom in gossip round t, and with what weights: the node programs' `Schedule`.

A gossip node program does, in round t (t = 0, 1, ...)::

    peers = schedule.neighbours(i, t)                   # {j: w_ij}
    x_i <- schedule.self_weight(i, t) * x_i + sum(w * x_j for j, w in peers.items())

and ``schedule.matrix(t)`` is the same step for all ranks at once, ``X <- W_t X``. Both are built
from the same Python floats, so ``matrix(t)[i, j] == neighbours(i, t)[j]`` bit for bit.

Two kinds of schedule: a fixed graph with its mixing matrix (every family of `make_graph`, or a
file), the same in every round; and ``rotating``, whose partners change every round.
"""

import numbers
import os

import networkx as nx

from topologies.families import _check_n, make_graph
from topologies.mixing import _check_kind, _dense, _gap, mixing_weights


def make_schedule(topology, n, mixing="uniform", seed=0):
    """The gossip schedule of ``topology`` on ``n`` ranks.

    Parameters
    ----------
    topology : str or os.PathLike
        A family or file accepted by `make_graph` (``ring``, ``torus``, ``hypercube``,
        ``exponential``, ``complete``, ``star``, ``random-regular:D``, FILE): the same graph and
        mixing matrix in every round. Or ``"rotating"``: in round t, with
        ``s_t = 1 + (t mod floor(n/2))`` (offsets 1, 2, ..., floor(n/2), then 1 again), rank i
        averages with ``i + s_t`` and ``i - s_t (mod n)``, weight 1/3 each and 1/3 for itself;
        when the two are one rank (``s_t = n/2``, n even) weight 1/2 with it and 1/2 for itself;
        ``n = 1``: no partners, weight 1. Each round's matrix is a symmetric doubly stochastic
        circulant, and one cycle of rounds together links every rank to every other.
    n : int
        Number of ranks, >= 1.
    mixing : {"uniform", "metropolis"}, default "uniform"
        Weights of a fixed graph (see `mixing_matrix`). Each rotating round is a regular graph, on
        which both kinds give the weights above.
    seed : int, default 0
        For ``random-regular:D`` only.

    Returns
    -------
    Schedule

    Raises
    ------
    TopologyError
        ``n`` not an integer >= 1; ``mixing`` unknown; anything `make_graph` rejects (unknown
        name, an n the family cannot make, a malformed file, a disconnected graph).

    Examples
    --------
    >>> ring = make_schedule("ring", 4)
    >>> ring.neighbours(0, t=0), ring.self_weight(0, t=0)
    ({1: 0.3333333333333333, 3: 0.3333333333333333}, 0.3333333333333333)
    >>> star = make_schedule("star", 4, mixing="metropolis")
    >>> star.neighbours(1, t=0), star.self_weight(1, t=0)
    ({0: 0.25}, 0.75)
    >>> rotating = make_schedule("rotating", 8)
    >>> [list(rotating.neighbours(0, t)) for t in range(5)]
    [[1, 7], [2, 6], [3, 5], [4], [1, 7]]
    >>> rotating.neighbours(0, t=3), rotating.period, rotating.static
    ({4: 0.5}, 4, False)
    >>> make_schedule("ring", 4, mixing="max-degree")
    Traceback (most recent call last):
    ...
    topologies.errors.TopologyError: unknown mixing 'max-degree': expected uniform or metropolis
    """
    n = _check_n(n)
    _check_kind(mixing)
    if isinstance(topology, str) and topology == "rotating":
        return _RotatingSchedule(n, mixing)
    return _GraphSchedule(os.fspath(topology), make_graph(topology, n, seed), mixing)


class Schedule:
    """The rounds of gossip averaging: each rank's peers and weights in round t.

    Made by `make_schedule`. Round t uses phase ``t % period``: the rounds repeat with period
    ``period`` (1 for a fixed graph).

    Attributes
    ----------
    name : str
        The topology as given (``"ring"``, ``"random-regular:4"``, ``"rotating"``, a file path).
    n : int
        Number of ranks.
    mixing : str
        ``"uniform"`` or ``"metropolis"``.
    period : int
        Rounds before the matrices repeat: 1 for a fixed graph, ``max(1, floor(n/2))`` for
        ``rotating``.
    static : bool
        True when every round has the same matrix (``period == 1``).
    """

    def __init__(self, name, n, mixing, period):
        self.name, self.n, self.mixing, self.period = name, n, mixing, period
        self.static = period == 1
        self._matrices, self._gaps = {}, {}  # by phase; filled for static schedules only

    def __repr__(self):
        return f"Schedule({self.name!r}, n={self.n}, mixing={self.mixing!r})"

    def neighbours(self, rank, t):
        """``{peer: w_rank,peer}`` of ``rank`` in round ``t``, self excluded, peers increasing.

        A fresh dict of Python floats equal to the off-diagonal entries of row ``rank`` of
        ``matrix(t)``. Empty for a rank with no peers (n = 1).
        """
        peers, _ = self._row(self._check_rank(rank), self._phase(t))
        return dict(peers)

    def self_weight(self, rank, t):
        """``w_rank,rank`` in round ``t``: the weight of a rank's own vector, a Python float."""
        _, weight = self._row(self._check_rank(rank), self._phase(t))
        return weight

    def matrix(self, t):
        """The mixing matrix W_t of round t, (n, n) float64; read-only and cached when static."""
        phase = self._phase(t)
        if phase in self._matrices:
            return self._matrices[phase]
        rows = [self._row(rank, phase) for rank in range(self.n)]
        W = _dense(self.n, [peers for peers, _ in rows], [weight for _, weight in rows])
        if self.static:
            W.flags.writeable = False
            self._matrices[phase] = W
        return W

    def spectral_gap(self, t=0):
        """`spectral_gap` of ``matrix(t)``: 1 - the per-round consensus contraction factor.

        For ``rotating`` a single round's matrix may have gap 0 (offset s with gcd(s, n) > 1
        splits the ranks into cycles); a whole period together always contracts. Costs an
        O(n^3) eigenvalue solve, cached when static.
        """
        phase = self._phase(t)
        if phase not in self._gaps:
            gap = _gap(self.matrix(t))
            if not self.static:
                return gap
            self._gaps[phase] = gap
        return self._gaps[phase]

    def graph(self, t):
        """The (frozen) networkx graph whose edges are the peer pairs of round t."""
        return self._graph(self._phase(t))

    def _phase(self, t):
        if not isinstance(t, numbers.Integral) or isinstance(t, bool) or t < 0:
            raise ValueError(f"round t must be an integer >= 0, got {t!r}")
        return int(t) % self.period

    def _check_rank(self, rank):
        if (
            not isinstance(rank, numbers.Integral)
            or isinstance(rank, bool)
            or not 0 <= rank < self.n
        ):
            raise ValueError(f"rank must be an integer in 0..{self.n - 1}, got {rank!r}")
        return int(rank)

    def _row(self, rank, phase):
        """``(peers, self_weight)`` of rank in the given phase; implemented by subclasses."""
        raise NotImplementedError

    def _graph(self, phase):
        raise NotImplementedError


class _GraphSchedule(Schedule):
    """A fixed graph: every round averages over the same neighbours with the same weights."""

    def __init__(self, name, G, mixing):
        super().__init__(name, G.number_of_nodes(), mixing, period=1)
        self._G = nx.freeze(G)
        self._peers, self._self_weights = mixing_weights(G, mixing)

    def _row(self, rank, phase):
        return self._peers[rank], self._self_weights[rank]

    def _graph(self, phase):
        return self._G


class _RotatingSchedule(Schedule):
    """Partners at offset ``s_t = 1 + (t mod floor(n/2))`` on both sides; weights in closed form.

    The weights are the uniform (and Metropolis) weights of round t's graph, which is 2-regular,
    or 1-regular when ``s_t = n/2``: 1/3 (resp. 1/2) everywhere, the nearest floats to the exact
    values, as `mixing_matrix` gives them. Computed per call, O(1), so that nothing of size
    n x period is stored.
    """

    def __init__(self, n, mixing):
        super().__init__("rotating", n, mixing, period=max(1, n // 2))

    def _row(self, rank, phase):
        n, s = self.n, phase + 1
        if n == 1:
            return {}, 1.0
        if 2 * s == n:
            return {(rank + s) % n: 1 / 2}, 1 / 2
        return dict.fromkeys(sorted([(rank - s) % n, (rank + s) % n]), 1 / 3), 1 / 3

    def _graph(self, phase):
        G = nx.empty_graph(self.n)
        if self.n > 1:
            G.add_edges_from((i, (i + phase + 1) % self.n) for i in range(self.n))
        return nx.freeze(G)
