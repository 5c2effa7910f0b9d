"""Multi-hop networks for the simulator: hosts and switches joined by full-duplex links.

Theory of operation: a network is a networkx graph whose nodes are hosts (one per rank) and
switches. Every edge is a full-duplex link: one FIFO `Link` per direction (what a
``simpy.Resource(capacity=1)`` would be, without its events), made when a route first uses it.
A message from rank ``source`` to rank ``dest`` follows one fixed route (computed on first use,
then cached for the pair) and is pipelined over it (cut-through): it takes the route's links one
at a time *in one global order of links*, holds all of them while its ``nbytes / min(bandwidth
on the route)`` seconds of bytes flow, gives them back, and lands in dest's mailbox the route's
latency later. Taking the links in a global order rather than along the route is what keeps
cyclic traffic on rings and tori from deadlocking: a transfer only ever waits for a link later in
the order than every link it holds, so no cycle of waiting transfers can form (ordered resource
acquisition, Havender 1968).

Hosts of many ranks: ranks are placed on hosts (``hosts[rank]`` may repeat). Two ranks of one
host talk through its memory: a message takes the host's `MemoryPath` (one of its channels, FIFO:
concurrent copies share the host's memory bandwidth) and never a link. A message between hosts
takes the sender's host's links, so the ranks of a host share its NIC (a host's links may be
faster than the switches' links: several rails), then crosses the network as before.

Latency counts per hop, and a hop is a switch passed through or a direct host-to-host link: a
route costs ``latency_s * (switches on it + host-to-host links on it)``. On a star, where every
route is host, switch, host, ``latency_s`` is then the node-to-node alpha and n bytes between
idle nodes take ``alpha + n/beta``: the alpha-beta (Hockney) model of the literature's formulas.
On a ring or a torus (hosts only) each link costs alpha; on a fat tree a route costs 1, 3 or 5
alpha (same edge switch, same pod, through the core). Put another way: a link costs alpha, except
a host's link to a switch, which costs half of it.

The clock is read as ``env._now``, SimPy 4's attribute behind its ``now`` property, here and in
`sim.backend`: a message's path reads it eight times, and the property's Python call was 3.8 %
of a ping-pong message's instructions (2026-12-03).
"""

import itertools
import math
import os
from collections import Counter, deque, namedtuple
from dataclasses import dataclass
from functools import partial
from heapq import heappush

import networkx as nx
from simpy.events import NORMAL, Event, Timeout

from sim.fairshare import FluidStar
from sim.network_graphs import physical_network
from twinsgd.programs.ops import ANY_SOURCE

_DROPPED = object()  # what an interrupted transfer leaves in its place in the order of its pair


_Arrived = namedtuple("_Arrived", "value")  # what `_deliver` reads of an arrival's timeout


@dataclass(slots=True)
class Message(Timeout):
    """What lands in a mailbox: sender, tag, payload, and when its bytes began to move.

    ``started`` is in simulated seconds, taken after the transfer queued for its links.
    ``taken``: an event the receiver triggers when it takes the message (a rendezvous send
    waits for it), or None.

    A message is the SimPy timeout of its own arrival where its transfer schedules it so (the
    message path: one object a message, not two, and its callback `Mailbox.put` itself, no
    call between); made as a record (``Message(...)``), it is not scheduled.
    """

    source: int
    tag: int
    payload: object
    started: float
    taken: object = None


@dataclass(frozen=True, slots=True)
class Route:
    """The fixed path of one (source, dest) pair and what it costs.

    ``nodes``: the graph nodes from the source's host to the dest's host, both included.
    ``links``: the route's `Link` objects, one per direction used, in the global order a
    transfer takes them (not the order along the route).
    ``latency_s``: seconds from the last byte leaving the sender to its arrival.
    ``bandwidth_Bps``: the slowest link's bytes per second (inf on the empty route to oneself).
    """

    nodes: tuple
    links: tuple
    latency_s: float
    bandwidth_Bps: float

    @property
    def hops(self):
        """Number of links on the route."""
        return len(self.nodes) - 1


class Link:
    """One direction of a link: a FIFO lock, ``capacity`` messages at a time (1 for a wire; a
    host's memory path moves several copies at once).

    NOTE: a minimal lock rather than ``simpy.Resource(capacity)``, for performance: the same
    FIFO order, but taking a free link and giving it back make no SimPy events; a waiting
    transfer is handed the link directly (``free`` stays 0).
    """

    __slots__ = ("free", "waiting")

    def __init__(self, capacity=1):
        self.free = capacity  # messages it can take now
        self.waiting = deque()  # the Events of transfers waiting for this link, first come first

    def release(self):
        """Hand the link to the first waiting transfer, or count it free."""
        if self.waiting:
            self.waiting.popleft().hand_over()
        else:
            self.free += 1


class _Turn(Event):
    """A transfer's wait for a `Link`, in its ``waiting`` queue. ``hold_s``: where the link is
    the last one of its route that the transfer waits for, the seconds it then holds the route:
    handed the link, it is scheduled that much later, when the bytes have left (``started``:
    when it was handed over), so that the wait and the hold make one event, not two (a message
    queued at an incast's NIC); else None, and it happens when handed over."""

    def __init__(self, env, hold_s=None):
        # NOTE: what Event.__init__ sets (SimPy 4), set here without the call (a queued message)
        self.env, self.callbacks, self.hold_s, self.started = env, [], hold_s, None

    def hand_over(self):
        """The link is this transfer's now."""
        # NOTE: what `succeed` sets, scheduled now or ``hold_s`` on (SimPy 4's Timeout does so),
        # without its calls (an incast's message queued at the NIC)
        env = self.env
        self.started, self._ok, self._value = env._now, True, None
        delay = self.hold_s or 0.0
        heappush(env._queue, (env._now + delay, NORMAL, next(env._eid), self))


