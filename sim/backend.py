"""The SimPy backend: the same node programs inside a model of a cluster, simulated time as clock.

Theory of operation: every node program becomes a SimPy process (`Simulator.process`) that sends
replies into the generator and turns each operation it yields into SimPy events: a Compute runs
the real kernel in this process and lets simulated time pass by the seconds it took (``--compute
measured``); a message crosses the network model (`sim.network`: its route's links held for
``nbytes / bandwidth``, then the route's latency) into the receiver's mailbox (a
`sim.network.Mailbox` that Recv takes from by source and tag); collectives are decomposed into
the point-to-point steps of the real algorithm (the ring allreduce is the very generator the MPI
backend drives), so the arithmetic and its order are the real run's and the weights come out bit
for bit the same (``--collectives closed-form``: one event a collective, `sim.closed_form`).
Evaluations are rendezvous of all nodes that take no simulated time. Where ranks share cores,
they take turns on them (`sim.cores`); the timeline of drawn nodes is `sim.timeline`'s.

The default network is a star (one non-blocking switch, full-duplex NICs, FIFO): n bytes between
idle nodes take ``latency + n / bandwidth``, the alpha-beta (Hockney) model; N messages into one
NIC queue behind each other there. ``--network fat-tree:K | torus | ring | FILE`` route over more
hops (`sim.network.make_network`).

Faults (``--faults FILE``, ``--fail``: `run.faults`) are acted out by `sim.faults`, as the real
backend acts them out; nodes left waiting on a killed one get `PeerFailed`.

The clock is read as ``env._now``, SimPy 4's attribute behind its ``now`` property, here and in
`sim.network`: a message's path reads it eight times, and the property's Python call was 3.8 %
of a ping-pong message's instructions (2026-12-03).
"""

import contextlib
import gc
import math
from collections.abc import Generator
from dataclasses import dataclass
from functools import partial
from time import perf_counter

import numpy as np
import simpy

from sim.closed_form import ClosedFormAllreduce, allreduce_program, mean_pass_s
from sim.compute import ComputeModel
from sim.cores import DEFAULT_SLICE_S, attach_stack, pollers, shared_cores
from sim.faults import Killed, SimulatedFaults
from sim.network import Message, RoutedNetwork, make_network
from sim.timeline import LAYOUT_OPS, Timeline
from twinsgd.programs.block_collectives import ALLGATHERS, ring_allgather
from twinsgd.programs.collectives import (
    combined_s,
    evaluate_for_log,
    finish_reduction,
)
from twinsgd.programs.compression.wire import from_wire, size_varies, to_wire
from twinsgd.programs.mpi_choices import allgather_algorithm
from twinsgd.programs.ops import (
    ANY_SOURCE,
    Allgather,
    Allreduce,
    Compute,
    Evaluate,
    Exchange,
    Recv,
    Send,
    SendRecv,
)

_BARRIER_TAG = -1000  # tag of the empty messages of a simulated timed entry


_WRITTEN_PATTERN = {  # a measured pattern -> the same with bytes just written (`_carry`)
    pattern: f"{pattern}-written" for pattern in ("oneway", "sendrecv", "exchange")
}

COLD_BYTES = 64 * 1024  # an operation that moves this much leaves the next own code cold


def _hand_over(request):
    """A receive's message has landed: a rendezvous sender waiting on it is done (a SimPy
    callback of the receive's request)."""
    taken = request.value.taken
    if taken is not None and not taken.triggered:
        taken.succeed()


def _bytes_moved(op):
    """Bytes an operation moves through this node (sent or received, the larger), roughly:
    what decides whether the program's next own code finds its data in cache."""
    if isinstance(op, Allreduce | SendRecv):
        return op.buf.nbytes
    if isinstance(op, Send | Allgather):
        return op.payload.nbytes
    if isinstance(op, Recv):
        return op.buf.nbytes if op.buf is not None else 0
    if isinstance(op, Exchange):
        return sum(payload.nbytes for payload in op.payloads.values())
    return 0


_NDARRAY = np.ndarray  # (one global look-up, not two, on the message path)
_RECEIVES = (Recv, SendRecv, Exchange)  # operations that take a message in


def _copy_into(buf, payload):
    """``np.copyto(buf, payload)``: an array's bytes by assignment, 150 ns less a message than
    through numpy's dispatch of array functions (the message path); anything else (a ghost:
    `programs.ghost`) through that dispatch, which it answers."""
    if type(payload) is _NDARRAY:
        buf[...] = payload
    else:
        np.copyto(buf, payload)


def _snapshot_once(copies, payload):
    """``payload``'s snapshot from ``copies`` (by payload id), taken and kept there the first
    time: one snapshot per distinct payload of an operation (gossip sends one vector to all)."""
    snapshot = copies.get(id(payload))
    if snapshot is None:
        snapshot = copies[id(payload)] = _snapshot(payload)
    return snapshot


def _snapshot(payload):
    """What travels: a read-only copy of an array (the sender may change the original, and an
    Exchange hands one copy to every peer), a message object as it is."""
    if not isinstance(payload, np.ndarray):
        return payload
    snapshot = payload.copy()
    snapshot.setflags(False)  # NOTE: write=False, positional: numpy parses a keyword in 150 ns
    return snapshot


class _EventNames(dict):
    """Kind of operation -> its name on the timeline, its class's name in lower case
    (``sendrecv``), made on the first look-up of a kind: a drawn node traces every operation,
    so a name costs one subscript, no call (the message path)."""

    def __missing__(self, kind):
        name = self[kind] = kind.__name__.lower()
        return name


_EVENT_NAMES = _EventNames()


@contextlib.contextmanager
def rare_collections():
    """Run the block with the cyclic garbage collector called rarely, for speed: with thousands
    of programs suspended mid-step, most young objects live on, and collections took a third of
    a 10,000-node run, and a fifth of its set-up (memory is the same: nothing cyclic piles up).
    Nested blocks keep the outermost's setting; the thresholds before it come back after."""
    threshold = gc.get_threshold()
    gc.set_threshold(100_000, 50, 1000)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)


class _OwnCode:
    """A node's own code between two of its operations, timed in process (`Simulator._drive`
    with own code measured), and charged to the steps it ran in.

    A program closes a step in the middle of its own code (the optimizer's update, then
    ``end_step``, then the next step's batch up to its Compute): the part before the close
    belongs to the step it closes, as a real rank's clock has it. Charged all to the next
    operation, a Local-SGD run's averaging step carried two updates and the step after it none,
    and its p90 step came out 28-34 % long where its mean was right (2026-12-02).

    On cores shared past their count the step's end is put where its own code would end on a
    core of its own: the turns that code then waits for are charged (as compute) to the next
    step, the one in progress by then.

    Right after a large message the code finds its data evicted and runs slower while it
    touches it again: ``cold_cost`` is (seconds more, code seconds). With code seconds (the
    calibration's stand-in, warm, `real.netbench.cold_own_code`), the first that many
    seconds of own code after the message take the seconds more in proportion, so a piece as
    long as the stand-in or longer pays all of them and a shorter one its share: a PS worker's
    3 us between its push and its pull paid the stand-in's 70 us whole, where measured it took
    11-17 us in all (2026-12-05). Without them (a profile before them), the first part after
    the message pays the seconds more whole. (Tried and not kept: all own code scaled by the
    measured program's own code in its run over the same alone, net of the refill; fitted on
    the ring's update and next batch, 1.14-1.44x from one calibration to the next, it put a
    top-k codec's own code 30 % over measured, docs/validation.md 2026-12-05.)

    ``pace``: the factor that puts code timed now at the calibration's speed (or None);
    ``trace``: the node's `sim.timeline.Trace` where it is drawn on the timeline (its charges
    are noted as the program's own code, ``local``), else None."""

    __slots__ = ("closed_s", "code_s", "cold", "pace", "refill", "since", "trace")

    def __init__(self, pace, cold_cost, trace):
        self.pace, (self.refill, self.code_s), self.trace = pace, cold_cost, trace
        self.since, self.closed_s, self.cold = 0.0, 0.0, 0.0

    def begin(self, cold):
        """The program runs its own code from now; ``cold``: right after a large message."""
        self.since, self.closed_s = perf_counter(), 0.0
        # what is left cold: seconds of own code still to pay the refill (or any: inf); none
        # where there is no refill to pay (no work for it on the message path)
        self.cold = (self.code_s or math.inf) if cold and self.refill else 0.0

    def charge(self, log):
        """Charge ``log`` the own code run since the last charge as compute; its seconds."""
        now = perf_counter()
        seconds, self.since = now - self.since, now
        if self.pace is not None:
            seconds *= self.pace()
        if self.cold:  # own code right after a large message pays its caches' refill
            if self.code_s:  # ... over its first code_s seconds, in proportion
                touched = min(seconds, self.cold)
                self.cold -= touched
                seconds += self.refill * touched / self.code_s
            else:  # ... all of it in the first part
                seconds, self.cold = seconds + self.refill, 0.0
        log.charge("compute", seconds)
        if self.trace is not None:
            self.trace.note_local()  # the program's own code
        return seconds

    def close_step(self, log):
        """The step closes now: charge it the own code so far; seconds from the clock's now
        (the operation before) to the step's end, all of it still to be waited out."""
        self.closed_s += self.charge(log)
        return self.closed_s


