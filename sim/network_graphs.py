"""The physical networks ``--network`` names, as graphs: star, fat tree, torus, ring, or a file.

`physical_network` builds the networkx graph (hosts and switches), lists its hosts in rank order,
and for the regular families gives a router that computes a route from the structure (the fat
tree's two-level tables, the torus's dimension order) instead of searching the graph.
`sim.network.make_network` wraps the result into a `RoutedNetwork`.
"""

import math
import re
import xml.etree.ElementTree as ET
from functools import partial
from pathlib import Path

import networkx as nx

GRAPHML_SUFFIXES = (".graphml", ".xml")
EDGELIST_SUFFIXES = (".edgelist", ".txt")

_SPECS = "star, fat-tree:K, torus, ring or a graph file"
_HOST_NAME = re.compile(r"h([0-9]+)")  # the hosts of an edge-list file: h0, h1, ...


def physical_network(spec, n):
    """(graph, every host in rank order, router or None) for ``--network spec``."""
    if spec == "star":
        return _star(n)
    if spec == "ring":
        return _torus(1, n)
    if spec == "torus":
        return _torus(*_squarest_factors(n))
    if spec.startswith("fat-tree:"):
        return _fat_tree(_fat_tree_k(spec), n)
    path = Path(spec)
    if path.suffix.lower() in GRAPHML_SUFFIXES + EDGELIST_SUFFIXES or path.exists():
        return _read_graph_file(path, n)
    raise ValueError(f"--network: expected {_SPECS}, got {spec!r}")


def check_network_spec(spec):
    """ValueError if ``--network spec`` names no topology (`physical_network`'s message); a
    generated one's spec is checked without building it (a fat tree of 4,000 hosts takes 0.1 s),
    a graph file is read."""
    if spec in ("star", "ring", "torus"):
        return
    if spec.startswith("fat-tree:"):
        _fat_tree_k(spec)
        return
    physical_network(spec, 1)


# -- generated topologies -------------------------------------------------------------------------


def _star(n):
    graph = nx.Graph()
    graph.add_nodes_from(range(n))  # hosts before the switch: a message takes its sender's link
    graph.add_edges_from((rank, "switch") for rank in range(n))  # first, as StarNetwork does
    return graph, list(range(n)), _star_route


def _star_route(u, v):
    """Through the switch (a search from it would look at every host: O(n) a route)."""
    return [u] if u == v else [u, "switch", v]


def _squarest_factors(n):
    """(a, b) with ``a * b = n``, ``a <= b`` and a as large as possible: 12 -> (3, 4)."""
    a = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    return a, n // a


def _torus(rows, cols):
    """A rows x cols torus of hosts 0 .. n-1 (row-major); 1 x n is a ring, 2 x b merges wraps."""
    n = rows * cols
    graph = nx.Graph()
    graph.add_nodes_from(range(n))
    for rank in range(n):
        row, col = divmod(rank, cols)
        for neighbour in (row * cols + (col + 1) % cols, (row + 1) % rows * cols + col):
            if neighbour != rank:
                graph.add_edge(rank, neighbour)
    return graph, list(range(n)), partial(_dimension_order_route, cols=cols, rows=rows)


def _dimension_order_route(u, v, *, rows, cols):
    """Hosts from u to v: along u's row to v's column, then along that column to v."""
    (row, col), (to_row, to_col) = divmod(u, cols), divmod(v, cols)
    path = [u]
    for step in _ring_steps(col, to_col, cols):
        col = (col + step) % cols
        path.append(row * cols + col)
    for step in _ring_steps(row, to_row, rows):
        row = (row + step) % rows
        path.append(row * cols + col)
    return path


def _ring_steps(a, b, size):
    """The steps (+1 or -1) from a to b on a ring of ``size`` the short way (+1 on a tie)."""
    forward = (b - a) % size
    return [1] * forward if forward <= size - forward else [-1] * (size - forward)


def _fat_tree_k(spec):
    text = spec.partition(":")[2]
    if not re.fullmatch(r"[0-9]+", text) or int(text) < 2 or int(text) % 2:
        raise ValueError(f"--network fat-tree:K needs an even K >= 2, got {spec!r}")
    return int(text)


