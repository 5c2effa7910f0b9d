"""Gossip topologies: networkx graphs, mixing matrices, time-varying schedules, spectral gaps.

Only numpy, scipy and networkx are imported here: no MPI, no simulator. Node i is MPI rank i.

Public API
----------
make_graph(name, n, seed=0) -> networkx.Graph
    ``ring | torus | hypercube | exponential | complete | star | random-regular:D | FILE``
    (edge list, or GraphML by extension); connected, nodes ``0 .. n-1``.
mixing_matrix(G, kind="uniform") -> (n, n) float64
    ``uniform`` (max-degree rule; ``1/(d+1)`` neighbour averaging on d-regular graphs) or
    ``metropolis`` (Metropolis-Hastings); symmetric, doubly stochastic, non-negative.
spectral_gap(W) -> float
    ``1 - |λ2|``; ``|λ2| = 1 - gap`` bounds the per-round consensus contraction of a symmetric W.
make_schedule(topology, n, mixing="uniform", seed=0) -> Schedule
    A family or FILE (the same matrix every round) or ``rotating`` (partners at offsets
    1, 2, ..., floor(n/2), then again). ``neighbours(rank, t) -> {peer: weight}``,
    ``self_weight(rank, t)``, ``matrix(t)``, ``spectral_gap(t=0)``, ``graph(t)``, ``name``, ``n``,
    ``mixing``, ``period``, ``static``.
TopologyError
    A ValueError with a one-line message naming the value and the rule it breaks.
TOPOLOGIES, MIXINGS
    The names ``--topology`` and ``--mixing`` accept (``random-regular`` is written
    ``random-regular:D``; any other value of ``--topology`` is a file path).

Gossip with these weights, per round: ``x_i <- self_weight(i, t) x_i + sum_j w_ij x_j`` over
``neighbours(i, t)``; the weights are bit for bit the entries of ``matrix(t)``.
"""

from topologies.errors import TopologyError
from topologies.families import FAMILIES, make_graph
from topologies.mixing import MIXINGS, mixing_matrix, spectral_gap
from topologies.schedule import Schedule, make_schedule

TOPOLOGIES = (*FAMILIES, "rotating")

__all__ = [
    "MIXINGS",
    "TOPOLOGIES",
    "Schedule",
    "TopologyError",
    "make_graph",
    "make_schedule",
    "mixing_matrix",
    "spectral_gap",
]