@dataclass(slots=True)
class LibraryCall:
    """An operation of the simulator's own (no backend measures it): one call of the MPI
    library whose work is ``program``, a node program of the library's algorithm (`SendRecv`
    steps and the like); its reply is what ``program`` returns. Its steps after the first are
    sent from inside the library, where the same steps yielded one by one would each follow
    the program (`sim.osu`'s collectives; ``Simulator``'s ``call_overhead_s``).

    ``writes``: which of its messages carry bytes the call itself has just written, dirty in
    the sender's cache (charged the network's ``-written`` costs where measured, the clean
    ones else): "never" (an alltoall sends from the caller's buffer), "always" (an allreduce,
    a reduce, an allgather: the library copies the caller's bytes into its own buffer first,
    then sends what it copied or added), "after_receive" (a broadcast: the root sends the
    caller's bytes, a rank that has received forwards them). ``copies_bytes``: the bytes of
    the caller's send buffer it copies into its own first, an allreduce's, reduce's or
    allgather's not in place (OSU's): charged at the machine's measured copy
    (``[compute.copy]``, the ``local_copy`` cost) where known, else nothing.
    ``read_by_peers``: the share of that copy's destination the other ranks read in the call
    before (0 .. 1), charged as a copy into bytes another rank has just read
    (``[compute.copy_read_by_peer]``, ``copy_read_by_peer``) where measured."""

    program: Generator
    writes: str = "never"
    copies_bytes: int = 0  # the caller's send buffer the library copies first (not in place)
    read_by_peers: float = 0.0  # ... the share of its destination other ranks read last


