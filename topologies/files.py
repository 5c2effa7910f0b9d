"""Reading a topology from a file: an edge list (``u v`` per line) or GraphML.

A topology file describes which ranks talk to each other: node ``i`` is MPI rank ``i``, so its
nodes must be exactly the integers ``0 .. n-1``. Every problem is reported as a one-line
`TopologyError` that names the file (and, for an edge list, the line).
"""

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import networkx as nx

from topologies.errors import TopologyError

GRAPHML_SUFFIXES = (".graphml", ".xml")

_EDGE_LABEL = re.compile(r"[+-]?[0-9]+")  # what an edge list may hold; range checked later
_GRAPHML_ID = re.compile(r"0|[1-9][0-9]*")  # canonical, so "3" and "03" cannot both be node 3


def read_graph_file(path, n):
    """The undirected graph stored in ``path``, checked to have nodes exactly ``0 .. n-1``.

    Parameters
    ----------
    path : str or os.PathLike
        A GraphML file if the name ends in ``.graphml`` or ``.xml`` (any case), otherwise an edge
        list: one edge ``u v`` per line (two integers separated by white space), ``#`` starts a
        comment, blank lines are skipped. ``networkx.write_edgelist(G, path, data=False)`` and
        ``networkx.write_graphml(G, path)`` write files this reads.
    n : int
        The number of ranks; the file's nodes must be ``0 .. n-1``.

    Returns
    -------
    G : networkx.Graph
        Undirected and simple. A directed GraphML graph is read as undirected (a link ``u -> v``
        lets u and v talk) and parallel edges are merged. Connectivity is not checked here
        (`make_graph` does it).

    Raises
    ------
    TopologyError
        The file cannot be read; an edge-list line is not two integers or is a self-loop (the
        message gives the line number); the GraphML does not parse, or a node id is not a
        non-negative integer written without leading zeros; the graph has a self-loop; the file
        has a number of nodes other than ``n``; its node labels are not ``0 .. n-1``.

    Notes
    -----
    An edge list names only nodes that have an edge, so it cannot describe a lone node; use GraphML
    for that (a graph with a lone node and n > 1 is disconnected anyway).

    Examples
    --------
    >>> import pathlib, tempfile
    >>> tmp = tempfile.TemporaryDirectory()
    >>> path = pathlib.Path(tmp.name, "square.txt")
    >>> _ = path.write_text("# a 4-cycle\\n0 1\\n1 2\\n2 3\\n3 0\\n")
    >>> sorted(read_graph_file(path, 4).edges)
    [(0, 1), (0, 3), (1, 2), (2, 3)]
    >>> read_graph_file(path, 5)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    topologies.errors.TopologyError: topology ...square.txt has 4 nodes, expected n = 5
    >>> tmp.cleanup()
    """
    path = Path(path)
    graphml = path.suffix.lower() in GRAPHML_SUFFIXES
    G = _read_graphml(path) if graphml else _read_edgelist(path)
    _check_nodes(G, n, path)
    return G


def _read_edgelist(path):
    G = nx.Graph()
    for lineno, line in enumerate(_read_text(path).splitlines(), start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        fields = text.split()
        if len(fields) != 2 or not all(_EDGE_LABEL.fullmatch(f) for f in fields):
            raise TopologyError(
                f"topology {path}:{lineno}: expected two integer node labels 'u v', got {text!r}"
            )
        u, v = int(fields[0]), int(fields[1])
        if u == v:
            raise TopologyError(
                f"topology {path}:{lineno}: self-loop {u} {v} (a rank does not gossip with itself)"
            )
        G.add_edge(u, v)
    return G


def _read_text(path):
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise TopologyError(f"topology {path}: cannot read the file ({err})") from err


def _read_graphml(path):
    try:
        H = nx.read_graphml(path)
    except ET.ParseError as err:
        line, _ = err.position
        raise TopologyError(f"topology {path}:{line}: not valid XML ({err})") from err
    except OSError as err:
        raise TopologyError(f"topology {path}: cannot read the file ({err})") from err
    except (nx.NetworkXError, ValueError, KeyError) as err:
        raise TopologyError(f"topology {path}: not a GraphML graph ({err})") from err
    bad = [v for v in H if not _GRAPHML_ID.fullmatch(str(v))]
    if bad:
        raise TopologyError(
            f"topology {path}: node id {bad[0]!r} is not an integer "
            "(node ids must be the integers 0..n-1)"
        )
    G = nx.relabel_nodes(nx.Graph(H.to_undirected(as_view=True)), int)
    loops = list(nx.nodes_with_selfloops(G))
    if loops:
        raise TopologyError(
            f"topology {path}: self-loop at node {loops[0]} (a rank does not gossip with itself)"
        )
    return G


def _check_nodes(G, n, path):
    if G.number_of_nodes() != n:
        raise TopologyError(f"topology {path} has {G.number_of_nodes()} nodes, expected n = {n}")
    outside = sorted(v for v in G if not 0 <= v < n)
    if outside:
        shown = ", ".join(map(str, outside[:3])) + (", ..." if len(outside) > 3 else "")
        raise TopologyError(f"topology {path}: node labels must be 0..{n - 1}, got {shown}")