@dataclass(frozen=True, slots=True)
class MemoryPath:
    """How two ranks of one host exchange a message: through its memory.

    ``latency_s``: seconds from the copy's end to the message's arrival (a small message's
    one-way time); ``bandwidth_Bps``: one copy's bytes per second; ``channels``: copies the
    host's memory moves at once at that rate (its memory bandwidth over one copy's), more wait
    their turn, first come first.

    ``cache_bytes``, ``cache_bandwidth_Bps``: where the buffers a call of the host's ranks
    touches together fit in ``cache_bytes`` (their cache, as the copies see it), one copy moves
    at ``cache_bandwidth_Bps`` instead (`within`); 0: no bound known, one rate. Why: a real
    host's collective tables grow by 2.7-3.9x in one doubling of their sizes where its ranks'
    buffers pass one bound (AlaSKA's and CSD3's Open MPI tables: docs/osu.md), and a single
    rate fitted on one side of it misses the other side by up to 2x.
    """

    latency_s: float
    bandwidth_Bps: float
    channels: int = 1
    cache_bytes: float = 0.0
    cache_bandwidth_Bps: float = 0.0

    def __post_init__(self):
        if not self.latency_s >= 0:
            raise ValueError(f"memory latency must be >= 0 seconds, got {self.latency_s}")
        if not self.bandwidth_Bps > 0:
            raise ValueError(f"memory bandwidth must be > 0 bytes/s, got {self.bandwidth_Bps}")
        if not (isinstance(self.channels, int) and self.channels >= 1):
            raise ValueError(f"memory channels must be an integer >= 1, got {self.channels}")
        if not (self.cache_bytes >= 0 and self.cache_bandwidth_Bps >= 0):
            raise ValueError("memory cache and its bandwidth must be >= 0")
        if bool(self.cache_bytes) != bool(self.cache_bandwidth_Bps):
            raise ValueError("memory cache and cache_bandwidth go together (both or neither)")

    def within(self, working_set_bytes):
        """The path a call moves its copies on when the host's ranks touch
        ``working_set_bytes`` of buffers together: at the cache's rate where they fit the
        cache, else this one (either way with no cache bound of its own).

        >>> path = MemoryPath(5e-7, 1e9, 4, cache_bytes=2**20, cache_bandwidth_Bps=3e9)
        >>> path.within(2**20).bandwidth_Bps, path.within(2**20 + 1).bandwidth_Bps
        (3000000000.0, 1000000000.0)
        """
        if not self.cache_bytes:
            return self
        fits = 0 < working_set_bytes <= self.cache_bytes
        return MemoryPath(
            self.latency_s,
            self.cache_bandwidth_Bps if fits else self.bandwidth_Bps,
            self.channels,
        )

    def concurrent_Bps(self, copies):
        """Each copy's bytes per second while ``copies`` copies move at once, as a fluid share
        of the host's ``channels * bandwidth_Bps`` (the FIFO channels of a message-level run
        take ``ceil(copies / channels)`` turns instead)."""
        return self.bandwidth_Bps * min(1.0, self.channels / max(1, copies))


_new = object.__new__  # an event made without its __init__ (what it sets, set inline)


class _Take(Event):
    """A take from a `Mailbox` waiting for a message from ``source`` (`ANY_SOURCE`: any) with
    ``tag`` (None: any); made by `Mailbox.get` alone, which sets its fields without a call."""

    def accepts(self, message):
        """Whether this take takes ``message``."""
        return (self.tag is None or self.tag == message.tag) and (
            self.source == ANY_SOURCE or self.source == message.source
        )

    def cancel(self):
        """Stop waiting (an interrupted receive), so no later message goes to it."""
        if not self.triggered:
            self.mailbox.takes.remove(self)


class Mailbox:
    """A node's arrived messages; a take gets the first one from its source with its tag, first
    come first, as MPI matches a receive.

    NOTE: a minimal ``simpy.FilterStore`` for performance: the same order of matching, but putting
    a message makes no event, a waiting take is handed the message directly, and a take matches
    by its source and tag, compared inline (no filter function a message). No waiting take
    accepts a message in ``items``.
    """

    __slots__ = ("env", "items", "takes")

    def __init__(self, env):
        self.env, self.items, self.takes = env, [], []

    def put(self, message):
        """Hand ``message`` to the first waiting take that accepts it, or keep it."""
        tag, source, takes, i = message.tag, message.source, self.takes, 0
        for take in takes:  # NOTE: counted by hand, no enumerate: mostly the first one takes it
            if (take.tag == tag or take.tag is None) and (
                take.source == source or take.source == ANY_SOURCE
            ):
                del takes[i]
                # NOTE: `take.succeed(message)`, what SimPy 4's succeed and schedule set, without
                # their calls (pending: a take waits until it is handed a message)
                take._ok, take._value = True, message
                env = self.env
                heappush(env._queue, (env._now, NORMAL, next(env._eid), take))
                return
            i += 1  # noqa: SIM113 (enumerate costs a message more)
        self.items.append(message)

    def get(self, source=ANY_SOURCE, tag=None):
        """An event that succeeds with the first message from ``source`` (any: `ANY_SOURCE`)
        with ``tag`` (any: None)."""
        take = _new(_Take)  # NOTE: made without a call (a take a message): what Event.__init__
        take.env, take.callbacks = self.env, []  # sets (SimPy 4), and the take's own
        take.mailbox, take.source, take.tag = self, source, tag
        if self.items:  # (mostly none: a receive posted before its message lands)
            for i, message in enumerate(self.items):
                if (tag is None or message.tag == tag) and (
                    source == ANY_SOURCE or message.source == source
                ):
                    del self.items[i]
                    return take.succeed(message)
        self.takes.append(take)
        return take