def _fat_tree(k, n):
    """The k-ary fat tree: hosts ("host", pod, edge, i), switches ("edge", pod, e),
    ("agg", pod, a) and ("core", a, c); aggregation switch a of every pod links to core (a, c)."""
    if n > k**3 // 4:
        raise ValueError(f"--network fat-tree:{k} holds {k**3 // 4} hosts, got n = {n}")
    half = k // 2
    hosts = [("host", pod, e, i) for pod in range(k) for e in range(half) for i in range(half)]
    graph = nx.Graph()
    graph.add_nodes_from(hosts)
    graph.add_edges_from((host, ("edge", *host[1:3])) for host in hosts)
    for pod in range(k):
        graph.add_edges_from(
            (("edge", pod, e), ("agg", pod, a)) for e in range(half) for a in range(half)
        )
        graph.add_edges_from(
            (("agg", pod, a), ("core", a, c)) for a in range(half) for c in range(half)
        )
    return graph, hosts, partial(_two_level_route, half=half)


def _two_level_route(u, v, *, half):
    """Al-Fares et al.'s two-level routing: going up, edge switch e takes aggregation switch
    ``(i + e) mod k/2`` and aggregation switch a takes core ``(a, (i + a) mod k/2)``, where i is
    v's index under its edge switch; going down there is one way."""
    (_, pod, e, _), (_, to_pod, to_e, i) = u, v
    if u == v:
        return [u]
    up, down = ("edge", pod, e), ("edge", to_pod, to_e)
    if up == down:
        return [u, up, v]
    a = (i + e) % half
    if pod == to_pod:
        return [u, up, ("agg", pod, a), down, v]
    return [u, up, ("agg", pod, a), ("core", a, (i + a) % half), ("agg", to_pod, a), down, v]


# -- graph files ----------------------------------------------------------------------------------


def _read_graph_file(path, n):
    """(graph, hosts in rank order, None) from a GraphML or edge-list file; checked for n."""
    graphml = path.suffix.lower() in GRAPHML_SUFFIXES
    graph = _parse_graph_file(path, graphml)
    graph.remove_edges_from(list(nx.selfloop_edges(graph)))
    if graphml:
        hosts = [v for v, is_host in graph.nodes(data="host") if _is_true(is_host)]
        how = "nodes with attribute host=true"
    else:
        hosts = [v for v in graph if _HOST_NAME.fullmatch(str(v))]
        how = "nodes named h0, h1, ..."
    hosts.sort(key=_natural_key)
    if len(hosts) < n:
        raise ValueError(f"--network {path}: has {len(hosts)} hosts ({how}), need n = {n}")
    _read_bandwidths(graph, path)
    if not nx.is_connected(graph):
        raise ValueError(
            f"--network {path}: the graph is disconnected "
            f"({nx.number_connected_components(graph)} components)"
        )
    return graph, hosts, None


def _parse_graph_file(path, graphml):
    """The file's graph as a simple undirected networkx.Graph; ValueError naming the file."""
    try:
        graph = nx.read_graphml(path) if graphml else nx.read_edgelist(path, nodetype=str)
    except OSError as err:
        raise ValueError(f"--network {path}: cannot read the file ({err.strerror or err})") from err
    except (ET.ParseError, nx.NetworkXError, TypeError, ValueError, KeyError, SyntaxError) as err:
        kind = "GraphML graph" if graphml else "edge list ('u v' or 'u v {...}' per line)"
        raise ValueError(f"--network {path}: not a valid {kind} ({err})") from err
    return nx.Graph(graph.to_undirected(as_view=True))


def _read_bandwidths(graph, path):
    """Turn each link's ``bandwidth_Bps`` attribute into a float > 0, or say where it is not."""
    for u, v, link_Bps in graph.edges(data="bandwidth_Bps"):
        if link_Bps is None:
            continue
        try:
            value = float(link_Bps)
        except (TypeError, ValueError):
            value = math.nan
        if not 0 < value < math.inf:
            raise ValueError(
                f"--network {path}: bandwidth_Bps of link {u}-{v} must be a number "
                f"> 0, got {link_Bps!r}"
            )
        graph.edges[u, v]["bandwidth_Bps"] = value


def _is_true(value):
    return value is True or str(value).strip().lower() in ("true", "1")


def _natural_key(node):
    """Sort key: digit runs compare as numbers, so h2 comes before h10."""
    parts = re.split(r"([0-9]+)", str(node))
    return [int(part) if i % 2 else part for i, part in enumerate(parts)]