class Simulator:
    """Runs one node program per node in simulated time.

    Parameters
    ----------
    nodes : list of programs.node.Node
        One per rank, in rank order.
    logs : list of run.runlog.RunLog
        One per rank; the reporter's writes the summary files.
    latency_s, bandwidth_Bps : float
        The star network's alpha (seconds) and beta (bytes per second).
    compute : ComputeModel
        How long compute takes (default: measured in this process).
    collectives : {"message", "closed-form"}
        Allreduce decomposed into the ring's messages, or one event per collective lasting the
        ring's alpha-beta cost ``2(p-1)(alpha + n/(p beta))`` after the last node arrives (for
        scale; the arithmetic is the ring's either way). They agree on a contention-free network.
    network : str or sim.network.RoutedNetwork
        ``--network``: star, fat-tree:K, torus, ring or a file (`sim.network.make_network`), or
        that network already made (with no clock: ``make_network(None, ...)``), which then
        runs on this simulator's clock and keeps its own latency, bandwidth, costs and shaping.
    costs : dict, optional
        Measured cost models by message pattern, from a calibrated profile: ``oneway`` for Send
        and Recv, ``sendrecv`` for SendRecv and Exchange (a ring step, a gossip exchange: both
        directions at once). Closed-form collectives keep ``latency_s`` and ``bandwidth_Bps``.
    shaping : sim.shaping.Shaping, optional
        Token-bucket shaped NICs (an emulated cluster), from a calibrated profile.
    eager_bytes : int
        A Send of at most this many bytes (or a buffered one, with a limit at all) returns at
        once and its bytes go on their own, as MPI's eager protocol does (a calibrated
        profile's measured limit); a larger one is a rendezvous and returns when its receiver
        has taken the message (a parameter server takes its workers' pushes one by one);
        0: no protocols measured, every Send returns when its bytes have left.
    call_overhead_s : float
        What a step inside one of MPI's own collectives saves against the same message in the
        measured hot loop of calls, each of which holds the program's return from one call and
        entry into the next (a calibrated profile's ``call_overhead_s``). Inside a collective
        of MPI's own (``--allreduce mpi``, the compressed Allgather, the entry barrier,
        `LibraryCall`) only its first step follows the program; the messages of its later
        steps arrive that much sooner.
    send_overhead_s : float
        LogP's o: the seconds an eager Send keeps its sender (a calibrated profile's measured
        ``overhead_s``), charged as comm while its bytes are already on their way; their
        arrival stays the measured one-way time, which holds o already.
    send_cost : object or None
        A program's eager Send by size (``seconds(nbytes)``: a calibrated profile's
        ``[network.in_situ.send]``, measured after a compute step as programs send), in place
        of ``send_overhead_s``: over TCP the kernel's copy into the socket holds the sender
        for 51 us at 4 KB and 362 us at 670 KB where a hot 8-byte Send's o is 5 us.
    entry_barrier : bool
        Do what the real backend does to tell wait from comm (``--measure-wait``): a barrier
        before each collective (MPICH's dissemination barrier: ceil(log2 p) rounds of empty
        messages) and an empty token with every peer before an Exchange, their whole time
        charged as wait. It costs real time in a measured run, so the prediction of that run
        pays it too. Message-level collectives only.
    mpi : {"mpich", "openmpi", "openmpi-4.1"}
        The MPI library whose allreduce ``--allreduce mpi`` runs (`programs.mpi_choices`).
    gamma : float or cost model
        The reduction's arithmetic, seconds per byte combined, or measured by size (a cost
        model's ``seconds(n)``, `combined_s`): a receive marked ``reduces`` takes that long
        more after its message arrives (charged as comm, as MPI's collectives spend it inside
        the call); the closed forms add the same (`alpha_beta_time`). That is a program's
        add, called from Python.
    library_gamma : float or cost model, optional
        The same inside a call of the MPI library (its allreduce, reduce; ``--allreduce
        mpi``), which adds in C with no call from Python (`sim.cluster_profile.InLibrary`);
        default ``gamma``.
    finish : PiecewiseCost, optional
        An allreduce of a mean pays one pass more over its n bytes after its messages: this
        cost of n as measured in situ (`[compute.finish]`), else ``gamma`` n.
    local_copy : PiecewiseCost, optional
        A copy of n bytes in one rank's memory, by size (``[compute.copy]``): what an MPI call
        that copies its caller's send buffer first pays (`LibraryCall`'s ``copies_bytes``).
    copy_read_by_peer : PiecewiseCost, optional
        The same into bytes another rank of the machine has just read through the library
        (``[compute.copy_read_by_peer]``): the share `LibraryCall`'s ``read_by_peers`` of
        that copy pays it instead (a write waits for lines another core read), as do a
        buffered Send's copy into the buffer its last receiver read (`_bsend`), an MPI
        allreduce's allgather into the blocks it sent away (`_sendrecv`) and a program's
        write into what it sent (`_read_from`). Given only for one machine's shared memory.
    core_groups : sequence of (ranks, cores)
        Hosts with more ranks than cores: their ranks share the cores as Linux's EEVDF does,
        turns ending on ticks of ``time_slice_s`` (`sim.cores`): compute, own code and moving
        bytes need a core, a rank gives it up while it waits (polling) for a message that has
        not come, and needs it back, and its fair share, to go on.
    over_tcp : bool
        The ranks of ``core_groups`` talk over TCP (an emulated cluster): each stays on one
        core of its host, shared fairly with the others there (`sim.cores.shared_cores`,
        ``pinned``), and holds no core in a communication call (the kernel moves its bytes).
    stack_cpu : (float, float), optional
        Over TCP with token-bucket NICs (``shaping``): the kernel's CPU seconds a byte sent and
        a byte received (``[network.stack]``, measured), taken from the compute of the ranks on
        the sender's and the receiver's cores while the bytes move (`sim.cores.StackCpu`).
    switch_s : float
        Seconds the next compute of a rank of ``core_groups`` takes more when it comes back to
        a core after other ranks ran on the cores: its caches refilled (`sim.cores`; measured
        per model, ``[compute] switch_s``).
    probe_cost : sim.cluster_profile.ProbeCost, optional
        A program's Recv of a message it waited for (``[network.in_situ.probe]``): the real
        backend waits in a probe loop first (`real.backend.probe`) and posts the receive once
        it has seen the message, so the receive is done ``later`` than a plain one (and a
        rendezvous sender with it), and its wait ends when the probe sees the message,
        ``seen`` after it began to move. Not for the receives inside a collective (MPI's own),
        nor for a receive that finds its message already moving.
    poll_wait_s : float
        Over TCP, seconds a rank that polls in a call sees a message later for each rank of its
        cores past their number that wants one (`sim.cores.Pollers`; ``[cluster]
        poll_wait_s``, measured); 0: at once.
    """

    def __init__(
        self,
        nodes,
        logs,
        latency_s,
        bandwidth_Bps,
        compute=None,
        collectives="message",
        network="star",
        costs=None,
        entry_barrier=False,
        shaping=None,
        eager_bytes=0,
        send_overhead_s=0.0,
        send_cost=None,
        call_overhead_s=0.0,
        start_s=0.0,
        mpi="mpich",
        gamma=0.0,
        library_gamma=None,
        finish=None,
        local_copy=None,
        copy_read_by_peer=None,
        wire=None,
        core_groups=(),
        time_slice_s=DEFAULT_SLICE_S,
        over_tcp=False,
        stack_cpu=None,
        switch_s=0.0,
        poll_wait_s=0.0,
        probe_cost=None,
    ):
        # a resumed run's simulated clock goes on from its checkpoint's time
        self.env = simpy.Environment(initial_time=start_s)
        self.compute = compute or ComputeModel()
        self.eager_bytes = eager_bytes
        self.send_overhead_s = send_overhead_s
        self.send_cost = send_cost
        self.probe_cost = probe_cost  # a program's Recv, probe first: a message seen later
        self._in_collective = [False] * len(nodes)  # a collective's steps: MPI's own receives
        self._in_library = [False] * len(nodes)  # ... of a call of the MPI library's own
        self.call_overhead_s = call_overhead_s
        # each rank's messages arrive this much sooner than the measured cost (call_overhead_s
        # while it is inside a call of the MPI library, else 0)
        self._sooner = [0.0] * len(nodes)
        # each rank's messages carry bytes a collective has just written (`LibraryCall`,
        # our own collectives' steps after the first)
        self._written = [False] * len(nodes)
        # inside a collective entered through the barrier: every second is comm, as the real
        # backend's clock counts it (its barrier's time the wait, the call's whole time comm)
        self._entered = [False] * len(nodes)
        self.mpi = mpi  # whose algorithm choices ``--allreduce mpi`` runs
        self.gamma = gamma  # seconds a byte a reduction combines (a program's add)
        self.library_gamma = gamma if library_gamma is None else library_gamma  # MPI's, in C
        self._adds = [gamma] * len(nodes)  # each rank's add now: library_gamma inside MPI's
        self.finish = finish  # the mean's pass after an allreduce, by size (in situ), or None
        self.local_copy = local_copy  # a copy of n bytes in memory, by size, or None
        self.copy_read_by_peer = copy_read_by_peer  # ... into bytes another rank read, or None
        self.wire = wire  # a compressed message's wire bytes written and read (WireCost) or None
        # rank -> HostCores
        self.cores = shared_cores(self.env, core_groups, time_slice_s, over_tcp, switch_s)
        self.over_tcp = over_tcp
        # rank -> the Pollers of its cores (over TCP, with a poll_wait_s)
        self._pollers = pollers(self.cores, core_groups, poll_wait_s) if over_tcp else {}
        self._post_waiters = {}  # rank -> [(source, tag, event)]: senders waiting for a receive
        self._announced = {}  # (source, dest, tag) -> Store of messages for dest to copy
        # each rank's parameters (None for bare nodes), and how many bytes a peer has read
        # from its memory through shared memory since it last wrote them: of its parameters,
        # and of anything else it sent (its gradient), by rank (`_read_from`)
        self._params = [getattr(getattr(n, "model", None), "params", None) for n in nodes]
        self._params_read = [0] * len(nodes)
        self._sent_read = [0] * len(nodes)
        self._bsend_read = [0] * len(nodes)  # ... of its buffered sends' buffer (`_bsend`)
        self.entry_barrier = entry_barrier
        self.collectives = collectives
        self._current = [None] * len(nodes)  # each node's operation in progress
        self.on_step = {}  # rank -> called as it ends each step (sim.run's progress bar)
        # whether compute times vary from node to node or draw to draw (stragglers, speeds)
        self._scaled = bool(self.compute.straggle_probability) or any(
            speed != 1.0 for speed in self.compute.speeds
        )
        # the step each node is in (1-based, its own count; a resumed run's after its checkpoint)
        self._step_no = [getattr(node, "start_iteration", 0) + 1 for node in nodes]
        self.faults = SimulatedFaults(self.env, step_no=self._step_no)  # none until `run`
        self._computes = [0] * len(nodes)  # computes each node has begun (straggler draws)
        self._due = [None] * len(nodes)  # when a node's compute not yet waited out ends (`_drive`)
        self._ended = [None] * len(nodes)  # a step it ended meanwhile, closed when it has
        self._own = [None] * len(nodes)  # a node whose own code is timed: its `_OwnCode`
        self._straggles = {}  # compute count -> every node's straggler factor for it
        self._step_rng = [
            np.random.default_rng([self.compute.seed, r, 3])
            if self.compute.step_times is not None
            else None
            for r in range(len(nodes))
        ]
        self.nodes, self.logs = nodes, list(logs)
        self.timeline = Timeline(self.logs)  # the drawn nodes' logs now note their charges
        if isinstance(network, RoutedNetwork):
            network.attach(self.env)
            self.network = network
        else:
            self.network = make_network(
                self.env, network, len(nodes), latency_s, bandwidth_Bps, costs, shaping
            )
        if call_overhead_s:  # a library's steps land sooner: they could overtake
            self.network.keep_order = True
        if stack_cpu is not None and over_tcp and self.network.fluid is not None:
            attach_stack(self.cores, self.network.host_of, self.network.fluid, *stack_cpu)
        # gossip's exchange (Irecv, Isend, Waitall) at its own measured cost where a calibration
        # measured one (in situ, not on token buckets), else as a Sendrecv
        measured_exchange = "exchange" in self.network.costs and self.network.fluid is None
        self._exchange_pattern = "exchange" if measured_exchange else "sendrecv"
        self._arrivals = {}  # evaluation rendezvous: (iteration, collective) -> {rank: op}
        for node in nodes:
            node.on_step_end = self._step_ender(node)
        self._handlers = {
            Send: self._send,
            Recv: self._recv,
            SendRecv: self._sendrecv,
            Allreduce: (
                ClosedFormAllreduce(
                    self.env,
                    self.network,
                    self.logs,
                    mpi,
                    gamma,
                    self._finishing,
                    call_overhead_s,
                    self.library_gamma,
                )
                if collectives == "closed-form"
                else self._allreduce
            ),
            Exchange: self._exchange,
            Allgather: self._allgather,
            Evaluate: self._evaluate,
            LibraryCall: self._library_call,
        }

    def run(self, programs, faults=None):
        """Run every program to its end; return their return values (rank order; None for a
        node that failed).

        ``faults``: the run's `run.faults.FaultSchedule`, acted out by `sim.faults` (what
        failed, and when, is then in ``self.faults.failed``). A kill shows when the simulation
        has nothing left to do but nodes still wait: `PeerFailed` is thrown into the programs
        whose operation involves a failed node, which go on without it or (uncaught) end the
        run by raising it from here. Nodes that wait forever with no node failed are a bug in
        a program: RuntimeError.
        """
        self.faults = SimulatedFaults(self.env, faults, self._step_no, self._evaluations_without)
        processes = [
            self.env.process(self._process(node, program))
            for node, program in zip(self.nodes, programs, strict=True)
        ]
        self.faults.start(processes)
        with rare_collections():
            self.env.run()
        self.faults.notify(processes, self._current)
        failed = self.faults.failed
        return [None if r in failed else p.value for r, p in enumerate(processes)]

    def _evaluations_without(self, rank):
        """After ``rank`` was killed: release the collective evaluations the live nodes have
        now all reached."""
        alive = len(self.nodes) - len(self.faults.failed)
        for key in [k for k in self._arrivals if len(k) == 2 and k[1] is True]:
            arrived = self._arrivals[key]
            if arrived and len(arrived) >= alive:
                self.env.process(self._release(key))

    def _release(self, key):
        """Evaluate the rendezvous ``key`` that the nodes still alive have all reached."""
        yield self.env.timeout(0)
        if key in self._arrivals:
            arrived = self._arrivals.pop(key)
            self._arrivals.setdefault((key, "done"), self.env.event()).succeed(
                self._evaluate_now(arrived)
            )

    def _step_ender(self, node):
        rank, env, step_no, log = node.rank, self.env, self._step_no, self.logs[node.rank]
        # bare test nodes have no checkpoints; a run without --checkpoint-every writes none
        checkpoint = node.checkpoint if getattr(node, "checkpointer", None) is not None else None
        due, ended, on_step = self._due, self._ended, self.on_step

        def end_step(step, loss, staleness):
            if due[rank] is not None:  # at the end of the compute not yet waited out
                ended[rank] = partial(end_step, step, loss, staleness)
                return
            at = env._now
            own = self._own[rank]
            if own is not None:  # its own code so far ran in this step: charged to it here
                at += own.close_step(log)
            log.end_step(rank, step.epoch, step.iteration, at, loss, staleness)
            if checkpoint is not None:
                checkpoint(step)
            if rank in on_step:
                on_step[rank]()
            step_no[rank] = step.iteration + 1
            if self.faults.active:
                self.faults.strike(rank)

        return end_step

    def _process(self, node, program):
        """The driver loop of one node (a generator for SimPy): its own code's time is compute,
        then the operation."""
        # Own code is timed here with --compute measured; with measured gradients alone
        # (step times without own code); and with measured whole steps on a node that computes
        # no steps (a parameter server: its update is in no step a real run measured).
        times = self.compute.step_times
        measured = self.compute.measured or (
            times is not None and (not times.own_code or not getattr(node, "computes", True))
        )
        # own code right after a large message pays its caches' refill (`_OwnCode`)
        cold_cost = (self.compute.cold_own_s or 0.0, self.compute.cold_own_code_s)
        host = self.cores.get(node.rank)  # the cores it shares with more ranks, or None
        if host is None:  # NOTE: the loop itself, no generator around it: it runs per event
            return self._drive(node, program, None, measured, cold_cost)
        return self._on_shared_cores(
            host, node, self._drive(node, program, host, measured, cold_cost)
        )

    def _on_shared_cores(self, host, node, drive):
        """``drive`` (`_drive`) from a core of ``host``, given back when the program ends."""
        yield from host.acquire(node.rank)
        try:
            return (yield from drive)
        finally:
            host.release(node.rank)
            host.leave(node.rank)

    def _drive(self, node, program, host, measured, cold_cost):
        """`_process`'s loop (``host``: the `sim.cores.HostCores` the node shares, or None;
        ``cold_cost``: (seconds more, code seconds) of own code after a large message,
        `_OwnCode`'s)."""
        pace = self.compute.pace  # own code timed now, put at the calibration's speed
        reply, log, handlers = None, self.logs[node.rank], self._handlers
        notice, cold = None, False  # cold: the last operation moved enough to evict the cache
        rank, env, current = node.rank, self.env, self._current
        trace = self.timeline.traced.get(rank)  # its `sim.timeline.Trace` where it is drawn
        traced = trace is not None
        if traced:  # what `Trace.trace` appends to, for it inline below (the message path)
            trace_marks, trace_charges = trace.marks, trace.charges
        try:
            self.faults.strike(rank)  # a fault at step 1 strikes before the program starts
        except Killed:
            program.close()
            return None
        # NOTE: this loop runs twice per step per node (10,000 nodes: 2 million times a run), so
        # what only the measured or traced nodes need is done on those alone. For the same
        # reason a compute's time is waited out lazily where nothing can tell the difference (no
        # shared cores, no faults, own code not timed, closed-form collectives; every node alike): a
        # closed-form allreduce next is told when the node arrives rather than the node waiting
        # for an event (a million events fewer at 10,000 nodes and 100 steps); anything else
        # waits it out first (`_wait_out`), at the same simulated times in the same order.
        lazy = (
            self.collectives == "closed-form"
            and not self.cores  # no host's cores shared: every node alike
            and not measured
            and not self.faults.active
        )
        off_core = host is not None and self.over_tcp  # no core in a call (`sim.cores`)
        # without protocols measured: a send is `_send`'s first branch alone, and a receive takes
        # its message as it lands (no probe loop, no core to wait for, no rendezvous to answer,
        # no arithmetic or wire bytes to charge): both run inline below (the message path)
        plain_sends = not self.eager_bytes and self.wire is None
        plain_recvs = plain_sends and not self.cores and self.probe_cost is None and not self.gamma
        mailbox = self.network.mailbox[rank] if plain_recvs else None
        transfer = self.network.transfer
        polls = self._pollers.get(rank)  # ... where it polls, among others past the cores
        due, closed_form = self._due, handlers[Allreduce]
        if not isinstance(closed_form, ClosedFormAllreduce):
            closed_form = None  # message-level collectives: the handler's generator
        start = 0.0
        own = self._own[rank] = _OwnCode(pace, cold_cost, trace) if measured else None
        while True:
            if measured:
                own.begin(cold)
            try:
                op = program.send(reply) if notice is None else program.throw(notice)
            except StopIteration as stop:
                if due[rank] is not None:
                    yield from self._wait_out(rank)
                if measured and own.closed_s:  # the steps it closed since its last operation
                    yield from self._own_time(host, rank, own.closed_s)
                return stop.value
            except Killed:
                program.close()
                return None
            notice = None
            current[rank] = op
            if traced:
                start = env._now
            try:
                if measured:  # its own math (optimizer, mixing), slower after a large message
                    yield from self._own_time(host, rank, own.closed_s + own.charge(log))
                if lazy and due[rank] is not None:
                    if type(op) is Allreduce and self._ended[rank] is None:
                        start, due[rank] = due[rank], None
                        yield closed_form.enter(node, op, start)
                        reply = closed_form.reduced(op, node.size)
                        if traced:
                            trace.trace("allreduce", start)
                        continue
                    yield from self._wait_out(rank)
                    start = env._now
                if type(op) is Compute:  # time alone: no handler's generator for it
                    reply, seconds = self._compute(node, op)
                    if host is not None:
                        yield from self._on_core(host, rank, seconds)
                    elif seconds and lazy:
                        due[rank] = env._now + seconds
                    elif seconds:  # free compute (a ghost without a profile): no event
                        yield env.timeout(seconds)
                elif closed_form is not None and type(op) is Allreduce:  # no generator a step
                    yield closed_form.enter(node, op, env._now)
                    reply = closed_form.reduced(op, node.size)
                elif off_core:  # over TCP: no core in the call, back on its own after
                    host.release(rank)
                    if polls is not None:
                        polls.count += 1
                    try:
                        reply = yield from handlers[type(op)](node, op)
                    except simpy.Interrupt:  # it goes on (or fails) on a core, as `_blocked`
                        if polls is not None:
                            polls.count -= 1
                        yield from host.acquire(rank)
                        raise
                    if polls is not None:
                        polls.count -= 1
                    done = env._now
                    yield from host.acquire(rank)
                    if env._now > done:  # the call returns once its rank runs again: comm, as
                        log.charge("comm", env._now - done)  # the real clock has the call
                elif plain_sends and type(op) is Send:  # NOTE: `_send` and `_carry` inline
                    # without protocols (the message path); outside a collective no bytes were
                    # just written and none go from inside the library (`_collective` resets
                    # both), so an array goes as it is, in the measured one-way pattern
                    t0, payload = env._now, op.payload
                    if type(payload) is _NDARRAY:
                        snapshot = payload.copy()
                        snapshot.setflags(False)
                        yield from transfer(rank, op.dest, payload.nbytes, op.tag, snapshot)
                    else:
                        yield from self._carry(node, op.dest, payload, op.tag)
                    log.charge_collective(0.0, env._now - t0, payload.nbytes, 0)
                    reply = None
                elif plain_recvs and type(op) is Recv:  # NOTE: `_recv` inline, without protocols
                    t0, request = env._now, mailbox.get(op.source, op.tag)
                    try:
                        message = yield request
                    except simpy.Interrupt:
                        request.cancel()
                        raise
                    # NOTE: `_recv`'s end inline: the wait until the bytes began to move, the
                    # rest comm (outside a collective no barrier was entered: `_collective`
                    # resets that too); the copy
                    waited = message.started - t0
                    if waited < 0.0:
                        waited = 0.0
                    payload = message.payload
                    log.charge_collective(waited, env._now - t0 - waited, 0, payload.nbytes)
                    if op.buf is None:
                        reply = message.source, payload
                    else:
                        if type(payload) is _NDARRAY:
                            op.buf[...] = payload
                        else:
                            np.copyto(op.buf, payload)
                        reply = message.source, op.buf
                else:
                    reply = yield from handlers[type(op)](node, op)
                if measured:
                    cold = _bytes_moved(op) >= COLD_BYTES
                    if cold and self._params_read[rank] and type(op) in _RECEIVES:
                        # the update the message is for writes parameters a peer has read
                        yield from self._own_time(host, rank, self._rewrite_params_s(node, log))
                if traced:  # NOTE: `Trace.trace` inline: two operations a message
                    trace_marks += (_EVENT_NAMES[type(op)], start, len(trace_charges))
                    if len(trace_marks) >= 3 * LAYOUT_OPS:
                        trace.lay_out()
            except simpy.Interrupt as interrupt:
                if self.faults.killed(interrupt.cause):
                    program.close()
                    return None
                notice = interrupt.cause  # PeerFailed, thrown into the program

    def _own_time(self, host, rank, seconds):
        """Process step: ``seconds`` of node ``rank``'s own code (charged already) pass, on a
        core of ``host`` if it shares one."""
        if host is None:
            yield self.env.timeout(seconds)
        else:
            yield from self._on_core(host, rank, seconds)

    def _wait_out(self, rank):
        """Process step: wait until node ``rank``'s lazily kept compute ends (`_drive`), then
        close the step it ended meanwhile, if any."""
        yield self.env.timeout(self._due[rank] - self.env._now)
        self._due[rank] = None
        ended, self._ended[rank] = self._ended[rank], None
        if ended is not None:
            ended()

    # -- handlers: generators of SimPy events; each returns the reply ------------------------------

    def _on_core(self, host, rank, seconds):
        """``seconds`` of work (already charged as compute) on a core of ``host`` that more
        ranks share: the turns it waits for are compute too, as a real rank's wall clock
        counts them."""
        t0 = self.env._now
        yield from host.run(rank, seconds)
        if self.env._now - t0 > seconds:
            self.logs[rank].charge("compute", self.env._now - t0 - seconds)

    def _blocked(self, node, event, polled=True):
        """Process step: wait for ``event`` (a message, a rendezvous). A node that shares its
        host's cores gives its core up while the event has not happened, and waits for one
        again after. Over TCP it holds no core in a call, and sees the event in its turn among
        the ranks polling (`sim.cores.Pollers`; not ``polled``: an evaluation's rendezvous,
        which takes no simulated time)."""
        host = self.cores.get(node.rank)
        if host is None or event.triggered:
            return (yield event)
        if self.over_tcp:  # (no core in a call there)
            value = yield event
            polls = self._pollers.get(node.rank)
            if polled and polls is not None:
                seen_s = polls.seen_after_s()
                if seen_s:
                    yield self.env.timeout(seen_s)
            return value
        host.release(node.rank)
        try:
            message = yield event
        except simpy.Interrupt:
            yield from host.acquire(node.rank)  # it goes on (or fails) on a core
            raise
        yield from host.acquire(node.rank)
        return message

    def _compute(self, node, op):
        """Run a Compute's function; returns (its result, the simulated seconds it takes)."""
        model = self.compute
        if model.seconds_per_sample is not None and model.step_times is None:  # a profile
            result = op.fn(*op.args)
            seconds = model.seconds_per_step + op.samples * model.seconds_per_sample
        elif model.step_times is not None:  # a draw from the steps a real run measured
            times = model.step_times
            result = op.fn(*op.args)
            seconds = times.draw(self._step_rng[node.rank]) * op.samples / times.batch_size
        elif model.seconds_per_sample is None:
            t0 = perf_counter()
            result = op.fn(*op.args)
            seconds = perf_counter() - t0
            if model.pace is not None:
                seconds *= model.pace()
        if self._scaled:
            seconds *= self._scale(node.rank)
        if self.faults.active:  # a slow fault: this node runs at 1/factor of its speed
            seconds *= self.faults.slowdown(node.rank)
        if self._sent_read[node.rank]:  # it writes again what a peer read from it (its
            # gradient, pushed): no step time measured holds that (the ring's mean pass
            # writes its gradient first, and is measured in situ)
            seconds += self._rewrite_s(self._sent_read[node.rank])
            self._sent_read[node.rank] = 0
        self.logs[node.rank].charge("compute", seconds)
        return result, seconds

    def _scale(self, rank):
        """Factor on node ``rank``'s next compute time: its straggler draw over its speed."""
        model, slow = self.compute, 1.0
        if model.straggle_probability:
            count = self._computes[rank] = self._computes[rank] + 1
            if count not in self._straggles:
                if len(self._straggles) >= 16:  # nodes run at most a few computes apart
                    del self._straggles[min(self._straggles)]
                self._straggles[count] = model.straggle_factors(count, len(self.nodes))
            slow = float(self._straggles[count][rank])
        return slow / model.speeds[rank % len(model.speeds)]

    def _transfer(self, node, dest, payload, tag, copies=None, pattern=None):
        """The process that carries ``payload`` to ``dest`` (done when its bytes have left), in
        an exchange (both directions at once; priced as measured for one, `_exchange_pattern`,
        unless ``pattern`` names another).

        ``copies``: snapshots already taken in this operation, by payload id (to share)."""
        snapshot = _snapshot(payload) if copies is None else _snapshot_once(copies, payload)
        pattern = pattern or self._exchange_pattern
        return self.env.process(self._carry(node, dest, payload, tag, pattern, None, snapshot))

    def _carry(self, node, dest, payload, tag, pattern="oneway", taken=None, snapshot=None):
        """The network's transfer (a generator) of ``payload`` from ``node`` to ``dest``: its
        bytes, a snapshot of it (or ``snapshot``), how much sooner than measured it lands
        (sent from inside an MPI call), and by which measured pattern (the ``-written`` one
        for bytes a collective has just written, where the network has it)."""
        if self._written[node.rank]:  # NOTE: no string made per message (the message path)
            written = _WRITTEN_PATTERN[pattern]
            if written in self.network.costs:
                pattern = written
        if snapshot is None:  # NOTE: `_snapshot` inline for an array (the message path)
            if type(payload) is _NDARRAY:
                snapshot = payload.copy()
                snapshot.setflags(False)
            else:
                snapshot = _snapshot(payload)
        return self.network.transfer(
            node.rank, dest, payload.nbytes, tag, snapshot, pattern, taken, self._sooner[node.rank]
        )

    def _posted(self, node, source, tag):
        """The mailbox request for the message from source (or any) with tag; a rendezvous
        sender that waits for it (`_receiving`) learns it is posted."""
        request = self.network.mailbox[node.rank].get(source, tag)
        if self._post_waiters.get(node.rank):
            self._wake_senders(node.rank, source, tag)
        return request

    def _wake_senders(self, rank, source, tag):
        """``rank`` has posted a receive from source (or any) with tag: the rendezvous senders
        waiting for one (`_receiving`) go on."""
        waiters = self._post_waiters[rank]
        for waiter in [w for w in waiters if w[1] == tag and source in (ANY_SOURCE, w[0])]:
            waiters.remove(waiter)
            waiter[2].succeed()

    def _receiving(self, dest, source, tag):
        """An event that happens when ``dest`` has posted a receive that takes ``source``'s
        message of ``tag`` (at once if it has one posted)."""
        event = self.env.event()
        if self._posted_for(dest, source, tag):
            return event.succeed()
        self._post_waiters.setdefault(dest, []).append((source, tag, event))
        return event

    def _posted_for(self, dest, source, tag):
        """Whether ``dest`` has a receive posted now that takes ``source``'s message of ``tag``."""
        probe = Message(source, tag, None, 0.0)
        return any(take.accepts(probe) for take in self.network.mailbox[dest].takes)

    def _copy_on_cores(self, node, op, host):
        """A rendezvous Send to a rank on the same shared cores: the copy through shared memory
        moves while the sender is on a core and the receiver is eligible for one. MPICH's copy
        alternates between the two, and one core does it: two ranks on one core moved 670 KB
        in 37-60 us, on two 86-118 (2026-12-01), and a server's copy to a worker went on while
        another worker computed on the second core (2026-11-27). The sender waits (off its
        core) until the receiver has posted its receive; the receiver goes on, on a core of its
        own, after the copy. Should another sender's message take that receive first (a
        receive from any source), it waits for the next."""
        rank, dest, payload = node.rank, op.dest, op.payload
        while True:
            yield from self._blocked(node, self._receiving(dest, rank, op.tag))
            yield from host.until_eligible(dest)
            if self._posted_for(dest, rank, op.tag):
                break
        taken = self.env.event()
        yield from self._carry(node, dest, payload, op.tag, "oneway", taken)
        yield taken  # on its core, as MPI's Send spins until the copy is through

    def _take(self, node, source, tag, probed_since=None):
        """Wait for the message from source (or any) with tag; returns it. ``probed_since``:
        the time a program's Recv began, which sees a message it waited for ``probe_cost``
        later (`_recv`), else None."""
        request = self._posted(node, source, tag)
        try:
            # NOTE: a generator more per message only where cores are shared (the message path)
            if self.cores:  # the copy moved on its sender's core: done once it has landed
                if probed_since is None:
                    request.callbacks.insert(0, _hand_over)
                    return (yield from self._blocked(node, request))
                request.callbacks.insert(0, partial(self._hand_over_later, probed_since))
                message = yield from self._blocked(node, request)
                later_s = self._later_s(message, probed_since)
                if later_s:
                    yield self.env.timeout(later_s)
                return message
            message = yield request
            if message.taken is not None:  # a rendezvous send waits for this
                message.taken.succeed()
            return message
        except simpy.Interrupt:
            request.cancel()  # or it would take a message meant for the program's next Recv
            raise

    def _probes(self, rank, op):
        """Whether ``op`` (a Recv) waits in the real backend's probe loop first: a program's
        receive with wait measured, or of a compressed message (its size unknown); not one of a
        collective's steps."""
        return not self._in_collective[rank] and (self.entry_barrier or op.buf is None)

    def _later_s(self, message, since):
        """How much later than it lands a receive that probed from ``since`` takes ``message``:
        ``probe_cost`` of its size if the message began to move after the probe began, else 0."""
        if message.started > since:
            return self.probe_cost.later.seconds(message.payload.nbytes)
        return 0.0

    def _hand_over_later(self, since, request):
        """`_hand_over` for a receive that probed from ``since``: the rendezvous sender is done
        once the receiver has taken the message (`_later_s` after it landed)."""
        taken, later_s = request.value.taken, self._later_s(request.value, since)
        if taken is None or taken.triggered:
            return
        if not later_s:
            taken.succeed()
            return
        timer = self.env.timeout(later_s)
        timer.callbacks.append(lambda _: taken.triggered or taken.succeed())

    def _charge(self, node, t0, messages, sent, split=True):
        """Charge an operation that began at ``t0`` and ends now: wait until the last incoming
        message began to move (a peer not ready), comm for the rest; each second once, however
        many transfers overlapped in it. Not ``split`` (after an entry barrier's wait, as the
        real backend times it), or a step of a collective entered through one: all comm."""
        waits = split and not self._entered[node.rank]  # else nothing to wait for
        if len(messages) == 1:  # NOTE: a Sendrecv's own branch, for speed (`_recv` has it
            # inline: 3,300 instructions of a ping-pong message's 128,000, 2026-12-02)
            (message,) = messages
            waited = max(0.0, message.started - t0) if waits else 0.0
            received = message.payload.nbytes
        else:
            waited = max([0.0, *(m.started - t0 for m in messages)]) if waits else 0.0
            received = sum(m.payload.nbytes for m in messages)
        self.logs[node.rank].charge_collective(waited, self.env._now - t0 - waited, sent, received)

    def _send(self, node, op):
        t0, payload = self.env._now, op.payload  # the transfer inline: no process to start
        if self.copy_read_by_peer is not None and not op.buffered:
            self._read_from(node.rank, payload)  # (a program's own Send, not a collective's)
        if self.wire is not None and not isinstance(payload, np.ndarray):
            yield self.env.timeout(self.wire.write(payload.nbytes))  # its wire bytes written
        if self.eager_bytes and (op.buffered or payload.nbytes <= self.eager_bytes):
            if payload.nbytes > self.eager_bytes and self._copied_by_ranks(node.rank, op.dest):
                if self.copy_read_by_peer is not None and self.local_copy is not None:
                    yield from self._bsend(node, op)  # into a buffer its receivers read
                else:  # the sender's CPU copies its half in: on once its bytes have left
                    yield from self._carry(node, op.dest, payload, op.tag)
            else:
                self.env.process(self._carry(node, op.dest, payload, op.tag))  # on its own
                o = self.send_overhead_s  # the sender's time inside the call (LogP's o)
                if self.send_cost is not None:  # a program's, by size
                    o = self.send_cost.seconds(payload.nbytes)
                if o:
                    yield self.env.timeout(o)
            # NOTE: `_charge` with no message, inline (the message path): all comm
            self.logs[node.rank].charge_collective(0.0, self.env._now - t0, payload.nbytes, 0)
            return
        if not self.eager_bytes:  # no protocols measured: done when the bytes have left
            yield from self._carry(node, op.dest, payload, op.tag)
        elif (
            (host := self.cores.get(node.rank))
            and self.cores.get(op.dest) is host
            and host.cores > 1
            and not self.over_tcp  # (over TCP the kernel holds the bytes: no copy on cores)
        ):
            yield from self._copy_on_cores(node, op, host)  # (on one core they take turns)
        else:  # rendezvous: its bytes move once the receiver has posted its receive (MPI's
            # request to send, answered), and it is done when the receiver has the message
            yield from self._blocked(node, self._receiving(op.dest, node.rank, op.tag))
            taken = self.env.event()
            yield from self._carry(node, op.dest, payload, op.tag, "oneway", taken)
            yield from self._blocked(node, taken)
        self.logs[node.rank].charge_collective(0.0, self.env._now - t0, payload.nbytes, 0)

    def _bsend(self, node, op):
        """Process step: a buffered Send past the eager limit through this machine's shared
        memory, as MPICH's ``Bsend`` does it: the sender copies the message into its attached
        buffer and goes on; the receiver reads it from there when it takes it (its single copy,
        the transfer on its own). With a core to each rank the copy writes the bytes the
        receivers of the last buffered message read from that buffer on their cores (`_copy_s`,
        their share of this one); past the cores, warm (a reader that ran on the sender's own
        core, or whose lines its next turns evicted, leaves nothing to wait for).

        Why: the asynchronous server's reply through shared memory, 2 ranks, took 262 us a
        step measured (slow phase, 2026-12-05) against 86 simulated as a transfer the sender
        waited out; the copy into 670 KB a peer had read took 261 us in that calibration. With
        4 ranks on 2 cores in the same minutes its replies took 30-100 us (the median by
        worker), 260 at the p90."""
        rank, nbytes = node.rank, op.payload.nbytes
        share = 0.0 if rank in self.cores else min(1.0, self._bsend_read[rank] / nbytes)
        yield self.env.timeout(self._copy_s(nbytes, share))
        self._bsend_read[rank] = nbytes
        self.env.process(self._carry(node, op.dest, op.payload, op.tag))

    def _copied_by_ranks(self, source, dest):
        """Whether a message from ``source`` to ``dest`` is copied through shared memory by
        the two ranks' own CPUs (MPICH's shared-memory copy, each rank its half): two ranks of
        one host, or any two of a one-machine profile (its measured costs, no token buckets).
        Between hosts a NIC or the kernel moves the bytes. (A network has ``machine_copies``
        only for such a profile: `sim.cluster._machine_copies`.)"""
        network = self.network
        return bool(network.machine_copies) or network.host_of[source] == network.host_of[dest]

    def _recv(self, node, op):
        t0, rank = self.env._now, node.rank
        probed = self.probe_cost is not None and self._probes(rank, op)
        if self.cores:
            message = yield from self._take(node, op.source, op.tag, t0 if probed else None)
        else:  # NOTE: `_take` and `_posted` inline, no call more per message (the message path)
            request = self.network.mailbox[rank].get(op.source, op.tag)
            if self._post_waiters.get(rank):
                self._wake_senders(rank, op.source, op.tag)
            try:
                message = yield request
            except simpy.Interrupt:
                request.cancel()
                raise
            later_s = self._later_s(message, t0) if probed else 0.0
            if later_s:  # seen from the probe loop, then taken
                yield self.env.timeout(later_s)
            if message.taken is not None:
                message.taken.succeed()
        if op.reduces and self.gamma:  # the reduction's arithmetic, inside the collective
            yield self.env.timeout(combined_s(self._adds[node.rank], message.payload.nbytes))
        if op.buf is None and self.wire is not None:  # a message read from its wire bytes
            yield self.env.timeout(self.wire.read())
        # NOTE: `_charge` of the one message, inline (the message path; the driver has its own
        # copy of this without protocols: no probe loop)
        if self._entered[rank]:  # a step of a collective entered through a barrier: all comm
            waited = 0.0
        else:  # the wait until its bytes began to move (a peer not ready), or were seen
            waited = message.started - t0
            if waited < 0.0:
                waited = 0.0
            elif probed and waited:  # ... from the probe loop, which the real clock's wait ends
                seen = waited + self.probe_cost.seen.seconds(message.payload.nbytes)
                waited = min(seen, self.env._now - t0)
        payload = message.payload
        self.logs[rank].charge_collective(waited, self.env._now - t0 - waited, 0, payload.nbytes)
        if op.buf is None:
            return message.source, payload
        if type(payload) is _NDARRAY:  # NOTE: `_copy_into` inline (the message path)
            op.buf[...] = payload
        else:
            np.copyto(op.buf, payload)
        return message.source, op.buf

    def _sendrecv(self, node, op):
        """Post the receive, carry the send out inline, then take what came (no process)."""
        t0, payload, source, tag = self.env._now, op.payload, op.source, op.tag
        host = self._copying_cores(node.rank)
        if host is not None:
            outgoing = {op.dest: payload}
            message = (
                yield from self._copies_on_cores(node, host, outgoing, (source,), tag, "sendrecv")
            )[source]
        else:
            request = self._posted(node, source, tag)
            try:
                yield from self._carry(node, op.dest, payload, tag, "sendrecv")
                message = (
                    (yield from self._blocked(node, request)) if self.cores else (yield request)
                )
            except simpy.Interrupt:
                request.cancel()  # or it would take a message meant for the program's next Recv
                raise
        if op.reduces and self.gamma:  # the reduction's arithmetic, inside the collective
            yield self.env.timeout(combined_s(self._adds[node.rank], message.payload.nbytes))
        if (  # a library's step into bytes it sent away, which their receiver read from its
            # memory (MPICH's single copy): the write waits for that core's lines. Where the
            # step is priced at the clean costs (the programs' Allreduce in place): the
            # `-written` tables' repetitions hold one already, and our own collectives' later
            # steps are measured in situ. 2 ranks, 256 KiB, slow phase: the allgather's
            # Sendrecv 135 us against the reduce-scatter's 50 (docs/validation.md, "MPI's
            # allgather into the halves it sent away")
            op.rewrites_sent
            and self.copy_read_by_peer is not None
            and self._in_library[node.rank]
            and not self._written[node.rank]
            and op.buf.nbytes > self.eager_bytes
        ):
            yield self.env.timeout(self._rewrite_s(op.buf.nbytes))
        self._charge(node, t0, (message,), payload.nbytes)
        if type(message.payload) is _NDARRAY:  # NOTE: `_copy_into` inline (a ring's step)
            op.buf[...] = message.payload
        else:
            np.copyto(op.buf, message.payload)
        return op.buf

    def _barrier(self, node, peers_of_round, library=False):
        """Rounds of empty messages (send to one peer, take from another per round), as the real
        backend's timed entry; the whole time is wait. ``peers_of_round``: (dest, source) per
        round, or lists of peers for one round of exchange with each. ``library``: one call of
        MPI's Barrier (its own cost once, its messages from inside it), not the program's own
        messages."""
        t0, empty, sooner = self.env._now, np.empty(0, np.uint8), 0.0
        for dests, sources in peers_of_round:
            requests = [self._posted(node, source, _BARRIER_TAG) for source in sources]
            try:
                sending = [
                    self.env.process(
                        self.network.transfer(
                            node.rank, dest, 0, _BARRIER_TAG, empty, "sendrecv", None, sooner
                        )
                    )
                    for dest in dests
                ]
                for request in requests:
                    if self.cores:
                        yield from self._blocked(node, request)
                    else:
                        yield request
                yield self.env.all_of(sending)
            except simpy.Interrupt:
                for request in requests:
                    request.cancel()
                raise
            if library:  # the next round is sent from inside MPI's Barrier
                sooner = self.call_overhead_s
        self.logs[node.rank].charge("wait", self.env._now - t0)

    def _enter_collective(self, node):
        """The dissemination barrier before a collective, with ``entry_barrier``."""
        if self.entry_barrier and node.size > 1:
            rank, size = node.rank, node.size
            rounds = [
                ([(rank + 2**k) % size], [(rank - 2**k) % size])
                for k in range(math.ceil(math.log2(size)))
            ]
            yield from self._barrier(node, rounds, library=True)  # MPI's Barrier

    def _allreduce(self, node, op):
        yield from self._enter_collective(node)
        program = allreduce_program(op.algo, op.buf, node.rank, node.size, self.mpi)
        if op.algo == "mpi":  # MPI's Allreduce: one call of the library
            yield from self._collective(node, program, library=True)
        else:  # our own algorithm: every step a call of its own, each after the first
            # sending what it has just added or received (priced so where measured)
            yield from self._collective(node, program, writes="after_receive")
        finishing = self._finishing(op, node.size)
        if finishing:  # comm, as the real backend's clock counts it
            yield from self._comm_for(node, finishing)
        return finish_reduction(op.buf, op.op, node.size)

    def _finishing(self, op, size):
        """Seconds of turning an allreduce's sum into its mean: one pass over the buffer, as
        measured in situ (``finish``) or at gamma a byte (the real backend's comm pays it too,
        on bytes half just received)."""
        return mean_pass_s(op.op, op.buf.nbytes, size, self.finish, self.gamma)

    def _exchange(self, node, op):
        if self.entry_barrier and op.payloads:  # an empty token with every peer first
            yield from self._barrier(node, [(list(op.payloads), list(op.payloads))])
        if self.copy_read_by_peer is not None:
            for payload in op.payloads.values():
                self._read_from(node.rank, payload)
        t0, copies = self.env._now, {}  # one snapshot per distinct payload (gossip: one vector)
        messages = not all(op.bufs.get(peer) is not None for peer in op.payloads)
        if messages and self.wire is not None:  # each peer's message written to wire bytes
            yield self.env.timeout(sum(self.wire.write(p.nbytes) for p in op.payloads.values()))
        host = self._copying_cores(node.rank)
        if host is not None:
            taken = yield from self._copies_on_cores(
                node, host, op.payloads, list(op.payloads), op.tag, self._exchange_pattern
            )
        else:
            sending = [
                self._transfer(node, peer, payload, op.tag, copies)
                for peer, payload in op.payloads.items()
            ]
            taken = {}
            for peer in op.payloads:
                taken[peer] = yield from self._take(node, peer, op.tag)
            yield self.env.all_of(sending)
        if messages and self.wire is not None:  # and each one received read from its bytes
            yield self.env.timeout(self.wire.read() * len(taken))
        sent = sum(payload.nbytes for payload in op.payloads.values())
        # after the entry barrier's tokens, the exchange's whole time is comm (the real clock's)
        self._charge(node, t0, taken.values(), sent, split=not self.entry_barrier)
        if not messages:  # into the buffers, as MPI
            for peer, message in taken.items():
                _copy_into(op.bufs[peer], message.payload)
            return {peer: op.bufs[peer] for peer in taken}
        return {peer: m.payload for peer, m in taken.items()}  # objects: read-only copies

    def _copying_cores(self, rank):
        """The `HostCores` ``rank`` shares, where its messages through shared memory are
        copied on cores (`_copies_on_cores`: more ranks than cores, not over TCP, protocols
        measured), else None."""
        host = self.cores.get(rank)
        return host if host is not None and not self.over_tcp and self.eager_bytes else None

    def _copies_on_cores(self, node, host, outgoing, sources, tag, pattern):
        """Process step: the messages ``outgoing`` ({dest: payload}) sent and one from each of
        ``sources`` taken, by a rank that shares cores through shared memory, as MPICH moves
        them there; returns ``{source: message}``. A message past the eager limit to a rank of
        the same cores is announced (its request to send), and its receiver copies it on its
        own core, the whole copy (measured as ``pattern``), one message after another as
        their announcements come; the others go as they would elsewhere (each on its own),
        and are taken as they land.

        Why: MPICH's single copy (CMA) runs in the receiver's call and holds its core, so a
        rank's copies take turns, and past the cores they take turns with the other ranks'
        work. Measured (2026-12-05, 2 cores, after a barrier, medians of 250 calls a rank, fast
        phase): a ring's Sendrecv of 167 KB took 21 us at 2 ranks and 52-58 at 4, gossip's
        exchange of 670 KB 60 and 286; simulated with every copy moving on its own (a
        calibration whose 2 ranks took 27 and 106), 28 and 251 at 4."""
        rank, env, eager = node.rank, self.env, self.eager_bytes
        copied, sending, copies = [], [], {}
        for dest, payload in outgoing.items():
            if payload.nbytes <= eager or self.cores.get(dest) is not host:
                sending.append(self._transfer(node, dest, payload, tag, copies, pattern))
                continue
            written = self._written[rank] and _WRITTEN_PATTERN[pattern]
            measured = written if written in self.network.costs else pattern
            copied.append(done := env.event())
            snapshot = _snapshot_once(copies, payload)
            announcement = (payload.nbytes, snapshot, measured, self._sooner[rank], done, env.now)
            self._announcements(rank, dest, tag).put(announcement)
        waiting = {  # each source's announcement, or its message come on its own
            source: (self._announcements(source, rank, tag).get(), self._posted(node, source, tag))
            for source in sources
        }
        taken = {}
        try:
            while waiting:  # each copied on this rank's core as it is announced
                events = [event for pair in waiting.values() for event in pair]
                yield from self._blocked(node, env.any_of(events))
                for source, (announced, landed) in list(waiting.items()):
                    if landed.triggered:  # (it came on its own)
                        announced.cancel()
                        del waiting[source]
                        taken[source] = landed.value
                        _hand_over(landed)
                    elif announced.triggered:
                        del waiting[source]
                        nbytes, snapshot, measured, sooner, done, since = announced.value
                        landed.callbacks.insert(0, _hand_over)  # copied: its sender is done
                        yield from self.network.transfer(
                            source, rank, nbytes, tag, snapshot, measured, done, sooner
                        )
                        message = taken[source] = yield landed  # the whole copy on its core
                        message.started = since  # the wait ends with its announcement
        except simpy.Interrupt:  # nothing left waiting to take a later call's message
            for announced, landed in waiting.values():
                announced.cancel()
                landed.cancel()
            raise
        yield from self._blocked(node, env.all_of(copied + sending))
        return taken

    def _read_from(self, rank, payload):
        """Note that ``payload``, sent past the eager limit through the machine's shared
        memory, is read by its receiver from ``rank``'s memory (MPICH's single copy): where
        it is ``rank``'s parameters, its next update writes them (`_rewrite_params_s`); else
        it is what its next Compute writes again (a worker's gradient, `_compute`)."""
        if (
            type(payload) is not _NDARRAY
            or payload.nbytes <= self.eager_bytes
            or self._in_collective[rank]  # a collective's aftermath is measured in situ
        ):
            return
        params = self._params[rank]
        if params is not None and np.shares_memory(payload, params):
            self._params_read[rank] = max(self._params_read[rank], payload.nbytes)
        else:
            self._sent_read[rank] = max(self._sent_read[rank], payload.nbytes)

    def _rewrite_s(self, nbytes):
        """Seconds more a write of ``nbytes`` takes into bytes another rank has just read
        than warm: the machine's copy into such bytes less its warm copy."""
        read = float(self.copy_read_by_peer.seconds(nbytes))
        warm = float(self.local_copy.seconds(nbytes)) if self.local_copy is not None else 0.0
        return max(read - warm, 0.0)

    def _rewrite_params_s(self, node, log):
        """Seconds more the update after a large receive takes to write ``node``'s parameters
        that a peer has read since their last write (noted by `_read_from`), charged to
        ``log`` as compute: the machine's copy into bytes another rank has just read less its
        warm copy of as many bytes (``copy_read_by_peer``, ``local_copy``), once.

        Why: a write to lines another core has read waits for them. A synchronous server's
        update after its workers' pushes writes the weights they read from it the step before,
        gossip's mixing the weights its neighbours have just read; through this machine's
        shared memory, 2 ranks, that update took 487-519 us a step measured and 254 simulated
        in a round calibrated and run in the slow phase, whose copy into 670 KB a peer had
        read took 281 us against 15 warm (2026-12-05). The programs' gradients and their
        allreduce's mean pass are measured in situ and hold theirs already."""
        nbytes, self._params_read[node.rank] = self._params_read[node.rank], 0
        seconds = self._rewrite_s(nbytes)
        log.charge("compute", seconds)
        return seconds

    def _announcements(self, source, dest, tag):
        """The queue of ``source``'s messages to ``dest`` with ``tag`` announced and not yet
        copied (`_copies_on_cores`)."""
        store = self._announced.get((source, dest, tag))
        if store is None:
            store = self._announced[source, dest, tag] = simpy.Store(self.env)
        return store

    def _allgather(self, node, op):
        """The real backend's allgather of compressed messages: their wire bytes gathered by
        the algorithm the MPI library picks for blocks of that size; where the sizes vary
        (``threshold``), an allgather of the sizes, then the bytes around the ring (MPICH's
        Allgatherv picks as its Allgather does; the ring stands for all of its choices)."""
        yield from self._enter_collective(node)
        rank, size, wire = node.rank, node.size, to_wire(op.payload)
        handled = self.wire is not None and size > 1
        if handled:  # its wire bytes written before they move (comm, as the real clock has
            # it), and what MPI's Allgather took past its messages in the measured program
            yield from self._comm_for(node, self.wire.write(len(wire)))
            if self.wire.allgather_extra_s:
                yield from self._comm_for(node, self.wire.allgather_extra())
        if size_varies(op.payload):
            length = np.array([len(wire)], np.int64)
            lengths = yield from self._collective(
                node,
                ALLGATHERS[allgather_algorithm(self.mpi, 8, size)](length, rank, size),
                library=True,
            )
            program = ring_allgather(wire, rank, size, lengths=[int(n[0]) for n in lengths])
        else:
            algorithm = allgather_algorithm(self.mpi, len(wire), size)
            program = ALLGATHERS[algorithm](wire, rank, size)
        blocks = yield from self._collective(node, program, library=True)  # MPI's Allgather(v)
        if handled:  # and the others' read after
            yield from self._comm_for(node, (size - 1) * self.wire.read())
        return [op.payload if r == rank else from_wire(blocks[r]) for r in range(size)]

    def _comm_for(self, node, seconds):
        """``seconds`` of the program's own work inside a communication call: comm."""
        yield self.env.timeout(seconds)
        self.logs[node.rank].charge("comm", seconds)

    def _library_call(self, node, op):
        if op.copies_bytes and self.local_copy is not None:  # its copy of the send buffer
            yield from self._comm_for(node, self._copy_s(op.copies_bytes, op.read_by_peers))
        return (yield from self._collective(node, op.program, library=True, writes=op.writes))

    def _copy_s(self, nbytes, read_by_peers):
        """Seconds of an MPI call's copy of ``nbytes`` into its own buffer, ``read_by_peers``
        of which the other ranks read last: that share at ``copy_read_by_peer`` where
        measured, the rest (or all) at ``local_copy``."""
        warm = float(self.local_copy.seconds(nbytes))
        if not read_by_peers or self.copy_read_by_peer is None:
            return warm
        read = float(self.copy_read_by_peer.seconds(nbytes))
        return (1.0 - read_by_peers) * warm + read_by_peers * read

    def _collective(self, node, program, library=False, writes="never"):
        """Carry out a collective node program (`SendRecv` steps and the like) for ``node``;
        return what it returns. ``library``: the program is one call of the MPI library, whose
        first step follows the program, as a step of the measured hot loop does, and every
        later one is sent from inside the library, ``call_overhead_s`` sooner than that loop
        has it. ``writes``: which of its messages carry bytes it has just written
        (`LibraryCall`)."""
        sooner = self.call_overhead_s if library else 0.0
        reply, rank = None, node.rank
        entered, inside = self._entered[rank], self._in_collective[rank]
        in_library = self._in_library[rank]
        self._entered[rank] = self.entry_barrier  # its steps' seconds all comm, as measured
        self._in_collective[rank] = True
        self._in_library[rank] = library
        self._written[rank] = writes == "always"
        if library:  # its adds are the library's, in C
            self._adds[rank] = self.library_gamma
        try:
            while True:
                try:
                    step = program.send(reply)
                except StopIteration as done:
                    return done.value
                reply = yield from self._handlers[type(step)](node, step)
                if sooner:
                    self._sooner[rank] = sooner
                if writes == "after_receive" and type(step) in (Recv, SendRecv):
                    self._written[rank] = True  # it forwards what it has received
        finally:
            self._entered[rank] = entered
            self._in_collective[rank] = inside
            self._in_library[rank] = in_library
            self._written[rank] = False
            self._adds[rank] = self.gamma
            if sooner:
                self._sooner[rank] = 0.0

    def _evaluate(self, node, op):
        """A rendezvous of every live node (or the reporter alone) that takes no simulated time."""
        members = len(self.nodes) - len(self.faults.failed) if op.collective else 1
        key = (op.iteration, op.collective)
        arrived = self._arrivals.setdefault(key, {})
        arrived[node.rank] = op
        if len(arrived) < members:
            return (
                yield from self._blocked(
                    node, self._arrivals.setdefault((key, "done"), self.env.event()), False
                )
            )
        result = self._evaluate_now(arrived)
        done = self._arrivals.setdefault((key, "done"), self.env.event())
        done.succeed(result)
        del self._arrivals[key]
        yield self.env.timeout(0)
        return result

    def _evaluate_now(self, arrived):
        """Evaluate and log; eval_s is 0: an evaluation takes no simulated time (and a run
        folder of simulated times stays the same from run to run)."""
        reporter = self.nodes[0].reporter
        ops = [arrived[r] for r in sorted(arrived)]
        op = arrived.get(reporter, ops[0])
        result, train_loss, consensus = evaluate_for_log(
            op.fn,
            [o.params for o in ops] if op.average else [op.params],
            [o.train_loss for o in ops],
            op.average,
        )
        totals = [self.logs[r].node_totals() for r in sorted(arrived)] if len(ops) > 1 else None
        self.logs[reporter].evaluation(
            op.epoch,
            op.iteration,
            self.env._now,
            train_loss,
            *result,
            0.0,
            consensus_distance=consensus,
            node_totals=totals,
        )
        return result