def slowest_link(links, nbytes):
    """The (alpha s, beta B/s) of ``links`` on which ``nbytes`` take longest,
    ``alpha + nbytes / beta`` (ties: the larger alpha, then the smaller beta)."""
    return max(links, key=lambda link: (link[0] + nbytes / link[1], link[0], -link[1]))


def _release(links):
    """Give back ``links``, all held, last first (`Link.release`)."""
    for link in reversed(links):
        link.release()


def _abandon(links, held, turn):
    """Undo an interrupted transfer that holds ``links[:held]``: give them back; if it was
    waiting for ``links[held]`` with the Event ``turn``, leave that queue, or give that link back
    too if it was handed over just before the interrupt."""
    if held < len(links):  # interrupted while waiting, so `turn` is that link's
        if turn.triggered:
            held += 1
        else:
            links[held].waiting.remove(turn)
    for link in reversed(links[:held]):
        link.release()


class RoutedNetwork:
    """Hosts and switches joined by full-duplex FIFO links; a message holds its whole route.

    Parameters
    ----------
    env : simpy.Environment or None
        The clock it runs on; None for a network checked now and run later (`attach`).
    graph : networkx.Graph
        Connected and undirected; its nodes are hosts and switches, each edge a full-duplex link.
        An edge attribute ``bandwidth_Bps`` overrides ``bandwidth_Bps`` for that link.
    hosts : sequence of graph nodes
        The host of each rank ``0 .. n-1``, in rank order; ranks of one host repeat it.
    latency_s : float
        Seconds per hop, >= 0: per switch passed through and per direct host-to-host link (on a
        star, the node-to-node alpha).
    bandwidth_Bps : float
        Each link's bandwidth in each direction, bytes per second, > 0.
    costs : dict, optional
        Measured node-to-node cost models by pattern (``oneway``: Send/Recv; ``sendrecv``: both
        ways at once), each with ``alpha_s(nbytes)`` and ``beta_Bps(nbytes)``
        (`calibration.costfit.PiecewiseCost`, from a calibrated profile). A message of a pattern
        that has one holds its route's links ``n / beta(n)`` and arrives ``alpha(n)`` later,
        instead of the route's latency and bandwidth: a calibration measures whole routes
        between nodes, so this is for a star, where a route is one node-to-node hop.
    shaping : sim.shaping.Shaping, optional
        Token-bucket shaped NICs (an emulated cluster's ``tc tbf``): a message is a fluid flow
        through the sender's bucket out and the receiver's bucket in, sharing them max-min fairly
        with the other messages in flight, the first out of an idle NIC ahead for its head
        start (`sim.fairshare.FluidStar`: TCP's sharing, not FIFO links), and arrives its
        pattern's alpha after its last byte. Wins over ``costs`` and the links' bandwidth.
        Both are of messages between hosts.
    memory : MemoryPath, optional
        The path between two ranks of one host (needed when ``hosts`` repeats a node).
    jitter : dict, optional
        Per pattern of ``costs``, a `calibration.jitter.Jitter`: each message charged a measured
        cost takes it times one draw of the spread measured at its size (a profile's in-situ
        jitter).
    gap : PiecewiseCost, optional
        With ``costs``: LogGP's gap g(n), a rank's seconds a message in a stream of them (a
        profile's ``[network.gap]``, fitted to ``osu_bw``'s window). A message between hosts
        then keeps its sender ``g(n)`` and its route's links (the NICs) ``nic_gap(n)``, each from
        when it has them all, and lands ``max(t(n), g(n), nic_gap(n))`` after that, t(n) its
        pattern's measured ``alpha(n) + n / beta(n)``: an isolated message takes what the
        latency table measured, a window of them streams at the bandwidth table's rate, and the
        ranks of a host that send off it at once share their NIC at its own rate. Why: the slope
        of a latency table is not the rate of a stream (AlaSKA's Open MPI: 4 KiB one way says
        2.7 GB/s, ``osu_bw`` measured 9.4), nor is one pair's rate the NIC's (``osu_mbw_mr``:
        1 KiB at 3.6 GB/s for one pair, 12.0 for eight), and both held the links ``n / beta(n)``.
    nic_gap : PiecewiseCost, optional
        With ``gap``: the NIC's seconds a message, shared by its host's ranks (a profile's
        ``[network.nic_gap]``, fitted to ``osu_mbw_mr`` of several pairs); default ``gap``, a
        NIC no faster than one pair.
    machine_copies : int, optional
        Every host is a rank of one machine (a one-machine profile's shared memory): a message
        between hosts is a copy through that machine's memory, which moves ``machine_copies``
        copies at once at the measured rate, more waiting their turn (one more `Link` of that
        capacity at the end of every route, so the global order of links is kept). A
        calibration of 2 ranks times copies that never meet this limit; 16 ranks do.
    switches : collection of graph nodes, optional
        The nodes that are switches; default every node not in ``hosts``.
    router : callable, optional
        ``router(u, v)`` gives the list of graph nodes from node u to node v along edges.
        Default `networkx.bidirectional_shortest_path`: a shortest path that depends only on the
        graph (its insertion order of nodes and edges), so the same graph gives the same routes.

    Raises
    ------
    ValueError
        ``hosts`` is empty or names a node not in the graph; ``hosts`` repeats a node and no
        ``memory`` is given; ``latency_s < 0``; a bandwidth is not > 0; the graph is
        disconnected.

    Notes
    -----
    Between idle links, n bytes over route R take ``latency(R) + n / min_bandwidth(R)`` seconds.
    Each link is FIFO per direction; a transfer may hold some of its links while it queues for
    the next one in the global order (as a star's sender holds its outgoing NIC while it waits
    for the receiver's incoming one). Routes and link resources are made on first use, so a
    network of 10,000 hosts costs only what its traffic touches.

    Examples
    --------
    >>> import networkx as nx, simpy
    >>> env = simpy.Environment()
    >>> graph = nx.path_graph(["a", "switch", "b"])
    >>> net = RoutedNetwork(env, graph, ["a", "b"], latency_s=2.0, bandwidth_Bps=100.0)
    >>> _ = env.process(net.transfer(0, 1, nbytes=300, tag=7, payload="hi"))
    >>> env.run()
    >>> env.now, net.mailbox[1].items  # alpha + n/beta = 2 + 300/100
    (5.0, [Message(source=0, tag=7, payload='hi', started=0, taken=None)])
    """

    def __init__(
        self,
        env,
        graph,
        hosts,
        latency_s,
        bandwidth_Bps,
        *,
        switches=None,
        router=None,
        costs=None,
        shaping=None,
        memory=None,
        jitter=None,
        machine_copies=None,
        gap=None,
        nic_gap=None,
    ):
        hosts = list(hosts)
        _check_network(graph, hosts, latency_s, bandwidth_Bps)
        self.latency_s, self.bandwidth_Bps = latency_s, bandwidth_Bps
        self.costs, self.shaping = costs or {}, shaping
        self.gap, self.nic_gap = gap, nic_gap if gap is not None else None
        self._senders = {}  # rank -> the Link of its own sending (with ``gap``), made on first use
        self.jitter = jitter or {}  # pattern -> Jitter: measured costs times a drawn factor
        self.graph, self.hosts = graph, hosts
        number = {host: i for i, host in enumerate(dict.fromkeys(hosts))}
        self.host_of = [number[host] for host in hosts]  # rank -> its host's number, 0, 1, ...
        if memory is None and len(number) < len(hosts):
            raise ValueError("ranks that share a host need its memory path (memory=MemoryPath)")
        self.memory = memory
        if machine_copies is not None and not (
            isinstance(machine_copies, int) and machine_copies >= 1
        ):
            raise ValueError(f"machine copies must be an integer >= 1, got {machine_copies}")
        self.machine_copies = machine_copies
        self._machine = Link(machine_copies) if machine_copies else None  # its memory, shared
        self._memory_links = {}  # host -> the Link of its memory path, made on first use
        self.env = self.fluid = self.mailbox = None
        self._in_flight = {}  # (source, dest) -> deque of [message or None] in the order sent
        # whether a pair's messages can land out of the order they were sent, so are held to
        # it: a message's time varies by size (measured costs, their jitter) or several copies
        # move at once (a host's memory, the machine's) or token buckets' flows end in any
        # order (`attach`); else FIFO links of one latency a route keep the order by themselves
        # (set too by a simulator whose library's steps land sooner)
        self.keep_order = bool(costs or jitter or machine_copies or len(number) < len(hosts))
        if env is not None:
            self.attach(env)
        self._switches = set(graph).difference(hosts) if switches is None else set(switches)
        self._router = router or partial(nx.bidirectional_shortest_path, graph)
        self._order = {node: i for i, node in enumerate(graph)}  # links sort by their ends' order
        self._links = {}  # (u, v) -> the Link of the direction u -> v, made on first use
        self._routes = {}  # (source, dest) ranks -> Route, made on first use
        self._host_routes = {}  # (host, host, to itself) -> Route: a host's ranks share it

    def attach(self, env):
        """Run on the clock ``env``: the mailboxes and shared NICs live there. The graph, its
        checks and its routes do not, so a front end checks a network once, before it has a
        clock, and hands the same object to the simulator."""
        if self.env is not None:
            raise RuntimeError("this network already runs on a clock")
        self.env = env
        self.fluid = FluidStar(env, self.shaping) if self.shaping is not None else None
        self.keep_order = self.keep_order or self.fluid is not None  # flows end in any order
        self.mailbox = [Mailbox(env) for _ in self.hosts]
        self._put = [mailbox.put for mailbox in self.mailbox]  # arrivals' callbacks

    def transfer(
        self, source, dest, nbytes, tag, payload, pattern="oneway", taken=None, sooner_s=0.0
    ):
        """Process: move ``nbytes`` from rank source to rank dest; done when they have left.

        The `Message` (its ``taken`` event, if any, for a rendezvous send to wait on) lands in
        ``mailbox[dest]`` the route's latency after its last byte left (``sooner_s`` less, at
        least 0: a step of MPI's own collective, sent from inside the library, which the measured
        costs' hot loop of calls is not).
        ``pattern`` (``oneway`` or ``sendrecv``) picks the measured cost model of ``costs``
        where the network has them. Yields SimPy events; returns None.

        Messages from one rank to another land in the order they were sent, as MPI's
        non-overtaking rule promises: one whose draw of the jitter, or whose size, would bring it
        in before an earlier one waits for it (a Sendrecv ring matches its steps' chunks by
        arrival, and an overtaken chunk would be taken for the wrong step). Held so only where
        a message can overtake (`keep_order`); elsewhere FIFO links keep it.
        """
        env, host_of, pair = self.env, self.host_of, (source, dest)
        between_hosts = host_of[source] != host_of[dest]
        ordered = self.keep_order
        if ordered:
            slot = [None]  # its place in the (source, dest) order, filled when it lands
            in_flight = self._in_flight.get(pair)
            if in_flight is None:
                in_flight = self._in_flight[pair] = deque()
            in_flight.append(slot)
        if self.fluid is not None and between_hosts:  # shaped NICs, shared (`sim.fairshare`)
            shaped = self.shaping.patterns[pattern]
            try:  # (it began to move later behind a flow that goes first)
                started = yield self.fluid.transfer(host_of[source], host_of[dest], nbytes, pattern)
            except (GeneratorExit, KeyboardInterrupt):  # the run is over: nothing to undo
                raise
            except BaseException:
                self._land(in_flight, slot, dest, _DROPPED)
                raise
            message = Message(source, tag, payload, started, taken)
            latency_s = shaped.alpha_s - sooner_s if sooner_s < shaped.alpha_s else 0.0
            arrival = env.timeout(latency_s, (in_flight, slot, dest, message))
            arrival.callbacks.append(self._deliver)
            return
        route = self._routes.get(pair) or self.route(source, dest)
        cost = self.costs.get(pattern) if between_hosts else None
        if cost is None:
            hold_s, latency_s = nbytes / route.bandwidth_Bps, route.latency_s
        else:  # measured node to node: alpha(n) + n / beta(n), whatever the route
            alpha_s = cost.alpha_s(nbytes)  # beyond a token bucket's burst: an intercept < 0,
            hold_s = max(nbytes / cost.beta_Bps(nbytes) + min(alpha_s, 0.0), 0.0)  # less held
            latency_s = max(alpha_s, 0.0)
            jitter = self.jitter.get(pattern)
            if jitter is not None:  # this message's draw from the measured spread; a
                # Sendrecv's and an exchange's, timed until both ways are done: one of a pair
                factor = jitter.draw(nbytes) if pattern == "oneway" else jitter.draw_of_pair(nbytes)
                hold_s, latency_s = hold_s * factor, latency_s * factor
        if sooner_s:
            latency_s = latency_s - sooner_s if sooner_s < latency_s else 0.0
        if cost is not None and self.gap is not None:  # the sender and its NIC, each its own
            yield from self._streamed(
                route,
                dest,
                Message(source, tag, payload, None, taken),
                nbytes,
                hold_s + latency_s,
                (in_flight, slot) if ordered else None,
            )
            return
        held, turn, links = 0, None, route.links  # the links taken are links[:held]
        try:
            for link in links:  # in the global order: no deadlock on cycles
                if link.free:
                    link.free -= 1
                elif held == len(links) - 1:  # the last: handed over, it holds them at once
                    turn = _new(_Turn)  # NOTE: what `_Turn` sets, without its call (incast)
                    turn.env, turn.callbacks, turn.hold_s, turn.started = env, [], hold_s, None
                    link.waiting.append(turn)
                    yield turn  # the transfer before it hands the link over, + hold_s
                    started = turn.started
                    break
                else:
                    turn = _Turn(env)
                    link.waiting.append(turn)
                    yield turn  # the transfer before it hands the link over
                held += 1
            else:
                started = env._now
                # NOTE: `env.timeout(hold_s)`, what SimPy 4's Timeout and schedule set, without
                # their two calls (the message path: two timeouts a message)
                timer = _new(Timeout)
                timer.env, timer.callbacks, timer._value, timer._ok = env, [], None, True
                timer._delay = hold_s
                heappush(env._queue, (started + hold_s, NORMAL, next(env._eid), timer))
                yield timer
        except (GeneratorExit, KeyboardInterrupt):  # the run is over: nothing to give back
            # (Ctrl-C lands between any two bytecodes, say after a free link was taken and
            # before it was counted: undoing it would be a guess; nobody runs after it anyway)
            raise
        except BaseException:  # interrupted (a fault, at a yield): leave the queue, give back
            _abandon(route.links, held, turn)
            if ordered:
                self._land(in_flight, slot, dest, _DROPPED)
            raise
        for link in reversed(links):  # NOTE: `Link.release` inline (the message path)
            if link.waiting:
                link.waiting.popleft().hand_over()
            else:
                link.free += 1
        # NOTE: a timeout's callback delivers, rather than a process per message, for speed
        message = _new(Message)  # NOTE: its fields set without a call (the message path)
        message.source, message.tag, message.payload = source, tag, payload
        message.started, message.taken = started, taken
        if ordered:
            arrival = env.timeout(latency_s, (in_flight, slot, dest, message))
            arrival.callbacks.append(self._deliver)
        else:  # NOTE: `_arrive` inline (the message path)
            message.env, message.callbacks = env, [self._put[dest]]
            message._value, message._ok, message._delay = None, True, latency_s
            heappush(env._queue, (env._now + latency_s, NORMAL, next(env._eid), message))

    def _streamed(self, route, dest, message, nbytes, one_way_s, order):
        """`transfer` of a message between hosts with a measured ``gap`` (LogGP's g): once it has
        its sender (a `Link` of the rank's own: its messages go one at a time, however many it
        has in flight) and its route's links (the NICs), first come first, the sender is held
        ``g(n)`` and the NICs ``nic_gap(n)``, each let go at its own time (the NIC goes on with
        another rank's message while this sender still posts, or this sender goes on while its
        bytes still leave), and it lands ``one_way_s`` (what the latency table measured) after
        it began, or when both have let go if later. ``message``: what lands, its start
        filled in here; ``order``: (in_flight, slot) where `keep_order`, else None."""
        env, nics = self.env, route.links
        sender = self._senders.get(message.source)
        if sender is None:
            sender = self._senders[message.source] = Link()
        links = (sender, *nics)  # the sender's first: every transfer takes it before any NIC
        gap_s = self.gap.seconds(nbytes)
        nic_s = self.nic_gap.seconds(nbytes) if self.nic_gap is not None else gap_s
        held, turn, started = 0, None, None  # the links taken are links[:held]
        try:
            for link in links:  # in the global order: no deadlock on cycles
                if link.free:
                    link.free -= 1
                else:
                    turn = _Turn(env)
                    link.waiting.append(turn)
                    yield turn  # the transfer before it hands the link over
                held += 1
            started = env._now
            if nic_s != gap_s:  # the NICs let go on their own time
                env.timeout(nic_s).callbacks.append(lambda _: _release(nics))
                held = 1
            yield env.timeout(gap_s)
        except (GeneratorExit, KeyboardInterrupt):  # the run is over: nothing to give back
            raise
        except BaseException:  # interrupted (a fault, at a yield): leave the queue, give back
            if started is None:  # while it waited for a link
                _abandon(links, held, turn)
            else:  # while its sender was held: what it still holds
                _release(links[:held])
            if order is not None:
                self._land(*order, dest, _DROPPED)
            raise
        _release(links[:held])
        message.started = started
        latency_s = max(one_way_s, nic_s, gap_s) - gap_s
        if order is not None:
            arrival = env.timeout(latency_s, (*order, dest, message))
            arrival.callbacks.append(self._deliver)
        else:
            self._arrive(message, dest, latency_s)

    def _arrive(self, message, dest, latency_s):
        """Schedule ``message`` as the timeout of its own arrival in ``dest``'s mailbox,
        ``latency_s`` from now: what SimPy 4's Timeout and schedule set, without their two
        calls, its callback the mailbox's `Mailbox.put` (the message path)."""
        env = self.env
        message.env, message.callbacks = env, [self._put[dest]]
        message._value, message._ok, message._delay = None, True, latency_s
        heappush(env._queue, (env._now + latency_s, NORMAL, next(env._eid), message))

    def _deliver(self, arrival):
        """An arrival's timeout is over: put its message, and any later ones of its (source,
        dest) that arrived before it, into dest's mailbox in the order they were sent."""
        in_flight, slot, dest, message = arrival.value
        slot[0] = message
        if in_flight[0] is not slot:  # an earlier message of this pair is still on its way
            return
        mailbox = self.mailbox[dest]
        while in_flight and in_flight[0][0] is not None:
            landed = in_flight.popleft()[0]
            if landed is not _DROPPED:
                mailbox.put(landed)

    def _land(self, in_flight, slot, dest, message):
        """`_deliver` without a timeout: ``message`` (`_DROPPED`: a transfer that failed) has
        arrived in its ``slot`` of the (source, dest) order ``in_flight``."""
        self._deliver(_Arrived((in_flight, slot, dest, message)))

    def route(self, source, dest):
        """The `Route` from rank source to rank dest, computed on first use, then cached; the
        ranks of two hosts share one (an alltoall of 512 ranks on 16 hosts: 256 routes made,
        not 262,144)."""
        route = self._routes.get((source, dest))
        if route is None:
            for rank in (source, dest):
                if not 0 <= rank < len(self.hosts):
                    raise ValueError(f"rank must be in 0..{len(self.hosts) - 1}, got {rank}")
            key = (self.hosts[source], self.hosts[dest], source == dest)
            route = self._host_routes.get(key)
            if route is None:
                route = self._host_routes[key] = self._make_route(*key)
            self._routes[source, dest] = route
        return route

    def hops(self, source, dest):
        """Number of links between rank source and rank dest (0 to oneself)."""
        return self.route(source, dest).hops

    def idle_transfer_s(self, source, dest, nbytes, pattern="oneway"):
        """Seconds from the first byte leaving to the message's arrival when no link is busy."""
        route = self.route(source, dest)
        cost = self.costs.get(pattern) if self.host_of[source] != self.host_of[dest] else None
        if cost is not None:
            return cost.alpha_s(nbytes) + nbytes / cost.beta_Bps(nbytes)
        return route.latency_s + nbytes / route.bandwidth_Bps

    def ring_link(self, nbytes, pattern="sendrecv"):
        """(alpha s, beta B/s) of the slowest step of a ring over the ranks in order (rank r to
        r + 1) for messages of ``nbytes``, each step's pairs all moving at once with nothing
        else on the links: what the closed-form collectives charge. A pair inside one host
        shares the host's memory with the host's other pairs of that step
        (`MemoryPath.concurrent_Bps`); a pair between hosts costs the measured model of
        ``pattern`` (a Sendrecv; ``sendrecv-written``: a step right after another, where the
        network has it) at its segment for ``nbytes`` where the network has one (its ``size``
        copies sharing the machine's ``machine_copies``, where given). Token buckets have no
        closed form: a network with ``shaping`` refuses (ValueError)."""
        if self.shaping is not None:
            raise ValueError(
                "--collectives closed-form: the profile's token-bucket NICs (an emulated "
                "cluster) have no closed form; use --collectives message"
            )
        size, host_of = len(self.hosts), self.host_of
        if size == 1:
            return self.latency_s, self.bandwidth_Bps
        pairs = [(r, (r + 1) % size) for r in range(size)]
        copies = Counter(host_of[r] for r, d in pairs if host_of[r] == host_of[d])
        links = set()
        measured = self.costs.get(pattern)  # a ring step is a Sendrecv
        for r, d in pairs:
            route = self.route(r, d)
            if host_of[r] == host_of[d]:
                links.add((route.latency_s, self.memory.concurrent_Bps(copies[host_of[r]])))
            elif measured is not None:  # what a calibration measured for this message size
                share = min(1.0, self.machine_copies / size) if self.machine_copies else 1.0
                links.add(
                    (float(measured.alpha_s(nbytes)), float(measured.beta_Bps(nbytes)) * share)
                )
            else:
                links.add((route.latency_s, route.bandwidth_Bps))
        return slowest_link(links, nbytes)

    def _make_route(self, start, end, to_itself):
        """The `Route` from host ``start`` to host ``end`` (``to_itself``: a rank's message to
        itself, no link)."""
        if start == end and not to_itself:  # two ranks of one host: its memory, no link
            memory = self.memory
            link = self._memory_links.get(start)
            if link is None:
                link = self._memory_links[start] = Link(memory.channels)
            return Route((start,), (link,), memory.latency_s, memory.bandwidth_Bps)
        nodes = tuple(self._router(start, end))
        pairs = list(itertools.pairwise(nodes))
        if (
            nodes[:1] != (start,)
            or nodes[-1:] != (end,)
            or not all(self.graph.has_edge(u, v) for u, v in pairs)
        ):
            raise ValueError(
                f"the router's route from {start!r} to {end!r} is not a path of the "
                f"graph: {list(nodes)}"
            )
        switches = self._switches
        alphas = sum(v in switches for v in nodes[1:-1]) + sum(
            u not in switches and v not in switches for u, v in pairs
        )
        order = self._order
        links = tuple(
            self._link(u, v) for u, v in sorted(pairs, key=lambda p: (order[p[0]], order[p[1]]))
        )
        bandwidth_Bps = min((self._bandwidth_Bps(u, v) for u, v in pairs), default=math.inf)
        if self._machine is not None:  # last in every route: the global order holds
            links += (self._machine,)
        return Route(nodes, links, self.latency_s * alphas, bandwidth_Bps)

    def _link(self, u, v):
        link = self._links.get((u, v))
        if link is None:
            link = self._links[u, v] = Link()
        return link

    def _bandwidth_Bps(self, u, v):
        return self.graph.edges[u, v].get("bandwidth_Bps", self.bandwidth_Bps)


