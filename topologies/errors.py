"""The one exception type of ``topologies/``: a topology that cannot be made or used."""


class TopologyError(ValueError):
    """A topology name, size, file or mixing kind that cannot be made into a gossip schedule.

    The message is one line that names the value and the rule it breaks, for example
    ``hypercube needs a power of two nodes, got 6`` or
    ``topology net.txt:3: expected two integer node labels 'u v', got '0 x'``. The command-line
    front ends turn it into exit status 2. Line breaks in the text given are replaced by spaces,
    so the one-line rule holds even when a message quotes a multi-line error from a library.

    Examples
    --------
    >>> str(TopologyError("topology g.graphml: not GraphML\\n(no <graph> element)"))
    'topology g.graphml: not GraphML (no <graph> element)'
    >>> isinstance(TopologyError("x"), ValueError)
    True
    """

    def __init__(self, message):
        super().__init__(" ".join(str(message).splitlines()))