def _check_network(graph, hosts, latency_s, bandwidth_Bps):
    if not hosts:
        raise ValueError("hosts must name at least one graph node, got none")
    missing = [h for h in hosts if h not in graph]
    if missing:
        raise ValueError(f"host {missing[0]!r} is not a node of the graph")
    if not latency_s >= 0:
        raise ValueError(f"latency_s must be >= 0 seconds, got {latency_s}")
    if not bandwidth_Bps > 0:
        raise ValueError(f"bandwidth_Bps must be > 0 bytes/s, got {bandwidth_Bps}")
    for u, v, link_Bps in graph.edges(data="bandwidth_Bps"):
        if link_Bps is not None and not link_Bps > 0:
            raise ValueError(f"bandwidth_Bps of link {u!r}-{v!r} must be > 0, got {link_Bps}")
    if not nx.is_connected(graph):
        raise ValueError(
            f"the network graph must be connected, got "
            f"{nx.number_connected_components(graph)} components"
        )


def make_network(
    env,
    spec,
    n,
    latency_s,
    bandwidth_Bps,
    costs=None,
    shaping=None,
    *,
    ranks_per_host=1,
    memory=None,
    nic_bandwidth_Bps=None,
    jitter=None,
    machine_copies=None,
    gap=None,
    nic_gap=None,
):
    """The network ``--network spec`` with n ranks on its first hosts, ``ranks_per_host`` a host
    (rank r on host ``r // ranks_per_host``, as ``srun``/``mpirun`` place ranks by default).

    Parameters
    ----------
    env : simpy.Environment or None
        None: checked now, run later (`RoutedNetwork.attach`).
    spec : str or os.PathLike
        - ``"star"``: n hosts on one switch, one link each: n bytes between idle hosts take
          ``latency_s + n / bandwidth_Bps``; N messages into one host queue at its link.
        - ``"fat-tree:K"``: the k-ary fat tree of Al-Fares et al. (2008), "A Scalable, Commodity
          Data Center Network Architecture", SIGCOMM: K pods of K/2 edge and K/2 aggregation
          switches, ``(K/2)**2`` core switches, ``K**3/4`` hosts (K even), filled in order, pod
          by pod. Routes are the paper's two-level tables: the destination's index under its
          edge switch picks the uplinks, which spreads each switch's traffic over its uplinks.
        - ``"torus"``: a 2-D torus of hosts (no switches), ``a x b = n`` with ``a <= b`` as square
          as possible (a prime n gives a ring); rank r at row ``r // b``, column ``r % b``.
          Dimension-order routes: along the row, then the column, each the short way round
          (forward on a tie).
        - ``"ring"``: a ring of hosts, rank r linked to r + 1; routes go the short way round
          (clockwise, to higher ranks, on a tie).
        - a path: a GraphML file (``.graphml``, ``.xml``) whose hosts are the nodes with
          attribute ``host`` true (``true`` or ``1``), or an edge list (``u v`` per line, or
          ``u v {'bandwidth_Bps': 1e9}``, as `networkx.write_edgelist` writes) whose hosts are
          the nodes named ``h0, h1, ...``; ranks go to hosts in the numeric order of their names.
          An edge attribute ``bandwidth_Bps`` sets that link's bandwidth; routes are shortest
          paths. Every other node is a switch. A name above wins over a file of that name:
          write ``./star`` for the file.
    n : int
        Number of ranks, >= 1.
    latency_s : float
        Seconds per hop (a switch passed through, or a direct host-to-host link), >= 0.
    bandwidth_Bps : float
        Each link's bandwidth per direction, bytes per second, > 0.
    costs : dict, optional
        Measured cost models by message pattern (see `RoutedNetwork`).
    shaping : sim.shaping.Shaping, optional
        Token-bucket shaped NICs (see `RoutedNetwork`).
    ranks_per_host : int
        Ranks a host holds, >= 1; the last host may hold fewer.
    memory : MemoryPath, optional
        The path between two ranks of one host; needed with ``ranks_per_host > 1``.
    nic_bandwidth_Bps : float, optional
        Each direction of every link of a host (its NIC; several rails together may exceed
        ``bandwidth_Bps``), bytes per second; default ``bandwidth_Bps``. A file's own
        ``bandwidth_Bps`` on a link wins.
    jitter : dict, optional
        Per message pattern a `calibration.jitter.Jitter` (see `RoutedNetwork`).
    machine_copies : int, optional
        Copies one machine's memory moves at once, when every host is a rank of it (see
        `RoutedNetwork`).
    gap, nic_gap : PiecewiseCost, optional
        A rank's and a NIC's seconds a message of a stream (see `RoutedNetwork`).

    Returns
    -------
    RoutedNetwork

    Raises
    ------
    ValueError
        ``n < 1``; an unknown spec; K not even and >= 2; more ranks than the fat tree's hosts; a
        file that cannot be read or parsed, has fewer hosts than n, a bandwidth not > 0, or is
        disconnected (the message names the file); ``latency_s`` or ``bandwidth_Bps`` out of range.

    Examples
    --------
    >>> import simpy
    >>> net = make_network(simpy.Environment(), "fat-tree:4", 16, 1e-6, 1e9)
    >>> [net.hops(0, dest) for dest in (1, 2, 4)]  # same edge switch, same pod, other pod
    [2, 4, 6]
    >>> [round(net.route(0, dest).latency_s / 1e-6) for dest in (1, 2, 4)]  # switches passed
    [1, 3, 5]
    >>> make_network(simpy.Environment(), "ring", 8, 1e-6, 1e9).hops(0, 5)  # the short way
    3
    >>> make_network(simpy.Environment(), "fat-tree:4", 17, 1e-6, 1e9)
    Traceback (most recent call last):
    ...
    ValueError: --network fat-tree:4 holds 16 hosts, got n = 17
    """
    if not n >= 1:
        raise ValueError(f"n must be >= 1 rank, got {n}")
    if not (isinstance(ranks_per_host, int) and ranks_per_host >= 1):
        raise ValueError(f"ranks per host must be an integer >= 1, got {ranks_per_host}")
    graph, all_hosts, router = physical_network(os.fspath(spec), -(-n // ranks_per_host))
    switches = set(graph).difference(all_hosts)
    if nic_bandwidth_Bps is not None:
        if not nic_bandwidth_Bps > 0:
            raise ValueError(f"NIC bandwidth must be > 0 bytes/s, got {nic_bandwidth_Bps}")
        for u, v, data in graph.edges(data=True):
            if "bandwidth_Bps" not in data and (u not in switches or v not in switches):
                data["bandwidth_Bps"] = nic_bandwidth_Bps
    return RoutedNetwork(
        env,
        graph,
        [all_hosts[rank // ranks_per_host] for rank in range(n)],
        latency_s,
        bandwidth_Bps,
        switches=switches,
        router=router,
        costs=costs,
        shaping=shaping,
        jitter=jitter,
        memory=memory,
        machine_copies=machine_copies,
        gap=gap,
        nic_gap=nic_gap,
    )
